"""The requests table of a long trace in one streaming pass: its totals, each request's first and
last event, and the lifecycle of only the requests an incident window holds.

The windowed analysis (:mod:`oomtrace.analysis.windowed`) never builds the timeline of the whole
trace. What the findings say of the whole table (rows, requests, each node's first and last
event, the sources) comes from aggregates Polars computes while streaming the Parquet scan; the
per-request tables are built from the rows of requests resident at some moment of a window
(first event at or before its end, last event at or after its start), read through a filter on
the scan. The values are checked as :func:`oomtrace.analysis.lifecycle.lifecycle` checks them,
over the whole table.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final

import polars as pl

from oomtrace.analysis.trace_scan import Tables
from oomtrace.schema import REQUEST_EVENTS, REQUIRED, TS

Window = tuple[str, datetime, datetime]  # node, start, end

# A request is told apart by a 64-bit hash of its node and id: grouping two million of them by
# an integer takes a third of the memory strings take. Two requests sharing a hash (about one
# chance in ten million for a day's) would count as one and be read together, both modelled.
_KEY: Final = pl.struct("node", "request_id").hash(0x6F6F6D)


@dataclass(frozen=True)
class RequestScan:
    """``ends``: ``_key, node, first, last`` of every request (``_key``: :data:`_KEY`);
    ``rows``: the table's rows; ``sources``: the sources it names."""

    ends: pl.DataFrame
    rows: int
    sources: frozenset[str]

    @property
    def spans(self) -> pl.DataFrame:
        """``node, first, last``: each node's first and last request event."""
        return self.ends.group_by("node").agg(pl.col("first").min(), pl.col("last").max())

    def first_request(self) -> dict[str, datetime]:
        return {str(n): t for n, t in self.spans.select("node", "first").rows()}

    def within(self, requests: pl.LazyFrame, windows: list[Window]) -> pl.LazyFrame:
        """The rows of every request resident at some moment of a window on its node."""
        if not windows:
            return pl.LazyFrame(schema=requests.collect_schema())  # not a scan that finds none
        inside = pl.lit(value=False)
        for node, start, end in windows:
            inside |= (
                (pl.col("node") == node)
                & (pl.col("first") <= pl.lit(end, dtype=TS))
                & (pl.col("last") >= pl.lit(start, dtype=TS))
            )
        picked = self.ends.filter(inside)
        if picked.is_empty():
            return pl.LazyFrame(schema=requests.collect_schema())  # not a scan that finds none
        # their events lie between the first's first and the last's last: a time filter the
        # Parquet scan applies to its row groups, before the hashing
        # (in nanoseconds: a Python datetime would round the last event's time down)
        lo, hi = picked["first"].to_physical().min(), picked["last"].to_physical().max()
        span = pl.col("ts").is_between(pl.lit(lo).cast(TS), pl.lit(hi).cast(TS))
        keyed = requests.filter(span).with_columns(_key=_KEY)
        return keyed.join(picked.lazy().select("_key"), on="_key", how="semi").drop("_key")


def in_windows(windows: list[Window]) -> pl.Expr:
    """Whether a row (``node, ts``) lies in a window on its node."""
    inside = pl.lit(value=False)
    for node, start, end in windows:
        inside |= (pl.col("node") == node) & pl.col("ts").is_between(
            pl.lit(start, dtype=TS), pl.lit(end, dtype=TS)
        )
    return inside


def within(frame: pl.DataFrame, windows: list[Window]) -> pl.DataFrame:
    """The rows of a frame with ``node, ts`` that lie in a window on their node."""
    return frame.filter(in_windows(windows))


def scan_requests(tables: Tables) -> RequestScan:
    """The pass of the module docstring; ``tables.strict()`` when a value fails a check."""
    requests = tables.requests
    named = ("prompt_tokens", "max_tokens", "output_tokens", "kv_blocks")
    counts = [c for c in named if c in requests.collect_schema().names()]
    checks = requests.select(
        rows=pl.len(),
        nulls=pl.sum_horizontal(pl.col(c).null_count() for c in REQUIRED["requests"]),
        unknown=(~pl.col("event").cast(pl.String).is_in(list(REQUEST_EVENTS))).sum(),
        negative=pl.sum_horizontal((pl.col(c) < 0).sum() for c in counts),
        sources=pl.col("source").unique().implode(),
    )
    ends = requests.group_by(_KEY.alias("_key")).agg(
        pl.col("node").first(), first=pl.col("ts").min(), last=pl.col("ts").max()
    )
    # one after the other: collected together, the two plans held three times the memory
    row = checks.collect(engine="streaming").row(0, named=True)
    if row["nulls"] or row["unknown"] or row["negative"]:
        tables.strict()
    return RequestScan(
        ends.collect(engine="streaming"),
        int(row["rows"]),
        frozenset(s for s in row["sources"] if s is not None),
    )
