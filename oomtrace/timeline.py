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

* ``exact`` — bracketed by stated points of a request whose progress the source states;
* ``modelled`` — bracketed by stated points (admission, final count) of a request without progress
  statements: growth in between is modelled as linear;
* ``bounded`` — after the last statement: only the contract bounds it (``low`` is what was last
  stated, ``high`` is ``prompt_tokens + max_tokens``); the value is the decode-rate model.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final, Literal

import polars as pl

from oomtrace.analysis.kvmodel import KVModel
from oomtrace.schema import TS

Basis = Literal["exact", "modelled", "bounded"]
BASES: Final[tuple[Basis, ...]] = ("exact", "modelled", "bounded")

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
KEYS: Final = ["node", "request_id", "seg"]
NS_PER_S: Final = 1_000_000_000


def lit_ts(value: datetime) -> pl.Expr:
    """A timestamp literal in the canonical type: comparing a nanosecond column with a bare
    Python datetime (microseconds) would truncate the column first."""
    return pl.lit(value, dtype=TS)


@dataclass(frozen=True)
class DecodeRate:
    """Tokens one resident request generates per second, as observed in this trace."""

    tokens_per_s: float | None
    basis: Literal["requests", "engine_throughput", "none"]
    statement: str


@dataclass(frozen=True)
class Timeline:
    """Per-request tables (see the module docstring). ``requests`` has one row per request."""

    requests: pl.DataFrame
    segments: pl.DataFrame
    knots: pl.DataFrame
    rate: DecodeRate
    kv: KVModel


def summarize_requests(requests: pl.DataFrame) -> pl.DataFrame:
    """One row per ``(node, request_id)``: times of each lifecycle step and the stated counts."""
    ev = _sorted_events(requests)
    ts, event = pl.col("ts"), pl.col("event")
    return (
        ev.group_by("node", "request_id", maintain_order=True)
        .agg(
            arrived_ts=ts.filter(event == "arrived").min(),
            first_seen_ts=ts.min(),
            admitted_ts=ts.filter(event == "admitted").min(),
            first_token_ts=ts.filter(event == "first_token").min(),
            end_ts=ts.filter(event.is_in(ENDS)).max(),
            end_event=event.filter(event.is_in(ENDS)).last(),
            prompt_tokens=pl.col("prompt_tokens").drop_nulls().first(),
            max_tokens=pl.col("max_tokens").drop_nulls().first(),
            cached_tokens=pl.col("cached_tokens").drop_nulls().first(),
            output_tokens=pl.col("output_tokens").max(),
            preemptions=(event == "preempted").sum().cast(pl.Int64),
            progress_stated=((event == "progress") & pl.col("output_tokens").is_not_null())
            .sum()
            .cast(pl.Int64),
            states_admission=(event == "admitted").any(),
        )
        .with_columns(contract_tokens=pl.col("prompt_tokens") + pl.col("max_tokens"))
    )


def _sorted_events(requests: pl.DataFrame) -> pl.DataFrame:
    rank = pl.col("event").replace_strict(_RANK, return_dtype=pl.Int8)
    return requests.with_columns(rank=rank).sort("node", "request_id", "ts", "rank")


def decode_rate(summary: pl.DataFrame, samples: pl.DataFrame) -> DecodeRate:
    """The per-request decode rate: the median over requests whose source states both the decode
    time and the count; else engine generation throughput per running request; else unknown."""
    start = pl.coalesce("first_token_ts", "admitted_ts")
    generated = pl.col("output_tokens") - pl.col("first_token_ts").is_not_null().cast(pl.Int64)
    per_request = (
        summary.filter(
            (pl.col("end_event") == "finished")
            & (pl.col("output_tokens") >= 2)
            & start.is_not_null()
        )
        .with_columns(seconds=(pl.col("end_ts") - start).dt.total_nanoseconds() / NS_PER_S)
        .filter(pl.col("seconds") > 0)
        .select(rate=generated / pl.col("seconds"))
    )
    if per_request.height >= 3:
        rate = float(per_request["rate"].median())  # type: ignore[arg-type]
        return DecodeRate(
            rate,
            "requests",
            f"median of {per_request.height:,} finished requests: {rate:.1f} tokens/s each",
        )
    engine = _engine_rate(samples)
    if engine is not None:
        return DecodeRate(
            engine,
            "engine_throughput",
            f"engine generation throughput per running request (median): {engine:.1f} tokens/s",
        )
    return DecodeRate(None, "none", "no decode rate: open requests stay at their last statement")


