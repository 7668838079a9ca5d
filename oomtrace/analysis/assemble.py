"""One incident, assembled: residents at the peak, class, coverage, culprits, ledger, breakdown."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import polars as pl

from oomtrace.analysis import culprits as cul
from oomtrace.analysis.breakdown import breakdown, foreign_processes
from oomtrace.analysis.classify import Context, classify
from oomtrace.analysis.findings import Incident, IncidentClass
from oomtrace.analysis.incidents import Anchoring
from oomtrace.analysis.index import SeriesIndex
from oomtrace.analysis.kvmodel import KVModel
from oomtrace.analysis.options import AnalyzeOptions
from oomtrace.analysis.pool import pool_at
from oomtrace.analysis.window import window_segments
from oomtrace.timeline import Timeline
from oomtrace.trace import Trace

# Classes whose cause is not a request: they name no culprits (the class names the cause).
NOT_REQUESTS: frozenset[IncidentClass] = frozenset(
    {"startup_misfit", "foreign_memory", "fragmentation", "leak"}
)


@dataclass(frozen=True)
class Prepared:
    """Everything computed once per analysis and read by every incident."""

    trace: Trace
    kv: KVModel
    timeline: Timeline
    breakpoints: pl.DataFrame
    memory: SeriesIndex
    kv_index: SeriesIndex
    engine: SeriesIndex
    capacities: dict[tuple[str, int | None], int]
    engine_pids: frozenset[int]
    idle: pl.DataFrame


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


def _observed_kv(prep: Prepared, node: str, ts: datetime, window: timedelta) -> int | None:
    row = prep.kv_index.at(prep.kv_index.find("kv_used", node), ts, window)
    if row is None or row["unit"] != "bytes":
        return None
    return round(float(row["value"]))


def _modelled_kv(prep: Prepared, node: str, ts: datetime) -> int | None:
    if not prep.kv.has_bytes or prep.breakpoints.is_empty():
        return None
    at = pl.DataFrame(
        {"node": [node], "ts": [ts]},
        schema={"node": pl.String, "ts": prep.breakpoints.schema["ts"]},
    )
    value = pool_at(prep.breakpoints, at, has_bytes=True)["kv_bytes"][0]
    return int(value) if value is not None else None


def build_incident(
    prep: Prepared, anchor: Anchoring, options: AnalyzeOptions, number: int
) -> Incident:
    """Assemble one incident (``number`` 1 is the primary)."""
    window = timedelta(seconds=options.window_s)
    node, peak = anchor.node, anchor.peak_ts
    window_start = peak - window
    kv_spike = (
        anchor.kind == "spike" and anchor.spike is not None and anchor.spike.metric == "kv_used"
    )
    device_capacity = _capacity(prep, node, anchor.device)
    capacity = prep.kv.pool_bytes if kv_spike else device_capacity
    peak_bytes = _peak_bytes(prep, anchor, window)
    ranked = cul.residents(prep.timeline, node, peak, window_start)
    processes = foreign_processes(
        prep.memory,
        node=node,
        device=anchor.device,
        peak_ts=peak,
        window_start=window_start,
        window=window,
        engine=prep.engine_pids,
        oom=anchor.event if anchor.kind == "oom" else None,
        observed=peak_bytes,
    )
    on_node = pl.col("node") == node
    context = Context(
        node=node,
        device=anchor.device,
        peak_ts=peak,
        window_start=window_start,
        window=window,
        anchor=anchor.kind,
        spike=anchor.spike,
        oom=anchor.event if anchor.kind == "oom" else None,
        events=prep.trace.events.filter(on_node).sort("ts"),
        requests=prep.trace.requests.filter(on_node).sort("ts"),
        residents=ranked,
        memory=prep.memory,
        kv_index=prep.kv_index,
        engine=prep.engine,
        kv=prep.kv,
        config=prep.trace.manifest.engine_config,
        capacity=device_capacity,
        options=options,
        engine_pids=prep.engine_pids,
        idle=prep.idle.filter(on_node),
        modelled_kv_bytes=_modelled_kv(prep, node, peak),
        processes=processes,
    )
    cls, reason, checks = classify(context)
    observed_kv = _observed_kv(prep, node, peak, window)
    if (cls == "kv_exhaustion" or kv_spike) and observed_kv is not None:
        observed, basis = observed_kv, "observed KV in use"
    elif anchor.spike is not None and anchor.spike.kind == "modelled":
        observed, basis = None, "nothing observed at the peak (the spike is in the modelled KV)"
    elif peak_bytes is not None:
        observed = peak_bytes
        basis = (
            anchor.spike.series
            if anchor.kind == "spike" and anchor.spike
            else "device memory in use"
        )
    else:
        observed, basis = None, "nothing observed at the peak"
    shares = cul.with_shares(ranked, observed)
    explained = shares.explained_bytes
    coverage = (
        min(explained / observed, 1.0)
        if observed and explained is not None
        else (0.0 if observed else None)
    )
    chosen = (
        ()
        if cls in NOT_REQUESTS
        else cul.culprits(
            shares,
            transient=cls == "transient_peak",
            peak_ts=peak,
            window_start=window_start,
            top=options.top_culprits,
            basis_label=basis,
        )
    )
    waiting = prep.engine.value_at(prep.engine.find("requests_waiting", node), peak, window)
    foreign = sum(p.bytes for p in processes)
    parts = breakdown(
        prep.memory,
        node=node,
        device=anchor.device,
        peak_ts=peak,
        window=window,
        observed=peak_bytes if _device_anchor(anchor) else None,
        explained=explained,
        pool_bytes=prep.kv.pool_bytes,
        weights=_int(prep.trace.manifest.engine_config.get("model_weights_bytes")),
        foreign=foreign,
    )
    return Incident(
        id=f"I{number}",
        primary=number == 1,
        cls=cls,
        reason=reason,
        anchor=anchor.kind,
        anchor_series=anchor.series,
        node=node,
        device=anchor.device,
        start=anchor.start(window),
        peak_ts=peak,
        window_start=window_start,
        peak_bytes=peak_bytes,
        capacity_bytes=capacity,
        coverage=coverage,
        coverage_basis=basis,
        observed_bytes=observed,
        explained_bytes=explained,
        unexplained_bytes=max(observed - (explained or 0), 0) if observed is not None else None,
        breakdown=parts,
        culprits=chosen,
        processes=tuple(processes),
        checks=checks,
        ledger=cul.ledger(
            shares,
            ts=peak,
            pool_tokens=prep.kv.pool_tokens,
            pool_bytes=prep.kv.pool_bytes,
            observed_used_bytes=observed_kv,
            waiting_requests=round(waiting) if waiting is not None else None,
        ),
        spikes=tuple(anchor.spikes),
        window_segments=_swimlanes(prep.timeline, node, window_start, peak, chosen),
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
