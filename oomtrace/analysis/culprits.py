"""Culprits, shares and the admission ledger at a peak.

Ranking (the same for the ledger and the culprits, so a reader can check it by hand):

1. resident at the peak (only resident requests hold memory);
2. bytes held at the peak (tokens when there is no bytes model), largest first;
3. growth in the window before the peak (a request admitted inside the window grew by all it holds);
   for a pool that filled, whose window reaches back to where its rise began, growth comes first:
   what took the pool from its normal level to full;
4. admitted inside the window before those admitted earlier; then the request id.

For a transient peak the culprits are instead the requests in prefill at the peak, by the prompt
tokens they had to process (prompt minus cached), largest first.

Shares: ``share = bytes / max(observed, explained)`` where ``explained`` is the sum over every
resident request (scaled down where that sum was capped at the engine's own figure); so the shares
of the ledger sum to the coverage (``explained / observed``, capped at 1) and never exceed 1 in
total.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import polars as pl

from oomtrace.analysis.findings import Culprit, Ledger, LedgerRow
from oomtrace.analysis.grouped import per_request
from oomtrace.analysis.step_bytes import StepEstimate
from oomtrace.analysis.timeline import Timeline, lit_ts
from oomtrace.analysis.window import residents_with_ids
from oomtrace.units import format_bytes


@dataclass(frozen=True)
class Residents:
    """Requests resident at a peak, ranked, with their figures and the denominator of shares."""

    frame: pl.DataFrame
    explained_bytes: int | None
    denominator: int | None


def residents(
    timeline: Timeline,
    node: str,
    peak_ts: datetime,
    window_start: datetime,
    *,
    by_growth: bool = False,
) -> pl.DataFrame:
    """Per resident request at ``peak_ts``: figures at the peak, growth since ``window_start``,
    whether admitted inside the window and whether in prefill, ranked (see module docstring;
    ``by_growth``: growth first, for a pool that filled over the window)."""
    now = residents_with_ids(timeline, node, peak_ts)
    before = (
        residents_with_ids(timeline, node, window_start)
        .group_by("rid")
        .agg(tokens_before=pl.col("tokens").sum())
    )
    summary = timeline.requests
    on_node = summary.filter(pl.col("node") == node)
    states_first_token = on_node["first_token_ts"].is_not_null().any()
    # a source that names preempted requests (a V0 log, the vLLM plugin, which states every
    # request's blocks and would have stated its preemption too) makes a count of 0 a figure
    states_preemptions = bool((on_node["preemptions"] > 0).any()) or not timeline.blocks.is_empty()
    first = pl.col("first_token_ts")
    in_prefill = (
        pl.when(first.is_not_null())
        .then(first > lit_ts(peak_ts))
        .when(pl.col("progress_stated") > 0)
        .then(pl.lit(value=False))
        .when(pl.lit(states_first_token))
        .then(pl.lit(value=True))
        .otherwise(pl.lit(None, dtype=pl.Boolean))
    )
    columns = (
        "arrived_ts",
        "first_token_ts",
        "prompt_tokens",
        "max_tokens",
        "cached_tokens",
        "contract_tokens",
        "progress_stated",
        "preemptions",
    )
    frame = (
        _engine_blocks(timeline, now, peak_ts)
        .join(before, on="rid", how="left")
        .with_columns(per_request(summary[c]).alias(c) for c in columns)
        .with_columns(
            growth_tokens=pl.col("tokens") - pl.col("tokens_before").fill_null(0),
            admitted_in_window=pl.col("start_ts") >= lit_ts(window_start),
            in_prefill=in_prefill,
            reserved_bytes=timeline.kv.bytes_expr(pl.col("contract_tokens")),
            states_preemptions=pl.lit(states_preemptions),
        )
        .drop("sid", "rid")
    )
    held = [pl.col("bytes").fill_null(-1), pl.col("tokens").fill_null(-1)]
    grew = [pl.col("growth_tokens").fill_null(-1)]
    return frame.sort(
        *(grew + held if by_growth else held + grew),
        "admitted_in_window",
        "request_id",
        descending=[True, True, True, True, False],
        nulls_last=True,
    )


def _engine_blocks(timeline: Timeline, now: pl.DataFrame, at: datetime) -> pl.DataFrame:
    """Where the engine itself said what a resident request held (the vLLM plugin: at its
    admission, at every block it added, at every snapshot), its latest statement at ``at`` in
    the current residency replaces the blocks modelled from the tokens, and the bytes follow:
    the ledger is then the engine's own. ``blocks_basis`` says which it is."""
    stated = timeline.blocks
    if stated.is_empty() or now.is_empty():
        # no source states blocks: the basis column says nothing (the tokens' basis stands)
        return now.with_columns(blocks_basis=pl.lit(None, pl.String))
    latest = (
        stated.filter(pl.col("rid").is_in(now["rid"].implode()) & (pl.col("ts") <= lit_ts(at)))
        .group_by("rid")
        .agg(pl.col("ts").last().alias("stated_ts"), pl.col("kv_blocks").last())
    )
    per_block = timeline.kv.bytes_per_block
    in_residency = pl.col("stated_ts") >= pl.col("start_ts")
    engine = pl.col("kv_blocks").is_not_null() & in_residency
    return (
        now.join(latest, on="rid", how="left")
        .with_columns(
            blocks=pl.when(engine).then(pl.col("kv_blocks")).otherwise(pl.col("blocks")),
            bytes=pl.when(engine & pl.lit(per_block is not None))
            .then(pl.col("kv_blocks") * (per_block or 0))
            .otherwise(pl.col("bytes")),
            blocks_basis=pl.when(engine).then(pl.lit("engine")).otherwise(pl.lit("modelled")),
        )
        .drop("stated_ts", "kv_blocks")
    )


