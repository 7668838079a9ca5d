"""Knots after the last statement, and ends for residencies the source never closed.

Part of :mod:`oomtrace.analysis.timeline`: a segment whose end count is not stated grows at the
decode rate from its last statement, capped by its contract; a segment without a stated end ends at
the next engine reset or just after the trace ends; where the node's source never states a finish,
also when its contract would be spent (a source that states finishes would have stated this one).
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

import polars as pl

from oomtrace.analysis import grouped as g
from oomtrace.analysis.grouped import per_request
from oomtrace.analysis.rate import NS_PER_S, DecodeRate
from oomtrace.schema import TS

KEYS: Final = ["node", "request_id", "seg"]


def _decodes(summary: pl.DataFrame) -> pl.Expr:
    """A request decodes once its first token is out. Where the node states first tokens, one
    without a first token is still in prefill and neither grows nor spends its contract; where
    the node never states them, decoding is assumed from the start (an upper bound)."""
    stating = summary.filter(pl.col("first_token_ts").is_not_null())["node"].unique().to_list()
    return pl.col("first_token_ts").is_not_null() | ~pl.col("node").is_in(stating)


def _tails(stated: pl.DataFrame, segments: pl.DataFrame, summary: pl.DataFrame) -> pl.DataFrame:
    """Per segment: its last stated knot, its contract and whether it decodes. Every segment has
    a stated start, so the last stated knots line up with the segments, row for row."""
    last = stated.filter(g.is_last("sid")).select(
        last_ts=pl.col("ts"), last_tokens=pl.col("tokens")
    )
    return (
        segments.hstack(last)
        .with_columns(
            contract_tokens=per_request(summary["contract_tokens"]),
            first_token_ts=per_request(summary["first_token_ts"]),
        )
        .with_columns(decodes=_decodes(summary))
    )


def close_open_segments(
    segments: pl.DataFrame,
    stated: pl.DataFrame,
    summary: pl.DataFrame,
    trace_end: dict[str, datetime],
    resets: pl.DataFrame,
    rate: DecodeRate,
) -> pl.DataFrame:
    """End every open segment: at the next reset, at the end of the trace, or (on a node whose
    source never states a finish) when its contract would be spent at the decode rate, whichever
    comes first."""
    ends = {node: pl.Series([end], dtype=TS)[0] for node, end in trace_end.items()}
    seg = _tails(stated, segments, summary).with_columns(
        trace_end=pl.col("node").replace_strict(ends, default=None, return_dtype=TS),
        anchor=pl.coalesce("last_ts", "start_ts"),
    )
    resorted = not resets.is_empty()
    if resorted:
        seg = seg.sort("anchor").join_asof(
            resets.select("node", reset_ts=pl.col("ts")).sort("reset_ts"),
            left_on="anchor",
            right_on="reset_ts",
            by="node",
            strategy="forward",
            check_sortedness=False,  # both sides sorted just above; polars cannot check with `by`
        )
    else:
        seg = seg.with_columns(reset_ts=pl.lit(None, dtype=TS))
    spent = pl.lit(None, dtype=TS)
    if rate.tokens_per_s:
        room = (pl.col("contract_tokens") - pl.col("last_tokens")).clip(lower_bound=0)
        # a product with a constant, never a quotient by one: Polars divides by multiplying with
        # the reciprocal except on a one-row column, so a request's figures would depend on how
        # many others share the frame (see oomtrace.analysis.pool)
        nanoseconds = (room * (NS_PER_S / rate.tokens_per_s)).cast(pl.Int64)
        # Where the node's source states finishes, a request without one had not finished: it
        # was still running, preempted or waiting when the trace ended (or the engine reset).
        stating = summary.filter(pl.col("end_event") == "finished")["node"].unique().implode()
        spent = pl.when(pl.col("decodes") & ~pl.col("node").is_in(stating)).then(
            pl.col("anchor") + pl.duration(nanoseconds=nanoseconds)
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
    closed = seg.with_columns(
        end_ts=pl.when(open_)
        .then(pl.max_horizontal(candidates, "anchor"))
        .otherwise("end_ts")
        .cast(TS),
        end_basis=pl.when(open_).then(basis).otherwise("end_basis"),
    ).select(
        "sid",
        "rid",
        *KEYS,
        "start_ts",
        "start_basis",
        "start_latest",
        "end_ts",
        "end_basis",
        "end_output",
        "prompt",
        "prompt_tokens",
    )
    return closed.sort("sid") if resorted else closed


def model_knots(
    stated: pl.DataFrame,
    segments: pl.DataFrame,
    summary: pl.DataFrame,
    rate: DecodeRate,
    max_model_len: int | None,
) -> pl.DataFrame:
    """Add model knots after the last statement of every segment whose end count is not stated:
    growth at the decode rate, capped by the contract, up to the segment's end. Returns the
    timeline's points: ``sid, rid, ts, tokens, stated``, sorted by segment and time."""
    tail = _tails(stated, segments, summary).filter(pl.col("end_output").is_null())
    cap = pl.col("contract_tokens").cast(pl.Float64)
    if max_model_len:
        cap = cap.fill_null(float(max_model_len))
    # A statement above the contract wins (the contract was misread or not enforced).
    cap = pl.when(cap.is_not_null()).then(pl.max_horizontal(cap, pl.col("last_tokens")))
    # products with constants, never quotients (see close_open_segments)
    span_s = (pl.col("end_ts") - pl.col("last_ts")).dt.total_nanoseconds() * (1 / NS_PER_S)
    if rate.tokens_per_s:
        room = (cap - pl.col("last_tokens")).clip(lower_bound=0)
        reach_s = pl.when(pl.col("decodes")).then(room * (1 / rate.tokens_per_s))
        speed = pl.when(pl.col("decodes")).then(rate.tokens_per_s).otherwise(0.0)
        grown = pl.col("last_tokens") + speed * span_s
        end_tokens = pl.min_horizontal(grown, cap.fill_null(float("inf")))
        cap_ts = pl.col("last_ts") + pl.duration(nanoseconds=(reach_s * NS_PER_S).cast(pl.Int64))
        cap_knots = tail.filter((reach_s < span_s).fill_null(value=False)).select(
            "sid",
            "rid",
            ts=cap_ts,
            tokens=cap,
            stated=pl.lit(value=False),
            order=pl.lit(2, pl.Int8),
        )
    else:
        end_tokens = pl.col("last_tokens")
        cap_knots = stated.clear()
    end_knots = tail.select(
        "sid",
        "rid",
        ts=pl.col("end_ts"),
        tokens=end_tokens,
        stated=pl.lit(value=False),
        order=pl.lit(3, pl.Int8),
    )
    # Model knots come after every stated knot of their segment (never earlier than its last),
    # the cap before the end: the three runs merge on (sid, order).
    knots = g.merge_runs([stated, cap_knots.cast(stated.schema), end_knots.cast(stated.schema)])
    return knots.select("sid", "rid", pl.col("ts").cast(TS), "tokens", "stated")