def _engine_rate(samples: pl.DataFrame) -> float | None:
    wide = samples.filter(
        pl.col("metric").is_in(["generation_throughput_tokens_per_s", "requests_running"])
    )
    if wide.is_empty():
        return None
    per_ts = (
        wide.group_by("node", "ts", "metric")
        .agg(pl.col("value").max())
        .pivot(on="metric", index=["node", "ts"], values="value")
    )
    if not {"generation_throughput_tokens_per_s", "requests_running"} <= set(per_ts.columns):
        return None
    rates = per_ts.filter(pl.col("requests_running") > 0).select(
        pl.col("generation_throughput_tokens_per_s") / pl.col("requests_running")
    )
    rates = rates.filter(pl.all() > 0)
    return None if rates.is_empty() else float(rates.to_series().median())  # type: ignore[arg-type]


def build_timeline(
    requests: pl.DataFrame,
    kv: KVModel,
    *,
    trace_end: dict[str, datetime],
    resets: pl.DataFrame,
    rate: DecodeRate,
    max_model_len: int | None = None,
) -> Timeline:
    """Segments and knots for every request (see the module docstring).

    ``trace_end`` maps each node to the last moment its trace covers; ``resets`` holds
    ``node, ts`` of engine deaths and (re)starts, which end every open residency.
    """
    summary = summarize_requests(requests)
    ev = _classified(requests, summary)
    segments = _segments(ev, rate)
    stated = _stated_knots(ev, segments)
    segments = _close_open_segments(segments, stated, summary, trace_end, resets, rate)
    knots = _model_knots(stated, segments, summary, rate, max_model_len)
    return Timeline(summary, segments, knots, rate, kv)


def _classified(requests: pl.DataFrame, summary: pl.DataFrame) -> pl.DataFrame:
    """Events with their residency role, the segment they belong to, and the stated output so
    far. A request is resident after an admission, a resume or a token; not after a close."""
    ev = _sorted_events(requests.drop("prompt_tokens", "max_tokens", "cached_tokens")).join(
        summary.select("node", "request_id", "prompt_tokens", "max_tokens"),
        on=["node", "request_id"],
        how="left",
    )
    event = pl.col("event")
    per_request = ["node", "request_id"]
    # Where the node's source never states admissions (vLLM V1 logs "Added request" when a request
    # enters the engine, not when it is scheduled), a request with no token statement may have
    # been resident from its arrival: its arrival opens a segment, an upper bound on residency.
    node_states_admission = (event == "admitted").any().over("node")
    has_tokens = event.is_in(INSIDE).any().over(per_request)
    arrival_opens = (event == "arrived") & ~node_states_admission & ~has_tokens
    role = (
        pl.when(event.is_in(OPENS) | arrival_opens)
        .then(pl.lit("open"))
        .when(event.is_in(INSIDE))
        .then(pl.lit("inside"))
        .when(event.is_in(CLOSES))
        .then(pl.lit("close"))
        .otherwise(pl.lit("none"))
    )
    ev = ev.with_columns(role=role)
    resident_after = (
        pl.when(pl.col("role").is_in(["open", "inside"]))
        .then(pl.lit(1, pl.Int8))
        .when(pl.col("role") == "close")
        .then(pl.lit(0, pl.Int8))
        .otherwise(pl.lit(None, pl.Int8))
    )
    ev = ev.with_columns(resident_after=resident_after.forward_fill().over(per_request))
    ev = ev.with_columns(
        resident_before=pl.col("resident_after").shift(1).over(per_request).fill_null(0),
        prev_ts=pl.col("ts").shift(1).over(per_request),
        output_before=pl.col("output_tokens").forward_fill().shift(1).over(per_request),
    )
    # An abort of a request that was not resident is a waiting-queue abort when the source states
    # admissions; when it never does, the request may have been running: it closes a segment.
    waiting_abort = (event == "aborted") & node_states_admission
    begins = (pl.col("resident_before") == 0) & (
        pl.col("role").is_in(["open", "inside"]) | ((pl.col("role") == "close") & ~waiting_abort)
    )
    in_segment = pl.col("role").is_in(["open", "inside"]) | (
        (pl.col("role") == "close") & ((pl.col("resident_before") == 1) | begins)
    )
    return ev.with_columns(
        begins=begins,
        seg=begins.cast(pl.Int32).cum_sum().over(per_request),
        in_segment=in_segment,
        prompt=pl.col("prompt_tokens").fill_null(0),
    ).filter(pl.col("in_segment"))


