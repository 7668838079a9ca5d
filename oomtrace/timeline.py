"""Per-request timeline: when each request was resident, and how many tokens it stored.

Built from the ``requests`` table alone (lifecycle events), in bulk Polars operations:

* **segments**: resident intervals, one per admission; a preemption ends one and a resume starts
  the next. Where the source does not state the admission, the start is inferred: the first token
  (the request was surely resident by then) or, failing that, the arrival (an upper bound on
  residency). A segment without a stated end ends at the next engine reset, at the moment its
  contract would be spent at the observed decode rate, or at the end of the trace.
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

Internally requests and segments carry integer ids (``rid``, ``sid``) in sorted order, so that
per-request windows are single passes (:mod:`oomtrace.analysis.grouped`), not millions of groups.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final, Literal

import polars as pl

from oomtrace.analysis import grouped as g
from oomtrace.analysis.grouped import per_request
from oomtrace.analysis.knots import KEYS, close_open_segments, model_knots
from oomtrace.analysis.kvmodel import KVModel
from oomtrace.analysis.rate import NS_PER_S, DecodeRate, decode_rate
from oomtrace.schema import REQUEST_EVENTS, TS

__all__ = [
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

_RANK: Final = {
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
OPENS: Final = ("admitted", "resumed")
INSIDE: Final = ("first_token", "progress")
CLOSES: Final = ("preempted", "finished", "aborted")
ENDS: Final = ("finished", "aborted", "rejected")
RESETS: Final = ("engine_dead", "engine_start")


def lit_ts(value: datetime) -> pl.Expr:
    """A timestamp literal in the canonical type: comparing a nanosecond column with a bare
    Python datetime (microseconds) would truncate the column first."""
    return pl.lit(value, dtype=TS)


@dataclass(frozen=True)
class Timeline:
    """Per-request tables (see the module docstring). ``requests`` has one row per request;
    ``segments`` one per resident interval; ``knots`` the stored-token points of each segment,
    sorted by segment and time."""

    requests: pl.DataFrame
    segments: pl.DataFrame
    knots: pl.DataFrame
    rate: DecodeRate
    kv: KVModel


EVENT_TYPE: Final = pl.Enum(list(REQUEST_EVENTS))


def _sorted_events(requests: pl.DataFrame) -> pl.DataFrame:
    """The lifecycle sorted by request and time, with ``rid`` (1, 2, ... per ``(node,
    request_id)`` in key order) and the event as an enum: integer keys and compares only."""
    return (
        requests.select(
            "ts",
            "node",
            "request_id",
            pl.col("event").cast(EVENT_TYPE),
            "prompt_tokens",
            "max_tokens",
            "output_tokens",
            "cached_tokens",
            rank=pl.col("event").replace_strict(_RANK, return_dtype=pl.Int8),
            rid=pl.struct("node", "request_id").rank("dense").cast(pl.Int64),
        )
        .sort("rid", "ts", "rank")
        .with_columns(pl.col("rid").set_sorted())  # lets group_by("rid") take its sorted path
    )


def summarize_requests(requests: pl.DataFrame) -> pl.DataFrame:
    """One row per ``(node, request_id)``: times of each lifecycle step and the stated counts
    (the largest stated, where stated more than once); ``contract_tokens`` is ``prompt_tokens +
    max_tokens``; ``rid`` is an internal key (row ``rid - 1``)."""
    return _summarize(_sorted_events(requests))


def _summarize(ev: pl.DataFrame) -> pl.DataFrame:
    ts, event = pl.col("ts"), pl.col("event")
    marked = ev.with_columns(
        _arrived=pl.when(event == "arrived").then(ts),
        _admitted=pl.when(event == "admitted").then(ts),
        _first=pl.when(event == "first_token").then(ts),
        _end=pl.when(event.is_in(ENDS)).then(ts),
        _end_event=pl.when(event.is_in(ENDS)).then(event.cast(pl.String)),
        _pre=(event == "preempted").cast(pl.Int64),
        _tok=event.is_in(INSIDE).cast(pl.Int64),
        _prog=((event == "progress") & pl.col("output_tokens").is_not_null()).cast(pl.Int64),
    )
    return (
        marked.group_by("rid", maintain_order=True)
        .agg(
            pl.col("node").first(),
            pl.col("request_id").first(),
            arrived_ts=pl.col("_arrived").min(),
            first_seen_ts=ts.min(),
            admitted_ts=pl.col("_admitted").min(),
            first_token_ts=pl.col("_first").min(),
            end_ts=pl.col("_end").max(),
            end_event=pl.col("_end_event").drop_nulls().last(),
            prompt_tokens=pl.col("prompt_tokens").max(),
            max_tokens=pl.col("max_tokens").max(),
            cached_tokens=pl.col("cached_tokens").max(),
            output_tokens=pl.col("output_tokens").max(),
            preemptions=pl.col("_pre").sum(),
            token_events=pl.col("_tok").sum(),
            progress_stated=pl.col("_prog").sum(),
        )
        .with_columns(contract_tokens=pl.col("prompt_tokens") + pl.col("max_tokens"))
    )


def build_timeline(
    requests: pl.DataFrame,
    kv: KVModel,
    *,
    trace_end: dict[str, datetime],
    resets: pl.DataFrame,
    rate: DecodeRate | None = None,
    samples: pl.DataFrame | None = None,
    max_model_len: int | None = None,
) -> Timeline:
    """Segments and knots for every request (see the module docstring).

    ``trace_end`` maps each node to the last moment its trace covers; ``resets`` holds
    ``node, ts`` of engine deaths and (re)starts, which end every open residency. Without a
    ``rate``, the decode rate is measured from the requests (or from ``samples``' throughput).
    """
    events = _sorted_events(requests)
    summary = _summarize(events)
    if rate is None:
        rate = decode_rate(summary, samples if samples is not None else requests.clear())
    ev = _classified(events, summary)
    del events  # millions of rows: let each intermediate go as soon as it is used
    segments = _segments(ev, rate)
    stated = _stated_knots(ev, segments)
    del ev
    segments = close_open_segments(segments, stated, summary, trace_end, resets, rate)
    knots = model_knots(stated, segments, summary, rate, max_model_len)
    return Timeline(summary, segments, knots, rate, kv)


# Residency roles of events, as small integers (compared millions of times).
NONE, OPEN, IN, CLOSE = 0, 1, 2, 3


def _classified(events: pl.DataFrame, summary: pl.DataFrame) -> pl.DataFrame:
    """Events with their residency role, the segment they belong to, and the stated output so
    far. A request is resident after an admission, a resume or a token; not after a close."""
    event = pl.col("event")
    admitting = events.filter(event == "admitted")["node"].unique().to_list()
    node_states_admission = pl.col("node").is_in(admitting)
    # Where the node's source never states admissions (vLLM V1 logs "Added request" when a request
    # enters the engine, not when it is scheduled), a request with no token statement may have
    # been resident from its arrival: its arrival opens a segment, an upper bound on residency.
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
        .drop("prompt_tokens", "max_tokens", "cached_tokens")
        .with_columns(
            prompt_tokens=per_request(summary["prompt_tokens"]),
            token_events=per_request(summary["token_events"]),
        )
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
        .with_columns(
            sid=g.group_id("rid", "seg").set_sorted(), prompt=pl.col("prompt_tokens").fill_null(0)
        )
        .drop("begins", "in_segment", "resident_after", "token_events")
        .collect()
    )


def _segments(ev: pl.DataFrame, rate: DecodeRate) -> pl.DataFrame:
    close = pl.col("role").last() == CLOSE
    segments = ev.group_by("sid", maintain_order=True).agg(
        pl.col("node").first(),
        pl.col("request_id").first(),
        pl.col("seg").first(),
        pl.col("rid").first(),
        pl.col("prompt").first(),
        pl.col("prompt_tokens").first(),
        first_role=pl.col("role").first(),
        first_event=pl.col("event").first().cast(pl.String),
        first_ts=pl.col("ts").first(),
        prev_ts=pl.col("prev_ts").first(),
        end_ts=pl.when(close).then(pl.col("ts").last()),
        end_event=pl.when(close).then(pl.col("event").last().cast(pl.String)),
        end_output=pl.when(close).then(pl.col("output_tokens").last()),
        start_output=pl.col("output_before").first(),
    )
    # A segment that begins at its close (no admission, no token stated): it started at the
    # previous event (the arrival, an upper bound), or, with nothing before, output/rate earlier.
    back = pl.duration(nanoseconds=0)
    if rate.tokens_per_s:
        seconds = pl.col("end_output").fill_null(0) / rate.tokens_per_s
        back = pl.duration(nanoseconds=(seconds * NS_PER_S).cast(pl.Int64))
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


def _stated_knots(ev: pl.DataFrame, segments: pl.DataFrame) -> pl.DataFrame:
    """Knots the source states: the start (prompt plus output stated before), each token count,
    and a close with its count. Sorted by segment, time and order."""
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
        tokens=(pl.col("prompt") + counted).cast(pl.Float64),
        stated=pl.lit(value=True),
        order=pl.lit(1, pl.Int8),
    )
    return pl.concat([start, points]).sort("sid", "ts", "order")
