"""Request lifecycles grouped per request, and one summary row per request.

Part of :mod:`oomtrace.analysis.timeline`. Millions of lifecycle events are put in request order
once:

* requests get integer ids (``rid`` 1, 2, ...) in the order they first appear, from one hash
  grouping of their ``(node, request_id)``: no string is sorted, and since the requests table is
  in time order, the events of consecutive requests sit close together, so that putting every
  event in request order moves rows only a little (a gather that stays in cache);
* within a request, events keep the order of the table; only when some request's events are not
  already in ``(ts, rank)`` order is the whole table sorted by ``(rid, ts, rank)``;
* per-request figures come from the first and last rows of each request's run of rows, from
  ``rle`` counts and from segmented maxima, never from millions of small groups.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import numpy as np
import polars as pl

from oomtrace.analysis import grouped as g
from oomtrace.schema import REQUEST_EVENTS, TS

EVENT_TYPE: Final = pl.Enum(list(REQUEST_EVENTS))
# Order of events stated at the same instant: arrival, admission, tokens, then the close.
RANK: Final = {
    "arrived": 0,
    "admitted": 1,
    "resumed": 1,
    "first_token": 2,
    "progress": 3,
    "preempted": 4,
    "finished": 5,
    "aborted": 5,
    "rejected": 5,
}
ENDS: Final = ("finished", "aborted", "rejected")
INSIDE: Final = ("first_token", "progress")
ID: Final = pl.UInt32  # request and segment ids: four billion of each is plenty
REQUEST_COUNTS: Final = ("prompt_tokens", "max_tokens", "cached_tokens", "output_tokens")
_NULL: Final = np.iinfo(np.int64).min  # stands for "not stated" inside segmented maxima


class Lifecycle:
    """``keys``: ``node, request_id`` per request, row ``rid - 1``. ``events``: ``rid`` (sorted),
    ``ts``, ``event`` (enum), ``rank`` and the stated counts (and ``kv_blocks`` where the trace
    has the column), in ``(rid, ts, rank)`` order.

    The events are the largest table of a timeline build; :meth:`take_events` hands them over
    once, so that they are freed as soon as the taker is done with them."""

    def __init__(self, keys: pl.DataFrame, events: pl.DataFrame) -> None:
        self.keys = keys
        self._events: pl.DataFrame | None = events

    @property
    def events(self) -> pl.DataFrame:
        if self._events is None:
            raise ValueError("the lifecycle's events were already taken")
        return self._events

    def take_events(self) -> pl.DataFrame:
        events = self.events
        self._events = None
        return events


def _as_stated() -> None:
    """Values a check rejects are used as they are (a trace in memory was conformed already)."""


def lifecycle(
    requests: pl.DataFrame | pl.LazyFrame, invalid: Callable[[], None] = _as_stated
) -> Lifecycle:
    """The requests table (canonical columns) in request order; see the module docstring.

    From a lazy frame (a Parquet scan), each column is read once and on its own: the keys to
    number the requests, then every other column put in request order and let go, so that the
    table is never in memory whole. ``invalid`` is called when a value fails a check of
    :func:`oomtrace.schema.conform` (a required value missing, an unknown event, a negative
    count)."""
    frame = requests.lazy()
    keys = frame.select("node", "request_id").collect()
    if keys["node"].has_nulls() or keys["request_id"].has_nulls():
        invalid()
    # One node (the usual trace): the request id alone is the key, one string column to hash.
    by = ["request_id"] if _single(keys["node"]) else ["node", "request_id"]
    grouped = keys.with_row_index("_row").group_by(by, maintain_order=True).agg("_row")
    if by == ["request_id"]:
        grouped = grouped.select(pl.lit(keys["node"][0], pl.String).alias("node"), pl.all())
    del keys
    lengths = grouped["_row"].list.len().to_numpy()
    order = grouped["_row"].explode()
    rid = np.repeat(np.arange(1, grouped.height + 1, dtype=np.uint32), lengths)
    # kv_blocks: what the engine itself says a request held (the vLLM plugin); a trace written
    # before the column existed has none
    stated = ("kv_blocks",) if "kv_blocks" in frame.collect_schema().names() else ()
    columns = {
        name: _column(frame, name, invalid).gather(order)
        for name in ("ts", "event", *REQUEST_COUNTS, *stated)
    }
    ranks = pl.Series([RANK[e] for e in REQUEST_EVENTS], dtype=pl.Int8)
    events = pl.DataFrame(columns).select(
        pl.Series("rid", rid, dtype=ID),
        "ts",
        "event",
        pl.lit(ranks).gather(pl.col("event").to_physical()).alias("rank"),
        *REQUEST_COUNTS,
        *stated,
    )
    if not _in_order(events):
        events = events.sort("rid", "ts", "rank", maintain_order=True)
    return Lifecycle(
        grouped.select("node", "request_id"), events.with_columns(pl.col("rid").set_sorted())
    )


def _single(column: pl.Series) -> bool:
    """Whether every value of the column is the first (and not null)."""
    return column.len() > 0 and bool((column == column[0]).all())


def _column(frame: pl.LazyFrame, name: str, invalid: Callable[[], None]) -> pl.Series:
    """One column of the requests table, checked as ``conform`` checks it."""
    column = frame.select(name).collect().to_series()
    if name in ("ts", "event") and column.has_nulls():
        invalid()
    if name == "event":
        if not column.is_in(list(REQUEST_EVENTS)).all():
            invalid()
        return column.cast(EVENT_TYPE)
    if name in ("prompt_tokens", "max_tokens", "output_tokens", "kv_blocks") and (column < 0).any():
        invalid()
    return column


def _in_order(events: pl.DataFrame) -> bool:
    """Whether every request's events are already in ``(ts, rank)`` order."""
    same = pl.col("rid") == pl.col("rid").shift(1)
    ts, rank = pl.col("ts"), pl.col("rank")
    earlier = (ts < ts.shift(1)) | ((ts == ts.shift(1)) & (rank < rank.shift(1)))
    return not events.select((same & earlier).any()).item()