def _segments(ev: pl.DataFrame, rate: DecodeRate) -> pl.DataFrame:
    first = pl.col("role").first()
    close = pl.col("role").last() == "close"
    segments = ev.group_by(KEYS, maintain_order=True).agg(
        first_role=first,
        first_event=pl.col("event").first(),
        first_ts=pl.col("ts").first(),
        prev_ts=pl.col("prev_ts").first(),
        end_ts=pl.when(close).then(pl.col("ts").last()),
        end_event=pl.when(close).then(pl.col("event").last()),
        end_output=pl.when(close).then(pl.col("output_tokens").last()),
        start_output=pl.col("output_before").first(),
    )
    # A segment that begins at its close (no admission, no token stated): it started at the
    # previous event (the arrival, an upper bound), or, with nothing before, output/rate earlier.
    back = (
        pl.duration(
            nanoseconds=(pl.col("end_output") / rate.tokens_per_s * NS_PER_S).cast(pl.Int64)
        )
        if rate.tokens_per_s
        else pl.duration(nanoseconds=0)
    )
    start_ts = (
        pl.when(pl.col("first_role") != "close")
        .then(pl.col("first_ts"))
        .when(pl.col("prev_ts").is_not_null())
        .then(pl.col("prev_ts"))
        .otherwise(pl.col("first_ts") - back.fill_null(pl.duration(nanoseconds=0)))
    )
    start_basis = (
        pl.when(pl.col("first_role") == "open")
        .then(pl.col("first_event"))
        .when(pl.col("first_role") == "inside")
        .then(pl.lit("first_token"))
        .when(pl.col("prev_ts").is_not_null())
        .then(pl.lit("arrived"))
        .otherwise(pl.lit("rate"))
    )
    return segments.with_columns(
        start_ts=start_ts.cast(TS), start_basis=start_basis, end_basis=pl.col("end_event")
    ).select(*KEYS, "start_ts", "start_basis", "end_ts", "end_basis", "end_output", "start_output")


def _stated_knots(ev: pl.DataFrame, segments: pl.DataFrame) -> pl.DataFrame:
    """Knots the source states: the start (prompt plus output stated before), each token count,
    and a close with its count."""
    prompt = pl.col("prompt")
    start = segments.join(
        ev.group_by(KEYS).agg(pl.col("prompt").first(), pl.col("prompt_tokens").first()), on=KEYS
    ).select(
        *KEYS,
        ts=pl.col("start_ts"),
        tokens=(prompt + pl.col("start_output").fill_null(0)).cast(pl.Float64),
        stated=pl.col("prompt_tokens").is_not_null(),
        order=pl.lit(0, pl.Int8),
    )
    counted = (
        pl.when(pl.col("event") == "first_token")
        .then(pl.col("output_tokens").fill_null(1))
        .otherwise(pl.col("output_tokens"))
    )
    points = ev.filter(pl.col("role").is_in(["inside", "close"]) & counted.is_not_null()).select(
        *KEYS,
        "ts",
        tokens=(prompt + counted).cast(pl.Float64),
        stated=pl.lit(True),
        order=pl.lit(1, pl.Int8),
    )
    return pl.concat([start, points]).sort(*KEYS, "ts", "order")


