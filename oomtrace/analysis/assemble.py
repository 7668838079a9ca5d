"""One incident, assembled: residents at the peak, class, coverage, culprits, ledger, breakdown."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import polars as pl

from oomtrace.analysis import culprits as cul
from oomtrace.analysis.breakdown import REFUSED_FREE, breakdown, foreign_processes, process_names
from oomtrace.analysis.classify import Context, classify
from oomtrace.analysis.findings import NOT_REQUESTS, Component, Incident, IncidentClass
from oomtrace.analysis.incidents import Anchoring
from oomtrace.analysis.index import SeriesIndex
from oomtrace.analysis.kvmodel import KVModel
from oomtrace.analysis.options import AnalyzeOptions
from oomtrace.analysis.pool import Breakpoints, pool_at
from oomtrace.analysis.step_bytes import StepEstimate, estimate_steps
from oomtrace.analysis.timeline import Timeline
from oomtrace.analysis.trace_scan import Tables
from oomtrace.analysis.window import window_segments
from oomtrace.schema import TS
from oomtrace.units import format_bytes


@dataclass(frozen=True)
class Prepared:
    """Everything computed once per analysis and read by every incident."""

    tables: Tables
    kv: KVModel
    timeline: Timeline
    breakpoints: Breakpoints
    memory: SeriesIndex
    kv_index: SeriesIndex
    engine: SeriesIndex
    capacities: dict[tuple[str, int | None], int]
    engine_pids: frozenset[int]
    idle: pl.DataFrame
    serving: pl.DataFrame  # samples showing the engine serving (see prepare.serving_samples)
    preemptions: pl.DataFrame  # node, ts of every preemption stated (prepare.preemption_times)


def _capacity(prep: Prepared, node: str, device: int | None) -> int | None:
    if (node, device) in prep.capacities:
        return prep.capacities[(node, device)]
    on_node = [v for (n, _), v in prep.capacities.items() if n == node]
    return max(on_node) if on_node else None


def _peak_bytes(prep: Prepared, anchor: Anchoring, window: timedelta) -> int | None:
    """Device memory in use at an event (stated by the event, else sampled); the spiking series'
    value at a spike (in bytes when the series has bytes)."""
    if anchor.spike is not None and anchor.kind == "spike":
        return round(anchor.spike.peak_value) if anchor.spike.unit == "bytes" else None
    event = anchor.event or {}
    if event.get("total_bytes") is not None and event.get("free_bytes") is not None:
        return int(event["total_bytes"] - event["free_bytes"])
    series = prep.memory.find("device_used_bytes", anchor.node, anchor.device)
    value = prep.memory.value_at(series, anchor.peak_ts, window)
    return round(value) if value is not None else None


def _observed_kv(prep: Prepared, m: _Moment) -> int | None:
    """The KV in use the engine stated at the peak: on the series that spiked where the incident
    is a KV spike (one moment, one figure), else on the node's best-sampled KV series."""
    spike = m.anchor.spike
    series = spike.series if m.kv_spike and spike is not None else None
    series = series or prep.kv_index.find("kv_used", m.anchor.node)
    row = prep.kv_index.at(series, m.anchor.peak_ts, m.window)
    if row is None or row["unit"] != "bytes":
        return None
    return round(float(row["value"]))


def _modelled_kv(prep: Prepared, node: str, ts: datetime) -> int | None:
    if not prep.kv.has_bytes or prep.breakpoints.is_empty():
        return None
    at = pl.DataFrame(
        {"node": [node], "ts": [ts]},
        schema={"node": pl.String, "ts": TS},
    )
    value = pool_at(prep.breakpoints, at, has_bytes=True)["kv_bytes"][0]
    return int(value) if value is not None else None


@dataclass(frozen=True)
class _Moment:
    """Where and when an incident peaked, and the figures read there once."""

    anchor: Anchoring
    window: timedelta
    window_start: datetime
    device_capacity: int | None
    peak_bytes: int | None
    kv_spike: bool
    whole_rise: bool  # a pool that filled: its window covers the rise, culprits by growth


def _moment(prep: Prepared, anchor: Anchoring, options: AnalyzeOptions) -> _Moment:
    window = timedelta(seconds=options.window_s)
    spike = anchor.spike
    kv_spike = anchor.kind == "spike" and spike is not None and spike.metric == "kv_used"
    start = anchor.peak_ts - window
    # A pool that filled is looked at from where its rise began (spikes.FILL_LOOKBACK at most):
    # what took it from its normal level to full is growth over the whole rise.
    filled = (
        spike is not None
        and kv_spike
        and spike.utilisation is not None
        and spike.utilisation >= options.kv_full_ratio
    )
    return _Moment(
        anchor=anchor,
        window=window,
        window_start=min(start, spike.start) if filled and spike is not None else start,
        device_capacity=_capacity(prep, anchor.node, anchor.device),
        peak_bytes=_peak_bytes(prep, anchor, window),
        kv_spike=kv_spike,
        whole_rise=filled,
    )


