"""Everything an analysis computes once, from its tables: the KV model, the timeline and its sweep,
the series and the spikes, and the tables' totals.

The order keeps memory low on a long trace: the samples are read first (one pass, only the memory
series kept whole), then the lifecycle is read, turned into the timeline and let go before the
sweep; later, incidents read only the lifecycle rows they cite (see
:mod:`oomtrace.analysis.trace_scan`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any, Final

import polars as pl

from oomtrace.analysis import grouped as g
from oomtrace.analysis.assemble import Prepared
from oomtrace.analysis.breakdown import engine_pids
from oomtrace.analysis.index import SeriesIndex
from oomtrace.analysis.kvmodel import KVModel, kv_model
from oomtrace.analysis.lifecycle import Lifecycle, lifecycle
from oomtrace.analysis.observed_series import BYTES_METRICS, capacities, engine_series, observed_kv
from oomtrace.analysis.options import AnalyzeOptions
from oomtrace.analysis.pool import Breakpoints, pool_breakpoints
from oomtrace.analysis.reconcile import modelled_index, pool_caps
from oomtrace.analysis.request_scan import RequestScan, Window
from oomtrace.analysis.samples import SampleView, read_samples
from oomtrace.analysis.spikes import Spike, find_spikes
from oomtrace.analysis.timeline import RESETS, Timeline, timeline_of
from oomtrace.analysis.trace_scan import TableFacts, Tables, TraceScan, tables_of
from oomtrace.diagnostics import clock_warning
from oomtrace.errors import InputError
from oomtrace.schema import TS
from oomtrace.trace import Trace, set_aside

logger = logging.getLogger(__name__)


def tables_on_node(source: Trace | TraceScan, node: str | None) -> Tables:
    """The source's tables on ``node`` (all nodes when None). Raises :class:`InputError` when
    nothing can be analysed: no rows at all, or none on that node."""
    everything = tables_of(source, None)
    if not any(row_counts(everything)) and (apart := set_aside(source.manifest)):
        raise InputError(
            "nothing to analyse on one clock: "
            + "; ".join(w for s in apart if (w := clock_warning(s)))
        )
    if not any(row_counts(everything)):
        raise InputError(
            "the trace holds no samples, requests or events: nothing to analyse; check that "
            "ingest recognised the input files (see manifest.json sources)"
        )
    if node is None:
        return everything
    picked = tables_of(source, node)
    if not any(row_counts(picked)):
        frames = (everything.samples, everything.requests, everything.events.lazy())
        nodes = pl.concat([f.select("node") for f in frames]).unique().collect()
        names = ", ".join(sorted(nodes["node"].to_list()))
        raise InputError(f"--node {node!r}: no rows on that node; the trace has {names}")
    return picked


def row_counts(tables: Tables) -> tuple[int, int, int]:
    rows = [int(f.select(pl.len()).collect().item()) for f in (tables.samples, tables.requests)]
    return rows[0], rows[1], tables.events.height


def prepare(
    tables: Tables,
    options: AnalyzeOptions,
    samples: SampleView | None = None,
    scanned: tuple[RequestScan, list[Window]] | None = None,
    evicted: pl.DataFrame | None = None,
) -> tuple[Prepared, SeriesIndex, list[Spike], TableFacts]:
    """Everything computed once (see the module docstring). The windowed analysis
    (:mod:`oomtrace.analysis.windowed`) hands over the samples it read, the requests' scan with
    its windows (the timeline is then built of the requests those windows hold) and, the second
    time, the preemptions it found the first (:func:`preemption_times`)."""
    samples = samples or read_samples(tables.samples, BYTES_METRICS, tables.strict)
    kv = kv_model(
        tables.manifest, samples.other, spec=options.kv_spec, spec_label=options.kv_spec_label
    )
    timeline, facts = _timeline(tables, samples, kv, scanned)
    breakpoints = pool_breakpoints(timeline)
    memory = samples.memory
    several = samples.several_nodes  # labels name the node: two nodes' logs may share a name
    kv_index = SeriesIndex.from_long(observed_kv(samples.other, kv, by_node=several))
    engine_long = engine_series(samples.other, by_node=several)
    modelled = modelled_index(breakpoints, kv.has_bytes, pool_caps(kv))
    caps = capacities(samples.other, tables.events)
    cap_map = {
        (r["node"], r["device"]): int(r["capacity_bytes"]) for r in caps.iter_rows(named=True)
    }
    observed_any = not (memory.empty and kv_index.empty)
    if evicted is None:
        evicted = preemption_times(tables, samples.other)
    spikes = find_spikes(
        [memory, kv_index] if observed_any else [_modelled_for_spikes(modelled, kv)],
        _capacity_of(cap_map, kv),
        options,
        preemptions=evicted,
        pool_blocks=kv.pool_blocks,
    )
    logger.debug("%d spikes, %d knots", len(spikes), timeline.points.height)
    prep = Prepared(
        tables=tables,
        kv=kv,
        timeline=timeline,
        breakpoints=breakpoints,
        memory=memory,
        kv_index=kv_index,
        engine=SeriesIndex.from_long(engine_long),
        capacities=cap_map,
        engine_pids=engine_pids(samples, tables.events, tables.manifest),
        idle=_idle(engine_long, breakpoints),
        serving=serving_samples(samples.other),
        preemptions=evicted,
    )
    return prep, modelled, spikes, facts


def _timeline(
    tables: Tables,
    samples: SampleView,
    kv: KVModel,
    scanned: tuple[RequestScan, list[Window]] | None,
) -> tuple[Timeline, TableFacts]:
    """The timeline from the lifecycle, and the totals of every table."""
    if scanned is None:
        life = lifecycle(tables.requests, tables.strict)
        request_spans = _request_spans(life)
        request_events, requests = life.events.height, life.keys.height
        request_sources = _request_sources(tables)
    else:
        scan, windows = scanned
        # the windows' requests are few: read once, not once per column
        life = lifecycle(scan.within(tables.requests, windows).collect(), tables.strict)
        request_spans = scan.spans
        request_events, requests, request_sources = scan.rows, scan.ends.height, scan.sources
    events = tables.events
    spans = pl.concat(
        [
            samples.spans,
            request_spans,
            events.group_by("node").agg(first=pl.col("ts").min(), last=pl.col("ts").max()),
        ]
    )
    spans = spans.group_by("node").agg(pl.col("first").min(), pl.col("last").max()).sort("node")
    facts = TableFacts(
        samples=samples.rows,
        request_events=request_events,
        requests=requests,
        events=events.height,
        spans=spans,
        metrics=samples.metrics,
        sources=samples.sources | request_sources | frozenset(events["source"].unique().to_list()),
        first_request={str(n): t for n, t in request_spans.select("node", "first").rows()},
    )
    trace_end: dict[str, datetime] = {str(n): t for n, t in spans.select("node", "last").rows()}
    resets = events.filter(pl.col("kind").is_in(RESETS)).select("node", "ts")
    max_len = tables.manifest.engine_config.get("max_model_len")
    timeline = timeline_of(
        life,
        kv,
        trace_end=trace_end,
        resets=resets,
        rate=None,
        samples=samples.other,
        max_model_len=int(max_len) if isinstance(max_len, int) else None,
    )
    return timeline, facts


def _request_sources(tables: Tables) -> frozenset[str]:
    sources = tables.requests.select(
        pl.col("source").unique().implode().alias("sources"),
        pl.col("source").null_count().alias("nulls"),
    ).collect()
    if sources["nulls"].item():
        tables.strict()
    return frozenset(sources["sources"].item().to_list())


def _request_spans(life: Lifecycle) -> pl.DataFrame:
    """First and last lifecycle event per node (each request's events are in time order)."""
    ts = pl.col("ts")
    ends = life.events.select(first=ts.filter(g.is_first("rid")), last=ts.filter(g.is_last("rid")))
    return (
        ends.with_columns(life.keys["node"])
        .group_by("node")
        .agg(pl.col("first").min(), pl.col("last").max())
    )


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


# Samples that show an engine serving: a request running, tokens produced, KV blocks in use.
SERVING_METRICS: Final = (
    "requests_running",
    "prompt_throughput_tokens_per_s",
    "generation_throughput_tokens_per_s",
    "kv_usage_ratio",
    "kv_blocks_used",
    "kv_tokens_used",
)


def serving_samples(samples: pl.DataFrame) -> pl.DataFrame:
    """``node, ts, source, metric, value`` of every sample above zero of :data:`SERVING_METRICS`,
    in time order: the evidence that a server without request lines was serving."""
    return (
        samples.filter(pl.col("metric").is_in(SERVING_METRICS) & (pl.col("value") > 0))
        .select("node", "ts", "source", "metric", "value")
        .sort("ts", maintain_order=True)
    )


def preemption_times(tables: Tables, samples: pl.DataFrame) -> pl.DataFrame:
    """``node, ts`` of every preemption (or retraction) a source states: preemption events,
    preempted requests, a stats line's count for its interval, a counter's increase."""
    stated = tables.requests.filter(pl.col("event") == "preempted").select("node", "ts").collect()
    events = tables.events.filter(pl.col("kind") == "preemption").select("node", "ts")
    interval = samples.filter(
        (pl.col("metric") == "preemptions_in_interval") & (pl.col("value") > 0)
    ).select("node", "ts")
    counter = (
        samples.filter(pl.col("metric") == "preemptions_total")
        .sort("ts")
        .filter(pl.col("value").diff().over("node", "source") > 0)
        .select("node", "ts")
    )
    return pl.concat([stated, events, interval, counter]).sort("node", "ts")


def first_served(facts: TableFacts, serving: pl.DataFrame) -> dict[str, datetime]:
    """Each node's first sign of serving: its first request event or serving sample."""
    out = dict(facts.first_request)
    firsts = serving.group_by("node").agg(pl.col("ts").min())
    for node, ts in firsts.iter_rows():
        out[node] = min(out[node], ts) if node in out else ts
    return out


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
        run=g.group_id("node", "idle"), next_ts=g.following(pl.col("ts"), "node")
    )
    return (
        frame.filter(pl.col("idle"))
        .group_by("node", "run")
        .agg(start=pl.col("ts").min(), end=pl.coalesce(pl.col("next_ts").max(), pl.col("ts").max()))
        .filter(pl.col("end") > pl.col("start"))
        .sort("node", "start")
        .select("node", "start", "end")
    )