def _preemptions(row: dict[str, Any]) -> int | None:
    """Times the request was preempted, where the trace states preemptions by request (the
    summary counts 0 for every request of a trace that never does: that is not a figure)."""
    return row["preemptions"] if row.get("states_preemptions") else None


def modelled_bytes(frame: pl.DataFrame) -> int | None:
    """What the model counts the resident requests holding (None without a bytes model)."""
    return int(frame["bytes"].sum()) if frame["bytes"].is_not_null().any() else None


def with_shares(
    frame: pl.DataFrame, observed_bytes: int | None, explained_bytes: int | None = None
) -> Residents:
    """Shares of the observed peak; see the module docstring for the denominator.
    ``explained_bytes`` is the model's count capped at the engine's own figure: each request
    keeps its part of the model, scaled to what is explained, so the shares sum to the
    coverage."""
    modelled = modelled_bytes(frame)
    explained = modelled if explained_bytes is None else explained_bytes
    denominator = max(observed_bytes or 0, explained or 0) or None
    scale = explained / modelled if explained is not None and modelled else 1.0
    shares = (
        (pl.col("bytes").fill_null(0) * scale / denominator).alias("share")
        if denominator
        else pl.lit(0.0).alias("share")
    )
    return Residents(frame.with_columns(shares), modelled, denominator)


def prefill_candidates(
    frame: pl.DataFrame, window_start: datetime, steps: tuple[StepEstimate, ...] = ()
) -> pl.DataFrame:
    """Requests in prefill at the peak (or, where the source never states first tokens, admitted
    inside the window), by the bytes their step needs (``steps``; token equivalents without the
    model's widths), else by uncached prompt tokens."""
    uncached = pl.col("prompt_tokens") - pl.col("cached_tokens").fill_null(0)
    maybe = pl.col("in_prefill").fill_null(pl.col("start_ts") >= lit_ts(window_start))
    weights = pl.DataFrame(
        {
            "request_id": [e.request_id for e in steps],
            "step_weight": [e.weight for e in steps],
            "step_tokens": [e.step_tokens for e in steps],
            "step_parameter": [e.parameter for e in steps],
            "step_bytes": [e.bytes for e in steps],
        },
        schema={
            "request_id": pl.String,
            "step_weight": pl.Float64,
            "step_tokens": pl.Int64,
            "step_parameter": pl.String,
            "step_bytes": pl.Int64,
        },
    )
    return (
        frame.filter(maybe)
        .with_columns(uncached_tokens=uncached)
        .join(weights, on="request_id", how="left")
        .sort(
            pl.col("step_weight").fill_null(-1),
            pl.col("uncached_tokens").fill_null(-1),
            "request_id",
            descending=[True, True, False],
        )
    )