def _context(prep: Prepared, m: _Moment, options: AnalyzeOptions, ranked: pl.DataFrame) -> Context:
    anchor, node = m.anchor, m.anchor.node
    oom = anchor.event if anchor.kind == "oom" else None
    # a refusal for lack of free memory accounts for the device as an OOM does
    refused = anchor.event if anchor.event and anchor.event["kind"] == REFUSED_FREE else None
    processes = foreign_processes(
        prep.memory,
        node=node,
        device=anchor.device,
        peak_ts=anchor.peak_ts,
        window_start=m.window_start,
        window=m.window,
        engine=prep.engine_pids,
        oom=oom or refused,
        observed=m.peak_bytes,
        names=process_names(prep.tables.events, node),
    )
    on_node = pl.col("node") == node
    requests = prep.tables.requests.filter(on_node)
    return Context(
        node=node,
        device=anchor.device,
        peak_ts=anchor.peak_ts,
        window_start=m.window_start,
        window=m.window,
        anchor=anchor.kind,
        spike=anchor.spike,
        event=anchor.event,
        oom=oom,
        events=prep.tables.events.filter(on_node).sort("ts"),
        requests=requests,
        residents=ranked,
        memory=prep.memory,
        kv_index=prep.kv_index,
        engine=prep.engine,
        kv=prep.kv,
        config=prep.tables.manifest.engine_config,
        capacity=m.device_capacity,
        options=options,
        engine_pids=prep.engine_pids,
        idle=prep.idle.filter(on_node),
        serving=prep.serving.filter(on_node),
        modelled_kv_bytes=_modelled_kv(prep, node, anchor.peak_ts),
        processes=processes,
        steps=_steps(prep, options, ranked, requests, m) if anchor.kind != "startup" else (),
    )


_PARAMETERS = ("n", "best_of", "logprobs", "prompt_logprobs")


def _steps(
    prep: Prepared,
    options: AnalyzeOptions,
    ranked: pl.DataFrame,
    requests: pl.LazyFrame,
    m: _Moment,
) -> tuple[StepEstimate, ...]:
    """Each resident request's share of the step at the peak (see
    :mod:`oomtrace.analysis.step_bytes`): in prefill (or, where the inputs state no first
    tokens, admitted inside the window), its prompt chunk; otherwise one decode token a
    sequence. The sampling parameters are read for these requests only."""
    if ranked.is_empty():
        return ()
    ids = ranked["request_id"].implode()
    stated = (
        requests.filter(pl.col("request_id").is_in(ids))
        .group_by("request_id")
        .agg(pl.col(c).max() for c in _PARAMETERS)
        .collect()
    )
    admitted = pl.col("start_ts") >= pl.lit(m.window_start, dtype=pl.Datetime("ns", "UTC"))
    candidates = ranked.select(
        "request_id",
        "prompt_tokens",
        "cached_tokens",
        in_prefill=pl.col("in_prefill").fill_null(admitted),
    ).join(stated, on="request_id", how="left")
    budget = prep.tables.manifest.engine_config.get("max_num_batched_tokens")
    chunk = budget if isinstance(budget, int) and budget > 0 else None
    return estimate_steps(candidates, chunk=chunk, dims=options.model_dims)


def _observed(m: _Moment, cls: IncidentClass, observed_kv: int | None) -> tuple[int | None, str]:
    """What coverage is measured against: the observed KV in use for a KV exhaustion (or a KV
    spike), else the incident's peak figure; nothing when only the model saw the peak."""
    spike = m.anchor.spike
    if (cls == "kv_exhaustion" or m.kv_spike) and observed_kv is not None:
        return observed_kv, "observed KV in use"
    if spike is not None and spike.kind == "modelled":
        return None, "nothing observed at the peak (the spike is in the modelled KV)"
    if m.peak_bytes is None:
        return None, "nothing observed at the peak"
    if m.anchor.kind == "spike" and spike is not None:
        return m.peak_bytes, spike.series
    return m.peak_bytes, "device memory in use"


