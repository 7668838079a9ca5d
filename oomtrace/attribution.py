"""``analyze``: from a canonical trace to findings (the library behind ``oomtrace analyze``).

    from oomtrace.attribution import analyze, AnalyzeOptions
    findings = analyze(read_trace(path), AnalyzeOptions(window_s=60))
    findings.primary.culprits[0].request_id

Everything is computed from the canonical tables; see :mod:`oomtrace.analysis` for the layers.

**Attribution coverage** (of each incident): ``explained / max(observed, explained)``, where
``observed`` is the figure the incident is about at its peak (``coverage_basis``: the observed KV
in use for a KV exhaustion, device memory in use at an OOM, the spiking series' value at a spike)
and ``explained`` is the sum of the modelled KV bytes of every request resident at the peak. The
remainder, ``unexplained_bytes``, is what named requests do not account for; at an OOM the
incident's ``breakdown`` splits it into measured parts (rest of the KV pool, weights, allocator
slack, other processes, memory outside PyTorch) and a residual.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict
from datetime import datetime, timedelta
from typing import Any

import polars as pl

from oomtrace.analysis.assemble import Prepared, build_incident
from oomtrace.analysis.breakdown import engine_pids
from oomtrace.analysis.findings import Findings, TraceSummary
from oomtrace.analysis.gaps import hole_gaps, manifest_gaps, request_gaps, table_gaps
from oomtrace.analysis.incidents import anchor_incidents
from oomtrace.analysis.index import SeriesIndex
from oomtrace.analysis.kvmodel import KVModel, kv_model
from oomtrace.analysis.options import AnalyzeOptions
from oomtrace.analysis.pool import Breakpoints, pool_breakpoints
from oomtrace.analysis.reconcile import kv_reconciliation, memory_reconciliations, modelled_index
from oomtrace.analysis.series import BYTES_METRICS, capacities, engine_series, observed_kv
from oomtrace.analysis.spikes import Spike, find_spikes
from oomtrace.errors import InputError
from oomtrace.schema import TS
from oomtrace.timeline import RESETS, Timeline, build_timeline
from oomtrace.trace import Trace

__all__ = ["AnalyzeOptions", "Findings", "analyze"]

logger = logging.getLogger(__name__)


def analyze(trace: Trace, options: AnalyzeOptions | None = None) -> Findings:
    """Analyse a canonical trace. Raises :class:`InputError` only when nothing can be analysed
    (no rows at all, or none on the requested node); partial traces give findings with gaps."""
    options = options or AnalyzeOptions()
    prep, modelled, spikes = _prepare(_on_node(trace, options.node), options)
    trace, kv, timeline = prep.trace, prep.kv, prep.timeline
    anchors = anchor_incidents(trace.events, spikes, options)
    incidents = tuple(build_incident(prep, a, options, i) for i, a in enumerate(anchors, start=1))
    kv_recon, kv_gap = kv_reconciliation(
        prep.kv_index.long(), prep.breakpoints, kv, not timeline.points.is_empty()
    )
    memory_recon, memory_gap = memory_reconciliations(prep.memory)
    holes = pl.concat([index.holes() for index in (prep.memory, prep.kv_index, prep.engine)])
    gaps = (
        *manifest_gaps(trace),
        *table_gaps(trace, kv),
        *hole_gaps(holes),
        *request_gaps(timeline, timeline.rate),
    )
    # Full resolution inside incident windows, peak-keeping buckets elsewhere.
    wide = timedelta(seconds=options.window_s)
    windows = [(i.node, i.window_start - wide, i.peak_ts + wide) for i in incidents]
    indexes = (prep.memory, prep.kv_index, prep.engine, modelled, memory_gap)
    series = pl.concat(
        [index.compact(windows, options.series_buckets) for index in indexes]
        + [SeriesIndex.from_long(kv_gap).compact(windows, options.series_buckets)]
    )
    return Findings(
        trace=_summary(trace, timeline),
        kv_model=kv.to_json(),
        decode_rate=asdict(timeline.rate),
        incidents=incidents,
        spikes=tuple(spikes[:20]),
        reconciliation=(*((kv_recon,) if kv_recon else ()), *memory_recon),
        gaps=tuple(gaps),
        options=_options_json(options),
        series=series,
    )


def _prepare(trace: Trace, options: AnalyzeOptions) -> tuple[Prepared, SeriesIndex, list[Spike]]:
    """Everything computed once: the KV model, the timeline and its sweep, the series, the
    spikes."""
    kv = kv_model(
        trace.manifest, trace.samples, spec=options.kv_spec, spec_label=options.kv_spec_label
    )
    timeline = _timeline(trace, kv)
    breakpoints = pool_breakpoints(timeline)
    memory = SeriesIndex.from_samples(trace.samples, BYTES_METRICS, unit="bytes")
    kv_index = SeriesIndex.from_long(observed_kv(trace.samples, kv))
    engine_long = engine_series(trace.samples)
    modelled = modelled_index(breakpoints, kv.has_bytes)
    caps = capacities(trace.samples, trace.events)
    cap_map = {
        (r["node"], r["device"]): int(r["capacity_bytes"]) for r in caps.iter_rows(named=True)
    }
    observed_any = not (memory.empty and kv_index.empty)
    spikes = find_spikes(
        [memory, kv_index] if observed_any else [_modelled_for_spikes(modelled, kv)],
        _capacity_of(cap_map, kv),
        options,
    )
    logger.debug("%d spikes, %d knots", len(spikes), timeline.points.height)
    prep = Prepared(
        trace=trace,
        kv=kv,
        timeline=timeline,
        breakpoints=breakpoints,
        memory=memory,
        kv_index=kv_index,
        engine=SeriesIndex.from_long(engine_long),
        capacities=cap_map,
        engine_pids=engine_pids(trace.samples, trace.events, trace.manifest),
        idle=_idle(engine_long, breakpoints),
    )
    return prep, modelled, spikes


def _options_json(options: AnalyzeOptions) -> dict[str, Any]:
    return {
        "window_s": options.window_s,
        "top_culprits": options.top_culprits,
        "max_incidents": options.max_incidents,
        "min_rise_bytes": options.min_rise_bytes,
        "min_rise_fraction": options.min_rise_fraction,
        "kv_full_ratio": options.kv_full_ratio,
        "series_buckets": options.series_buckets,
        "json_series_buckets": options.json_series_buckets,
        "node": options.node,
    }


def _capacity_of(
    devices: dict[tuple[str, int | None], int], kv: KVModel
) -> Callable[[dict[str, Any]], float | None]:
    """Each series' capacity: device series against the device, KV against the pool."""
    pool = {"bytes": kv.pool_bytes, "ratio": 1, "blocks": kv.pool_blocks, "tokens": kv.pool_tokens}

    def capacity(meta: dict[str, Any]) -> float | None:
        if meta["metric"] in ("kv_used", "modelled_kv_bytes", "modelled_stored_tokens"):
            value = pool.get(meta["unit"])
            return float(value) if value else None
        value = devices.get((meta["node"], meta["device"]))
        return float(value) if value else None

    return capacity