def _ago(later: datetime, earlier: datetime | None) -> str:
    if earlier is None:
        return "an unknown time"
    seconds = max((later - earlier).total_seconds(), 0.0)
    return str(timedelta(seconds=round(seconds))) if seconds >= 60 else f"{seconds:.1f} s"


def _figure(row: dict[str, Any]) -> str:
    tokens = row["tokens"]
    if tokens is None:
        return "an unknown number of tokens"
    text = f"{tokens:,} tokens"
    if row["bytes"] is not None:
        text += f" ({format_bytes(row['bytes'])})"
    if row["basis"] == "bounded":
        high = f"{row['tokens_high']:,}" if row["tokens_high"] is not None else "no stated limit"
        text += f", bounded: between {row['tokens_low']:,} and {high}"
    else:
        text += f", {row['basis']}"
    return text


def _prefill_reason(row: dict[str, Any], peak_ts: datetime) -> str:
    """Why a request is named at a transient peak: stated in prefill, or (where the inputs state
    no first tokens) admitted inside the window, which is all that is known."""
    prompt = row["prompt_tokens"]
    size = f"a {prompt:,}-token prompt" if prompt is not None else "a prompt of unstated length"
    if row["in_prefill"]:
        reason = f"in prefill at the peak with {size}"
    else:
        reason = (
            f"admitted {_ago(peak_ts, row['start_ts'])} before the peak with {size} (the inputs "
            "state no first tokens: it may have been in prefill)"
        )
    if row["cached_tokens"]:
        reason += f" ({row['cached_tokens']:,} cached)"
    if row["in_prefill"]:
        reason += f"; resident for {_ago(peak_ts, row['start_ts'])}"
    return reason


def _step_reason(row: dict[str, Any]) -> str:
    """What the request's share of the step is estimated to need."""
    if row.get("step_tokens") is None or (
        row.get("step_parameter") is None and row.get("step_bytes") is None
    ):
        return ""  # a plain prompt without the model's widths: the prompt says it all
    what = {
        "prompt_logprobs": "prompt_logprobs over each prompt token of its chunk",
        "n": "several sequences sampled in parallel (n)",
        "best_of": "several sequences sampled in parallel (best_of)",
        "logprobs": "logprobs",
    }.get(row.get("step_parameter") or "")
    text = f"; its step: {row['step_tokens']:,} tokens" + (f" with {what}" if what else "")
    if row.get("step_bytes") is not None:
        text += f", an estimated {format_bytes(row['step_bytes'])}"
    return text