def build_incident(
    prep: Prepared, anchor: Anchoring, options: AnalyzeOptions, number: int
) -> Incident:
    """Assemble one incident (``number`` 1 is the primary)."""
    m = _moment(prep, anchor, options)
    node, peak = anchor.node, anchor.peak_ts
    ranked = cul.residents(prep.timeline, node, peak, m.window_start, by_growth=m.whole_rise)
    context = _context(prep, m, options, ranked)
    cls, reason, checks = classify(context)
    observed_kv = _observed_kv(prep, m)
    observed, basis = _observed(m, cls, observed_kv)
    running = prep.engine.value_at(prep.engine.find("requests_running", node), peak, m.window)
    modelled = cul.modelled_bytes(ranked)
    explained, note = _capped(prep, modelled, observed_kv, ranked.height, running)
    shares = cul.with_shares(ranked, observed, explained)
    coverage = min((explained or 0) / observed, 1.0) if observed else None
    chosen = (
        ()
        if cls in NOT_REQUESTS
        else cul.culprits(
            shares,
            # a workspace overflow, like a transient peak, is one step: its requests rank by it
            transient=cls in ("transient_peak", "workspace_overflow"),
            peak_ts=peak,
            window_start=m.window_start,
            top=options.top_culprits,
            basis_label=basis,
            steps=context.steps,
            by_growth=m.whole_rise,
        )
    )
    waiting = prep.engine.value_at(prep.engine.find("requests_waiting", node), peak, m.window)
    return Incident(
        id=f"I{number}",
        primary=number == 1,
        cls=cls,
        reason=reason,
        anchor=anchor.kind,
        anchor_series=anchor.series,
        node=node,
        device=anchor.device,
        start=anchor.start(m.window),
        peak_ts=peak,
        window_start=m.window_start,
        peak_bytes=m.peak_bytes,
        capacity_bytes=prep.kv.pool_bytes if m.kv_spike else m.device_capacity,
        coverage=coverage,
        coverage_basis=basis,
        observed_bytes=observed,
        explained_bytes=explained,
        unexplained_bytes=max(observed - (explained or 0), 0) if observed is not None else None,
        modelled_bytes=modelled,
        model_note=note,
        breakdown=_breakdown(prep, m, explained, context),
        culprits=chosen,
        processes=tuple(context.processes),
        checks=checks,
        ledger=cul.ledger(
            shares,
            ts=peak,
            pool_tokens=prep.kv.pool_tokens,
            pool_bytes=prep.kv.pool_bytes,
            observed_used_bytes=observed_kv,
            waiting_requests=round(waiting) if waiting is not None else None,
            engine_running=round(running) if running is not None else None,
        ),
        spikes=tuple(anchor.spikes),
        window_segments=_swimlanes(prep.timeline, node, m.window_start, peak, chosen),
    )


# An over-count this small (a share of the engine's figure) is the rounding of what it printed
# (vLLM's usage to 0.1 %, GiB to 0.01): capped without a note.
NOTED_OVERCOUNT = 0.02


def _capped(
    prep: Prepared,
    modelled: int | None,
    observed_kv: int | None,
    residents: int,
    running: float | None,
) -> tuple[int | None, str | None]:
    """The KV the named requests explain: the model's count, capped at what the engine stated of
    its KV in use (observed, else its pool), with a note when the cap bites."""
    stated, what = (observed_kv, "observed KV in use")
    if stated is None:
        stated, what = prep.kv.pool_bytes, "KV pool"
    if modelled is None or stated is None or modelled <= stated:
        return modelled, None
    if modelled - stated <= NOTED_OVERCOUNT * stated:
        return stated, None  # within what the engine's printed figures round away
    plural = "s" if residents != 1 else ""
    note = (
        f"the model counts {residents} resident request{plural} holding "
        f"{format_bytes(modelled)}, "
        f"{format_bytes(modelled - stated)} more than the engine's {what} "
        f"({format_bytes(stated)})"
    )
    if running is not None and round(running) < residents:
        note += f"; the engine said {round(running)} were running"
    note += (
        ": requests the model keeps resident that the engine had preempted, queued or finished "
        "without saying so; what they explain is capped at the engine's figure"
    )
    return stated, note


def _breakdown(
    prep: Prepared, m: _Moment, explained: int | None, context: Context
) -> tuple[Component, ...]:
    return breakdown(
        prep.memory,
        node=m.anchor.node,
        device=m.anchor.device,
        peak_ts=m.anchor.peak_ts,
        window=m.window,
        observed=m.peak_bytes if _device_anchor(m.anchor) else None,
        explained=explained,
        pool_bytes=prep.kv.pool_bytes,
        weights=_int(prep.tables.manifest.engine_config.get("model_weights_bytes")),
        foreign=sum(p.bytes for p in context.processes),
    )


def _device_anchor(anchor: Anchoring) -> bool:
    """Whether the incident's peak is device memory in use (what the breakdown splits)."""
    if anchor.kind != "spike":
        return True
    return anchor.spike is not None and anchor.spike.metric.startswith("device_used")


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _swimlanes(
    timeline: Timeline, node: str, start: datetime, end: datetime, chosen: tuple[Any, ...]
) -> pl.DataFrame:
    lanes = window_segments(timeline, node, start, end)
    ranks = {c.request_id: c.rank for c in chosen}
    return lanes.with_columns(
        culprit_rank=pl.col("request_id").replace_strict(ranks, default=None, return_dtype=pl.Int64)
    ).sort("start_ts", "request_id", "seg")
