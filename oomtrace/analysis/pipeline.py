"""``analyze``: from a canonical trace to findings (the library behind ``oomtrace analyze``;
import it from :mod:`oomtrace.analysis`).

``analyze`` takes a :class:`~oomtrace.trace.Trace` in memory, or a trace directory opened with
:func:`open_trace`, which reads only what the analysis needs (see
:mod:`oomtrace.analysis.trace_scan`): a day of 100 Hz samples is not held in memory whole.

Everything is computed from the canonical tables; see :mod:`oomtrace.analysis` for the stages.

**Attribution coverage** (of each incident): ``explained / max(observed, explained)``, where
``observed`` is the figure the incident is about at its peak (``coverage_basis``: the observed KV
in use for a KV exhaustion, device memory in use at an OOM, the spiking series' value at a spike)
and ``explained`` is the sum of the modelled KV bytes of every request resident at the peak. The
remainder, ``unexplained_bytes``, is what named requests do not account for; at an OOM the
incident's ``breakdown`` splits it into measured parts (rest of the KV pool, weights, allocator
slack, other processes, memory outside PyTorch) and a residual.
"""

from __future__ import annotations

from dataclasses import asdict, replace
from datetime import timedelta

import polars as pl

from oomtrace.analysis.assemble import Prepared, build_incident
from oomtrace.analysis.deaths import unexplained_deaths
from oomtrace.analysis.findings import Findings, Incident, Remedy, TraceSummary
from oomtrace.analysis.gaps import hole_gaps, manifest_gaps, request_gaps, table_gaps
from oomtrace.analysis.incident_traffic import incident_requests
from oomtrace.analysis.incidents import anchor_incidents
from oomtrace.analysis.index import SeriesIndex
from oomtrace.analysis.options import AnalyzeOptions
from oomtrace.analysis.prepare import first_served, prepare, tables_on_node
from oomtrace.analysis.reconcile import kv_reconciliation, memory_reconciliations
from oomtrace.analysis.remedies import RemedyFacts, remedies_for
from oomtrace.analysis.timeline import Timeline
from oomtrace.analysis.trace_scan import ReadStrictly, TableFacts, TraceScan
from oomtrace.analysis.untimed import analyze_untimed, only_untimed
from oomtrace.trace import Trace, read_trace

__all__ = ["analyze"]


def analyze(trace: Trace | TraceScan, options: AnalyzeOptions | None = None) -> Findings:
    """Analyse a canonical trace. Raises :class:`InputError` only when nothing can be analysed
    (no rows at all, or none on the requested node); partial traces give findings with gaps."""
    options = options or AnalyzeOptions()
    if only_untimed(trace):
        # No input prints a time: nothing to align or misjoin; read the rows in their order.
        return analyze_untimed(trace, options)
    if not isinstance(trace, TraceScan):
        return _analyze(trace, options)
    try:
        return _analyze(trace, options)
    except ReadStrictly:
        # The scanned directory holds something the strict reader rejects: read_trace raises it.
        return _analyze(read_trace(trace.path), options)


def _analyze(source: Trace | TraceScan, options: AnalyzeOptions) -> Findings:
    tables = tables_on_node(source, options.node)
    prep, modelled, spikes, facts = prepare(tables, options)
    kv, timeline = prep.kv, prep.timeline
    served = first_served(facts, prep.serving)
    kv_seen = frozenset(prep.kv_index.catalog["node"].drop_nulls().to_list())
    anchors = anchor_incidents(
        tables.events, spikes, options, served, prep.preemptions, kv_observed=kv_seen
    )
    incidents = tuple(build_incident(prep, a, options, i) for i, a in enumerate(anchors, start=1))
    remedies = _remedies(prep, incidents, options)
    summary = _summary(facts, tables.manifest.engine.get("name"), timeline)
    summary = replace(
        summary, deaths=unexplained_deaths(tables.events, incidents, options.window_s)
    )
    rate, from_requests = asdict(timeline.rate), request_gaps(timeline)
    requests_seen = not timeline.points.is_empty()
    indexes = (prep.memory, prep.kv_index, prep.engine)
    breakpoints = prep.breakpoints
    del prep, timeline  # the per-request tables are done with: let them go before the series
    kv_recon, kv_gap = kv_reconciliation(indexes[1].long(), breakpoints, kv, requests_seen)
    memory_recon, memory_gap = memory_reconciliations(indexes[0])
    holes = pl.concat([index.holes() for index in indexes])
    gaps = (
        *manifest_gaps(tables.manifest),
        *table_gaps(facts, kv),
        *hole_gaps(holes),
        *from_requests,
    )
    # Full resolution inside incident windows, peak-keeping buckets elsewhere.
    wide = timedelta(seconds=options.window_s)
    windows = [
        (i.node, i.window_start - wide, i.peak_ts + wide)
        for i in incidents
        if i.window_start is not None and i.peak_ts is not None
    ]
    series = pl.concat(
        [index.compact(windows, options.series_buckets) for index in (*indexes, modelled)]
        + [memory_gap.compact(windows, options.series_buckets)]
        + [SeriesIndex.from_long(kv_gap).compact(windows, options.series_buckets)]
    )
    return Findings(
        trace=summary,
        kv_model=kv.to_json(),
        decode_rate=rate,
        incidents=incidents,
        spikes=tuple(spikes[:20]),
        reconciliation=(*((kv_recon,) if kv_recon else ()), *memory_recon),
        gaps=tuple(gaps),
        options=options.to_json(),
        series=series,
        remedies=remedies,
    )


def _remedies(
    prep: Prepared, incidents: tuple[Incident, ...], options: AnalyzeOptions
) -> tuple[Remedy, ...]:
    """Every incident's remedies, the primary's first (see :mod:`oomtrace.analysis.remedies`);
    a KV exhaustion's traffic is replayed when the options carry a limit search."""
    out: list[Remedy] = []
    config = prep.tables.manifest.engine_config
    engine = prep.tables.manifest.engine.get("name")
    per_token = prep.kv.bytes_per_token
    for incident in incidents:
        replay = None
        start, peak = incident.start, incident.peak_ts
        searched = incident.cls == "kv_exhaustion" and options.limit_search is not None
        if searched and start is not None and peak is not None:
            traffic = incident_requests(
                prep.timeline,
                prep.tables.requests,
                node=incident.node,
                start=start,
                peak=peak,
                window=timedelta(seconds=options.window_s),
            )
            if traffic.height and options.limit_search is not None:
                replay = options.limit_search(
                    traffic,
                    prep.tables.manifest,
                    kv_bytes_per_token=round(per_token) if per_token else None,
                    decode_tokens_per_s=prep.timeline.rate.tokens_per_s,
                )
        facts = RemedyFacts(config, prep.kv, replay, str(engine) if engine else None)
        out += remedies_for(incident, facts)
    return tuple(out)


def _summary(facts: TableFacts, engine: object, timeline: Timeline) -> TraceSummary:
    return TraceSummary(
        nodes=tuple(sorted(facts.spans["node"].to_list())),
        start=facts.spans["first"].min(),  # type: ignore[arg-type]
        end=facts.spans["last"].max(),  # type: ignore[arg-type]
        engine=str(engine) if engine else None,
        samples=facts.samples,
        request_events=facts.request_events,
        requests=timeline.requests.height,
        events=facts.events,
    )