def _modelled_for_spikes(modelled: SeriesIndex, kv: KVModel) -> SeriesIndex:
    """Without any observation, spikes are looked for in the modelled KV (a model is not evidence,
    so this happens only then)."""
    metric = "modelled_kv_bytes" if kv.has_bytes else "modelled_stored_tokens"
    keep = [n for n in modelled.names() if modelled.meta(n)["metric"] == metric]
    return SeriesIndex(
        {n: modelled.rows(n) for n in keep},
        {n: {k: v for k, v in modelled.meta(n).items() if k != "series"} for n in keep},
    )


def _on_node(trace: Trace, node: str | None) -> Trace:
    if all(frame.is_empty() for frame in (trace.samples, trace.requests, trace.events)):
        raise InputError(
            "the trace holds no samples, requests or events: nothing to analyse; check that "
            "ingest recognised the input files (see manifest.json sources)"
        )
    if node is None:
        return trace
    keep = pl.col("node") == node
    picked = Trace(
        trace.samples.filter(keep),
        trace.requests.filter(keep),
        trace.events.filter(keep),
        trace.manifest,
    )
    if all(frame.is_empty() for frame in (picked.samples, picked.requests, picked.events)):
        nodes = sorted(
            set(trace.samples["node"].unique().to_list())
            | set(trace.requests["node"].unique().to_list())
            | set(trace.events["node"].unique().to_list())
        )
        raise InputError(f"--node {node!r}: no rows on that node; the trace has {', '.join(nodes)}")
    return picked


def _trace_end(trace: Trace) -> dict[str, datetime]:
    frames = [f.select("node", "ts") for f in (trace.samples, trace.requests, trace.events)]
    last = pl.concat(frames).group_by("node").agg(pl.col("ts").max())
    return {str(n): t for n, t in last.iter_rows()}


def _timeline(trace: Trace, kv: KVModel) -> Timeline:
    resets = trace.events.filter(pl.col("kind").is_in(RESETS)).select("node", "ts")
    max_len = trace.manifest.engine_config.get("max_model_len")
    return build_timeline(
        trace.requests,
        kv,
        trace_end=_trace_end(trace),
        resets=resets,
        samples=trace.samples,
        max_model_len=int(max_len) if isinstance(max_len, int) else None,
    )


def _idle(engine: pl.DataFrame, breakpoints: Breakpoints) -> pl.DataFrame:
    """Stretches with no request running: from the engine's running count where sampled, else
    from the modelled resident count."""
    running = engine.filter(pl.col("metric") == "requests_running").select("node", "ts", "value")
    if running.is_empty() and not breakpoints.is_empty():
        running = pl.concat(
            [
                breakpoints.evaluated(node, ("resident_requests",)).select(
                    pl.lit(node).alias("node"),
                    "ts",
                    value=pl.col("resident_requests").cast(pl.Float64),
                )
                for node, _ in breakpoints.frames()
            ]
        )
    if running.is_empty():
        return pl.DataFrame(schema={"node": pl.String, "start": TS, "end": TS})
    frame = running.sort("node", "ts").with_columns(idle=pl.col("value") == 0)
    frame = frame.with_columns(
        run=(
            (pl.col("idle") != pl.col("idle").shift(1))
            | (pl.col("node") != pl.col("node").shift(1))
        )
        .fill_null(value=True)
        .cum_sum(),
        next_ts=pl.col("ts").shift(-1).over("node"),
    )
    return (
        frame.filter(pl.col("idle"))
        .group_by("node", "run")
        .agg(start=pl.col("ts").min(), end=pl.coalesce(pl.col("next_ts").max(), pl.col("ts").max()))
        .filter(pl.col("end") > pl.col("start"))
        .sort("node", "start")
        .select("node", "start", "end")
    )


def _summary(trace: Trace, timeline: Timeline) -> TraceSummary:
    stamps = pl.concat([f.select("ts") for f in (trace.samples, trace.requests, trace.events)])
    engine = trace.manifest.engine.get("name")
    return TraceSummary(
        nodes=tuple(sorted(_trace_end(trace))),
        start=stamps["ts"].min(),  # type: ignore[arg-type]
        end=stamps["ts"].max(),  # type: ignore[arg-type]
        engine=str(engine) if engine else None,
        samples=trace.samples.height,
        request_events=trace.requests.height,
        requests=timeline.requests.height,
        events=trace.events.height,
    )