def culprits(
    ranked: Residents,
    *,
    transient: bool,
    peak_ts: datetime,
    window_start: datetime,
    top: int,
    basis_label: str,
    steps: tuple[StepEstimate, ...] = (),
    by_growth: bool = False,
) -> tuple[Culprit, ...]:
    """The top ``top`` culprits with the reason for each rank (``by_growth``: ranked by their
    growth while a pool filled, see :func:`residents`)."""
    frame = ranked.frame
    if transient:
        frame = prefill_candidates(frame, window_start, steps)
    out = []
    for rank, row in enumerate(frame.head(top).iter_rows(named=True), start=1):
        if transient:
            reason = _prefill_reason(row, peak_ts) + _step_reason(row)
        elif by_growth and row["growth_tokens"] is not None:
            reason = f"grew {row['growth_tokens']:,} tokens while the pool filled" + (
                " (admitted during that rise)" if row["admitted_in_window"] else ""
            )
            reason += f"; held {_figure(row)} when it was full"
            if ranked.denominator:
                reason += f", {row['share']:.1%} of {basis_label}"
            reason += f"; resident for {_ago(peak_ts, row['start_ts'])}"
        else:
            reason = f"held {_figure(row)} at the peak"
            if ranked.denominator:
                reason += f", {row['share']:.1%} of {basis_label}"
            reason += f"; resident for {_ago(peak_ts, row['start_ts'])}"
            if row["admitted_in_window"]:
                reason += ", admitted inside the window"
            elif row["growth_tokens"] is not None:
                reason += f", grew {row['growth_tokens']:,} tokens in the window"
        out.append(
            Culprit(
                rank=rank,
                request_id=row["request_id"],
                share=float(row["share"]),
                tokens=row["tokens"],
                tokens_low=row["tokens_low"],
                tokens_high=row["tokens_high"],
                basis=row["basis"],
                blocks=row["blocks"],
                bytes=row["bytes"],
                prompt_tokens=row["prompt_tokens"],
                max_tokens=row["max_tokens"],
                growth_tokens=row["growth_tokens"],
                arrived=row["arrived_ts"],
                resident_since=row["start_ts"],
                resident_since_basis=row["start_basis"],
                admitted_in_window=bool(row["admitted_in_window"]),
                in_prefill=row["in_prefill"],
                reason=reason,
                preemptions=_preemptions(row),
                blocks_basis=row["blocks_basis"],
                step_tokens=row.get("step_tokens"),
                step_parameter=row.get("step_parameter"),
                step_bytes=row.get("step_bytes"),
            )
        )
    return tuple(out)


def ledger(
    ranked: Residents,
    *,
    ts: datetime,
    pool_tokens: int | None,
    pool_bytes: int | None,
    observed_used_bytes: int | None,
    waiting_requests: int | None,
    engine_running: int | None = None,
) -> Ledger:
    """The admission ledger at ``ts``: rows in rank order, totals and what the pool had left."""
    frame = ranked.frame
    rows = tuple(
        LedgerRow(
            request_id=r["request_id"],
            prompt_tokens=r["prompt_tokens"],
            max_tokens=r["max_tokens"],
            reserved_tokens=r["contract_tokens"],
            reserved_bytes=r["reserved_bytes"],
            stored_tokens=r["tokens"],
            stored_low=r["tokens_low"],
            stored_high=r["tokens_high"],
            basis=r["basis"],
            blocks=r["blocks"],
            stored_bytes=r["bytes"],
            share=float(r["share"]),
            resident_since=r["start_ts"],
            resident_since_basis=r["start_basis"],
            preemptions=_preemptions(r),
            blocks_basis=r["blocks_basis"],
        )
        for r in frame.iter_rows(named=True)
    )
    unknown = int(frame["contract_tokens"].null_count())
    stored_bytes = ranked.explained_bytes
    return Ledger(
        ts=ts,
        rows=rows,
        resident_requests=frame.height,
        stored_tokens=int(frame["tokens"].fill_null(0).sum()),
        stored_bytes=stored_bytes,
        reserved_tokens=int(frame["contract_tokens"].sum()) if frame.height > unknown else None,
        reserved_bytes=int(frame["reserved_bytes"].sum())
        if frame["reserved_bytes"].is_not_null().any()
        else None,
        unknown_contracts=unknown,
        pool_tokens=pool_tokens,
        pool_bytes=pool_bytes,
        remaining_bytes=pool_bytes - min(stored_bytes, pool_bytes)
        if pool_bytes and stored_bytes is not None
        else None,
        observed_used_bytes=observed_used_bytes,
        remaining_observed_bytes=pool_bytes - min(observed_used_bytes, pool_bytes)
        if pool_bytes and observed_used_bytes is not None
        else None,
        waiting_requests=waiting_requests,
        engine_running=engine_running,
    )
