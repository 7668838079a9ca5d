"""Per-request timeline: when each request was resident, and how many tokens it stored.

Built from the ``requests`` table alone (lifecycle events), in bulk Polars operations:

* **segments**: resident intervals, one per admission; a preemption ends one and a resume starts
  the next. Where the source does not state the admission, the start is inferred: the first token
  (the request was surely resident by then) or, failing that, the arrival (an upper bound on
  residency). A segment without a stated end ends at the next engine reset or at the end of the
  trace; where the node's source never states a finish, also at the moment its contract would be
  spent at the observed decode rate (a source that states finishes would have stated it).
* **knots**: points ``(ts, tokens)`` of stored tokens (prompt + generated so far) per segment,
  linear in between. Stated knots come from the source (admission with the prompt, first token,
  progress, a final count); model knots extrapolate at the decode rate, capped by the contract
  (``prompt_tokens + max_tokens``).

Every figure read from the timeline carries its basis:

* ``exact`` - bracketed by stated points of a request whose progress the source states;
* ``modelled`` - bracketed by stated points (admission, final count) of a request without progress
  statements: growth in between is modelled as linear;
* ``bounded`` - after the last statement: only the contract bounds it (``low`` is what was last
  stated, ``high`` is ``prompt_tokens + max_tokens``); the value is the decode-rate model.

Internally requests and segments carry integer ids (``rid``, ``sid``; requests in the order they
first appear) and every table stays in that order, so that per-request windows are single passes
(:mod:`oomtrace.analysis.grouped`), not millions of groups, and nothing is sorted twice: see
:mod:`oomtrace.analysis.lifecycle`. The knots are kept compact (``points``: ``sid, rid, ts,
tokens, stated``); :attr:`Timeline.knots` adds the request's keys for readers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Literal

import polars as pl

from oomtrace.analysis import grouped as g
from oomtrace.analysis.admission import infer_admissions
from oomtrace.analysis.grouped import per_request
from oomtrace.analysis.knots import KEYS, close_open_segments, model_knots
from oomtrace.analysis.kvmodel import KVModel
from oomtrace.analysis.lifecycle import ENDS, ID, INSIDE, Lifecycle, lifecycle, summarize
from oomtrace.analysis.rate import NS_PER_S, DecodeRate, decode_rate
from oomtrace.schema import TS

__all__ = [
    "ENDS",
    "KEYS",
    "NS_PER_S",
    "RESETS",
    "Basis",
    "DecodeRate",
    "Timeline",
    "build_timeline",
    "decode_rate",
    "lit_ts",
    "per_request",
    "summarize_requests",
]

Basis = Literal["exact", "modelled", "bounded"]

_STATED_BLOCKS_COLUMNS: dict[str, Any] = {"rid": ID, "ts": TS, "kv_blocks": pl.Int64}
STATED_BLOCKS: Final = pl.Schema(_STATED_BLOCKS_COLUMNS)

OPENS: Final = ("admitted", "resumed")
CLOSES: Final = ("preempted", "finished", "aborted")
RESETS: Final = ("engine_dead", "engine_start")


def lit_ts(value: datetime) -> pl.Expr:
    """A timestamp literal in the canonical type: comparing a nanosecond column with a bare
    Python datetime (microseconds) would truncate the column first."""
    return pl.lit(value, dtype=TS)


@dataclass(frozen=True)
class Timeline:
    """Per-request tables (see the module docstring). ``requests`` has one row per request
    (row ``rid - 1``); ``segments`` one per resident interval (row ``sid - 1``); ``points`` the
    stored-token points of each segment (``sid, rid, ts, tokens, stated``), sorted by segment and
    time."""

    requests: pl.DataFrame
    segments: pl.DataFrame
    points: pl.DataFrame
    rate: DecodeRate
    kv: KVModel
    # ``rid, ts, kv_blocks``: the blocks the engine itself said a request held (the vLLM
    # plugin), in ``(rid, ts)`` order; empty where no source states them
    blocks: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=STATED_BLOCKS))

    @property
    def knots(self) -> pl.DataFrame:
        """The points with their request's keys (``sid, rid, node, request_id, seg, ts, tokens,
        stated``): for readers; the analysis itself works on :attr:`points`."""
        keys = self.segments.select("sid", *KEYS)
        return self.points.join(keys, on="sid", how="left", maintain_order="left").select(
            "sid", "rid", *KEYS, "ts", "tokens", "stated"
        )


def summarize_requests(requests: pl.DataFrame) -> pl.DataFrame:
    """One row per ``(node, request_id)``: times of each lifecycle step and the stated counts
    (the largest stated, where stated more than once); ``contract_tokens`` is ``prompt_tokens +
    max_tokens``; ``rid`` is an internal key (row ``rid - 1``)."""
    return summarize(lifecycle(requests))


def build_timeline(
    requests: pl.DataFrame | pl.LazyFrame,
    kv: KVModel,
    *,
    trace_end: dict[str, datetime],
    resets: pl.DataFrame,
    rate: DecodeRate | None = None,
    samples: pl.DataFrame | None = None,
    max_model_len: int | None = None,
) -> Timeline:
    """Segments and knots for every request (see the module docstring).

    ``requests`` is the canonical lifecycle table, in memory or as a lazy frame (a Parquet scan
    is read one column at a time, never whole). ``trace_end`` maps each node to the last moment
    its trace covers; ``resets`` holds ``node, ts`` of engine deaths and (re)starts, which end
    every open residency. Without a ``rate``, the decode rate is measured from the requests (or
    from ``samples``' throughput).
    """
    return timeline_of(
        lifecycle(requests),
        kv,
        trace_end=trace_end,
        resets=resets,
        rate=rate,
        samples=samples if samples is not None else pl.DataFrame(),
        max_model_len=max_model_len,
    )


def timeline_of(
    life: Lifecycle,
    kv: KVModel,
    *,
    trace_end: dict[str, datetime],
    resets: pl.DataFrame,
    rate: DecodeRate | None,
    samples: pl.DataFrame,
    max_model_len: int | None,
) -> Timeline:
    """:func:`build_timeline` from a lifecycle already in request order (the caller can let the
    requests table go first: on a long trace it is the largest thing in memory). The
    lifecycle's events are taken (and freed) on the way."""
    summary = summarize(life)
    if rate is None:
        rate = decode_rate(summary, samples)
    events = life.take_events()
    blocks = _stated_blocks(events)
    # Only these columns are read from here on: the stated counts (summarised above) go now, not
    # after the classification (about a quarter of a gigabyte on a day of two million requests).
    events = events.select("rid", "ts", "event", "output_tokens")
    ev = _classified(events, summary)  # the events go once classified
    del events
    segments = infer_admissions(_segments(ev, summary, rate), summary, samples, resets)
    # The knots read only these: the rest goes before they are built (the timeline's peak).
    ev = ev.select("sid", "rid", "ts", "event", "output_tokens", "role")
    stated = _stated_knots(ev, segments, summary)
    del ev
    segments = close_open_segments(segments, stated, summary, trace_end, resets, rate)
    points = model_knots(stated, segments, summary, rate, max_model_len)
    return Timeline(summary, segments, points, rate, kv, blocks)


def _stated_blocks(events: pl.DataFrame) -> pl.DataFrame:
    if "kv_blocks" not in events.columns:
        return pl.DataFrame(schema=STATED_BLOCKS)
    return events.filter(pl.col("kv_blocks").is_not_null()).select(STATED_BLOCKS.names())


# Residency roles of events, as small integers (compared millions of times).
NONE, OPEN, IN, CLOSE = 0, 1, 2, 3


def _classified(events: pl.DataFrame, summary: pl.DataFrame) -> pl.DataFrame:
    """Events with their residency role, the segment they belong to, and the stated output so
    far. A request is resident after an admission, a resume or a token; not after a close."""
    event = pl.col("event")
    admitting = summary.filter(pl.col("admitted_ts").is_not_null())["node"].unique().implode()
    # Where the node's source never states admissions (vLLM V1 logs "Added request" when a request
    # enters the engine, not when it is scheduled), a request with no token statement may have
    # been resident from its arrival: its arrival opens a segment, an upper bound on residency.
    node_states_admission = per_request(summary["node"].is_in(admitting))
    arrival_opens = (event == "arrived") & ~node_states_admission & (pl.col("token_events") == 0)
    role = (
        pl.when(event.is_in(OPENS) | arrival_opens)
        .then(pl.lit(OPEN, pl.Int8))
        .when(event.is_in(INSIDE))
        .then(pl.lit(IN, pl.Int8))
        .when(event.is_in(CLOSES))
        .then(pl.lit(CLOSE, pl.Int8))
        .otherwise(pl.lit(NONE, pl.Int8))
    )
    resident_after = (
        pl.when(pl.col("role").is_in([OPEN, IN]))
        .then(pl.lit(1, pl.Int8))
        .when(pl.col("role") == CLOSE)
        .then(pl.lit(0, pl.Int8))
    )
    # An abort of a request that was not resident is a waiting-queue abort when the source states
    # admissions; when it never does, the request may have been running: it closes a segment.
    waiting_abort = (event == "aborted") & node_states_admission
    begins = (pl.col("resident_before") == 0) & (
        pl.col("role").is_in([OPEN, IN]) | ((pl.col("role") == CLOSE) & ~waiting_abort)
    )
    in_segment = pl.col("role").is_in([OPEN, IN]) | (
        (pl.col("role") == CLOSE) & ((pl.col("resident_before") == 1) | begins)
    )
    return (
        events.lazy()
        .select("rid", "ts", "event", "output_tokens")
        .with_columns(token_events=per_request(summary["token_events"]))
        .with_columns(role=role)
        .with_columns(resident_after=g.forward_fill(resident_after, "rid"))
        .with_columns(
            resident_before=g.prev(pl.col("resident_after"), "rid").fill_null(0),
            prev_ts=g.prev(pl.col("ts"), "rid"),
            output_before=g.prev(g.forward_fill(pl.col("output_tokens"), "rid"), "rid"),
        )
        .with_columns(begins=begins, in_segment=in_segment)
        .with_columns(seg=g.cum_sum(pl.col("begins").cast(pl.Int32), "rid"))
        .filter(pl.col("in_segment"))
        .with_columns(sid=g.group_id("rid", "seg").cast(ID).set_sorted())
        .drop("begins", "in_segment", "resident_after", "resident_before", "token_events")
        .collect()
    )


def _segments(ev: pl.DataFrame, summary: pl.DataFrame, rate: DecodeRate) -> pl.DataFrame:
    """One row per segment from the first and the last of its rows (a segment's rows are
    consecutive): no grouping."""
    prompt_tokens = per_request(summary["prompt_tokens"])  # per request, not held per event
    first = ev.filter(g.is_first("sid")).select(
        "sid",
        "rid",
        "seg",
        prompt_tokens.fill_null(0).alias("prompt"),
        prompt_tokens.alias("prompt_tokens"),
        first_role="role",
        first_event=pl.col("event").cast(pl.String),
        first_ts="ts",
        prev_ts="prev_ts",
        start_output="output_before",
    )
    last = ev.filter(g.is_last("sid")).select(
        last_role="role", last_ts="ts", last_event="event", last_output="output_tokens"
    )
    close = pl.col("last_role") == CLOSE
    segments = first.hstack(last).select(
        "sid",
        per_request(summary["node"]).alias("node"),
        per_request(summary["request_id"]).alias("request_id"),
        "seg",
        "rid",
        "prompt",
        "prompt_tokens",
        "first_role",
        "first_event",
        "first_ts",
        "prev_ts",
        end_ts=pl.when(close).then(pl.col("last_ts")),
        end_event=pl.when(close).then(pl.col("last_event").cast(pl.String)),
        end_output=pl.when(close).then(pl.col("last_output")),
        start_output="start_output",
    )
    # A segment that begins at its close (no admission, no token stated): it started at the
    # previous event (the arrival, an upper bound), or, with nothing before, output/rate earlier.
    back = pl.duration(nanoseconds=0)
    if rate.tokens_per_s:
        # a product with a constant, never a quotient (see oomtrace.analysis.pool)
        nanoseconds = pl.col("end_output").fill_null(0) * (NS_PER_S / rate.tokens_per_s)
        back = pl.duration(nanoseconds=nanoseconds.cast(pl.Int64))
    start_ts = (
        pl.when(pl.col("first_role") != CLOSE)
        .then(pl.col("first_ts"))
        .when(pl.col("prev_ts").is_not_null())
        .then(pl.col("prev_ts"))
        .otherwise(pl.col("first_ts") - back)
    )
    start_basis = (
        pl.when(pl.col("first_role") == OPEN)
        .then(pl.col("first_event"))
        .when(pl.col("first_role") == IN)
        .then(pl.lit("first_token"))
        .when(pl.col("prev_ts").is_not_null())
        .then(pl.lit("arrived"))
        .otherwise(pl.lit("rate"))
    )
    return segments.with_columns(
        start_ts=start_ts.cast(TS), start_basis=start_basis, end_basis=pl.col("end_event")
    ).drop("first_role", "first_event", "first_ts", "prev_ts", "end_event")


def _stated_knots(ev: pl.DataFrame, segments: pl.DataFrame, summary: pl.DataFrame) -> pl.DataFrame:
    """Knots the source states: the start (prompt plus output stated before), each token count,
    and a close with its count. Sorted by segment, time and order: a segment's start comes before
    its points (it is never later than its first event), and its points are in event order, so
    the two runs are merged on ``(sid, order)``, not sorted."""
    start = segments.select(
        "sid",
        "rid",
        ts=pl.col("start_ts"),
        tokens=(pl.col("prompt") + pl.col("start_output").fill_null(0)).cast(pl.Float64),
        stated=pl.col("prompt_tokens").is_not_null(),
        order=pl.lit(0, pl.Int8),
    )
    counted = (
        pl.when(pl.col("event") == "first_token")
        .then(pl.col("output_tokens").fill_null(1))
        .otherwise(pl.col("output_tokens"))
    )
    points = ev.filter(pl.col("role").is_in([IN, CLOSE]) & counted.is_not_null()).select(
        "sid",
        "rid",
        "ts",
        tokens=(per_request(summary["prompt_tokens"]).fill_null(0) + counted).cast(pl.Float64),
        stated=pl.lit(value=True),
        order=pl.lit(1, pl.Int8),
    )
    return g.merge_runs([start, points])