def _scatter(n: int, rid: pl.Series, values: pl.Series, fill: int | None = None) -> pl.Series:
    """A per-request column (row ``rid - 1``) holding ``values`` at their ``rid``, else ``fill``."""
    out = pl.Series(values.name, [], dtype=values.dtype).extend_constant(fill, n)
    return out.scatter(rid.cast(pl.Int64) - 1, values) if rid.len() else out


def _first_where(ev: pl.DataFrame, n: int, mask: pl.Expr, column: str) -> pl.Series:
    rows = ev.filter(mask).select("rid", column).filter(g.is_first("rid"))
    return _scatter(n, rows["rid"], rows[column])


def _count_where(ev: pl.DataFrame, n: int, mask: pl.Expr, name: str) -> pl.Series:
    runs = ev.filter(mask)["rid"].rle().struct.unnest()
    return _scatter(n, runs["value"], runs["len"].cast(pl.Int64).alias(name), fill=0)


def _max_per_request(ev: pl.DataFrame, starts: np.ndarray, column: str) -> pl.Series:
    """The largest stated value of each request (null when none is stated): one segmented
    reduction over the request-ordered column."""
    values = ev[column].fill_null(_NULL).to_numpy()
    maxima = pl.Series(column, np.maximum.reduceat(values, starts), dtype=pl.Int64)
    return maxima.set(maxima == _NULL, None)


def summarize(life: Lifecycle) -> pl.DataFrame:
    """One row per request (see :func:`oomtrace.analysis.timeline.summarize_requests`)."""
    ev, n = life.events, life.keys.height
    if n == 0:
        return _empty_summary(life)
    starts = np.flatnonzero(ev.select(g.is_first("rid")).to_series().to_numpy())
    event = pl.col("event")
    ends = ev.filter(event.is_in(ENDS)).select("rid", "ts", "event").filter(g.is_last("rid"))
    return (
        life.keys.with_columns(
            rid=pl.int_range(1, n + 1, dtype=ID),
            arrived_ts=_first_where(ev, n, event == "arrived", "ts"),
            first_seen_ts=ev["ts"].gather(starts),
            admitted_ts=_first_where(ev, n, event == "admitted", "ts"),
            first_token_ts=_first_where(ev, n, event == "first_token", "ts"),
            end_ts=_scatter(n, ends["rid"], ends["ts"]),
            end_event=_scatter(n, ends["rid"], ends["event"].cast(pl.String)),
            **{c: _max_per_request(ev, starts, c) for c in REQUEST_COUNTS},
            preemptions=_count_where(ev, n, event == "preempted", "preemptions"),
            token_events=_count_where(ev, n, event.is_in(INSIDE), "token_events"),
            progress_stated=_count_where(
                ev, n, (event == "progress") & pl.col("output_tokens").is_not_null(), "progress"
            ),
        )
        .with_columns(contract_tokens=pl.col("prompt_tokens") + pl.col("max_tokens"))
        .select(SUMMARY.names())
    )


_SUMMARY_COLUMNS: dict[str, Any] = {
    "rid": ID,
    "node": pl.String,
    "request_id": pl.String,
    "arrived_ts": TS,
    "first_seen_ts": TS,
    "admitted_ts": TS,
    "first_token_ts": TS,
    "end_ts": TS,
    "end_event": pl.String,
    "prompt_tokens": pl.Int64,
    "max_tokens": pl.Int64,
    "cached_tokens": pl.Int64,
    "output_tokens": pl.Int64,
    "preemptions": pl.Int64,
    "token_events": pl.Int64,
    "progress_stated": pl.Int64,
    "contract_tokens": pl.Int64,
}
SUMMARY: Final = pl.Schema(_SUMMARY_COLUMNS)


def _empty_summary(life: Lifecycle) -> pl.DataFrame:
    return pl.DataFrame(schema=SUMMARY)