def _close_open_segments(
    segments: pl.DataFrame,
    stated: pl.DataFrame,
    summary: pl.DataFrame,
    trace_end: dict[str, datetime],
    resets: pl.DataFrame,
    rate: DecodeRate,
) -> pl.DataFrame:
    """End every open segment: at the next reset, when its contract would be spent at the decode
    rate, or at the end of the trace, whichever comes first."""
    last = stated.group_by(KEYS).agg(
        last_ts=pl.col("ts").max(), last_tokens=pl.col("tokens").last()
    )
    seg = segments.join(last, on=KEYS, how="left").join(
        summary.select("node", "request_id", "contract_tokens", "first_token_ts"),
        on=["node", "request_id"],
    )
    ends = pl.DataFrame(
        {"node": list(trace_end), "trace_end": list(trace_end.values())},
        schema={"node": pl.String, "trace_end": TS},
    )
    seg = seg.join(ends, on="node", how="left")
    reset_ts = resets.select("node", reset_ts=pl.col("ts")).sort("reset_ts")
    seg = seg.with_columns(anchor=pl.coalesce("last_ts", "start_ts")).sort("anchor")
    seg = seg.join_asof(
        reset_ts,
        left_on="anchor",
        right_on="reset_ts",
        by="node",
        strategy="forward",
        check_sortedness=False,  # both sides sorted just above; polars cannot check with `by`
    )
    spent = pl.lit(None, dtype=TS)
    seg = seg.with_columns(decodes=_decodes())
    if rate.tokens_per_s:
        seconds = (pl.col("contract_tokens") - pl.col("last_tokens")).clip(lower_bound=0) / (
            rate.tokens_per_s
        )
        spent = pl.when(pl.col("decodes")).then(
            pl.col("anchor") + pl.duration(nanoseconds=(seconds * NS_PER_S).cast(pl.Int64))
        )
    # A request still open when the trace ends is resident at its last instant: it leaves one
    # microsecond after (the finest step a Python datetime has), so that look-ups at the trace
    # end still count it.
    after_end = pl.col("trace_end") + pl.duration(microseconds=1)
    candidates = pl.min_horizontal("reset_ts", spent, after_end)
    basis = (
        pl.when(candidates == pl.col("reset_ts"))
        .then(pl.lit("reset"))
        .when(candidates == spent)
        .then(pl.lit("contract"))
        .otherwise(pl.lit("trace_end"))
    )
    open_ = pl.col("end_ts").is_null()
    return (
        seg.with_columns(
            end_ts=pl.when(open_).then(pl.max_horizontal(candidates, "anchor")).otherwise("end_ts"),
            end_basis=pl.when(open_).then(basis).otherwise("end_basis"),
        )
        .select(*KEYS, "start_ts", "start_basis", "end_ts", "end_basis", "end_output")
        .sort(KEYS)
    )


def _decodes() -> pl.Expr:
    """A request decodes once its first token is out. Where the node states first tokens, one
    without a first token is still in prefill and neither grows nor spends its contract; where
    the node never states them, decoding is assumed from the start (an upper bound)."""
    stated = pl.col("first_token_ts").is_not_null()
    return stated | ~stated.any().over("node")


def _model_knots(
    stated: pl.DataFrame,
    segments: pl.DataFrame,
    summary: pl.DataFrame,
    rate: DecodeRate,
    max_model_len: int | None,
) -> pl.DataFrame:
    """Add model knots after the last statement of every segment whose end count is not stated:
    growth at the decode rate, capped by the contract, up to the segment's end."""
    tail = (
        stated.group_by(KEYS)
        .agg(last_ts=pl.col("ts").last(), last_tokens=pl.col("tokens").last())
        .join(segments.select(*KEYS, "end_ts", "end_output"), on=KEYS)
        .join(
            summary.select("node", "request_id", "contract_tokens", "first_token_ts"),
            on=["node", "request_id"],
        )
        .with_columns(decodes=_decodes())
        .filter(pl.col("end_output").is_null())
    )
    cap = pl.col("contract_tokens").cast(pl.Float64)
    if max_model_len:
        cap = cap.fill_null(float(max_model_len))
    # A statement above the contract wins (the contract was misread or not enforced).
    cap = pl.when(cap.is_not_null()).then(pl.max_horizontal(cap, pl.col("last_tokens")))
    span_s = (pl.col("end_ts") - pl.col("last_ts")).dt.total_nanoseconds() / NS_PER_S
    if rate.tokens_per_s:
        room = (cap - pl.col("last_tokens")).clip(lower_bound=0)
        reach_s = pl.when(pl.col("decodes")).then(room / rate.tokens_per_s)
        speed = pl.when(pl.col("decodes")).then(rate.tokens_per_s).otherwise(0.0)
        grown = pl.col("last_tokens") + speed * span_s
        end_tokens = pl.min_horizontal(grown, cap.fill_null(float("inf")))
        cap_ts = pl.col("last_ts") + pl.duration(nanoseconds=(reach_s * NS_PER_S).cast(pl.Int64))
        cap_knots = tail.filter((reach_s < span_s).fill_null(value=False)).select(
            *KEYS, ts=cap_ts, tokens=cap, stated=pl.lit(False), order=pl.lit(2, pl.Int8)
        )
    else:
        end_tokens = pl.col("last_tokens")
        cap_knots = stated.clear().select(*KEYS, "ts", "tokens", "stated", "order")
    end_knots = tail.select(
        *KEYS,
        ts=pl.col("end_ts"),
        tokens=end_tokens,
        stated=pl.lit(False),
        order=pl.lit(3, pl.Int8),
    )
    frames = [stated, cap_knots.cast(stated.schema), end_knots.cast(stated.schema)]
    return pl.concat(frames).sort(*KEYS, "ts", "order").drop("order")
