"""From what :func:`oomtrace.analysis.prepare.prepare` computed to the findings: the incidents,
their remedies, the reconciliations, the gaps and the series kept."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from datetime import timedelta

import polars as pl

from oomtrace.analysis.assemble import Prepared, build_incident
from oomtrace.analysis.deaths import MemorySeen, unexplained_deaths
from oomtrace.analysis.findings import Findings, Incident, Remedy, TraceSummary
from oomtrace.analysis.gaps import hole_gaps, manifest_gaps, request_gaps, table_gaps
from oomtrace.analysis.incident_traffic import incident_requests
from oomtrace.analysis.incidents import anchor_incidents
from oomtrace.analysis.index import SeriesIndex
from oomtrace.analysis.options import AnalyzeOptions
from oomtrace.analysis.prepare import first_served
from oomtrace.analysis.reconcile import kv_reconciliation, memory_reconciliations
from oomtrace.analysis.remedies import RemedyFacts, remedies_for
from oomtrace.analysis.request_scan import Window, within
from oomtrace.analysis.spikes import Spike
from oomtrace.analysis.trace_scan import TableFacts, Tables


@dataclass(frozen=True)
class Detail:
    """What the windowed analysis read at full resolution: ``windows`` (``node, start, end``),
    the memory series inside them (``memory``) and the holes of the whole memory series."""

    windows: list[Window]
    memory: SeriesIndex
    holes: pl.DataFrame


def findings_of(
    tables: Tables,
    prep: Prepared,
    modelled: SeriesIndex,
    spikes: list[Spike],
    facts: TableFacts,
    options: AnalyzeOptions,
    detail: Detail | None = None,
) -> Findings:
    """The incidents and the findings, from what :func:`prepare` computed. With ``detail`` (a
    windowed analysis) the modelled KV, its reconciliation and the memory reconciliations are
    of the windows only, where the timeline holds every resident request."""
    kv, timeline = prep.kv, prep.timeline
    served = first_served(facts, prep.serving)
    kv_seen = frozenset(prep.kv_index.catalog["node"].drop_nulls().to_list())
    anchors = anchor_incidents(
        tables.events, spikes, options, served, prep.preemptions, kv_observed=kv_seen
    )
    incidents = tuple(build_incident(prep, a, options, i) for i, a in enumerate(anchors, start=1))
    remedies = _remedies(prep, incidents, options)
    summary = _summary(facts, tables.manifest.engine.get("name"))
    seen = MemorySeen(prep.memory, prep.kv_index, prep.capacities)
    summary = replace(
        summary, deaths=unexplained_deaths(tables.events, incidents, options.window_s, seen)
    )
    rate, from_requests = asdict(timeline.rate), request_gaps(timeline)
    requests_seen = not timeline.points.is_empty()
    indexes = (prep.memory, prep.kv_index, prep.engine)
    breakpoints = prep.breakpoints
    del prep, timeline  # the per-request tables are done with: let them go before the series
    observed_kv = indexes[1].long()
    if detail is not None:
        observed_kv = within(observed_kv, detail.windows)
    kv_recon, kv_gap = kv_reconciliation(observed_kv, breakpoints, kv, requests_seen)
    memory_recon, memory_gap = memory_reconciliations(
        indexes[0] if detail is None else detail.memory
    )
    holes = pl.concat(
        [index.holes() for index in (indexes if detail is None else indexes[1:])]
        + ([] if detail is None else [detail.holes])
    )
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
    buckets = options.series_buckets
    derived = [
        modelled.compact(windows, buckets),
        memory_gap.compact(windows, buckets),
        SeriesIndex.from_long(kv_gap).compact(windows, buckets),
    ]
    if detail is not None:  # the model and the gaps exist only where the windows were read
        derived = [within(frame, detail.windows) for frame in derived]
    series = pl.concat([index.compact(windows, buckets) for index in indexes] + derived)
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


def _summary(facts: TableFacts, engine: object) -> TraceSummary:
    return TraceSummary(
        nodes=tuple(sorted(facts.spans["node"].to_list())),
        start=facts.spans["first"].min(),  # type: ignore[arg-type]
        end=facts.spans["last"].max(),  # type: ignore[arg-type]
        engine=str(engine) if engine else None,
        samples=facts.samples,
        request_events=facts.request_events,
        requests=facts.requests,
        events=facts.events,
    )
