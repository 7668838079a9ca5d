"""Build the report document once, from the analysis findings, the trace and the worksheet.

The findings are read as their JSON document (``incidents`` with ``class``, ``start``,
``peak_ts``, ``peak_bytes``, ``coverage``, ``culprits``, ``checks``; ``remedies``; ``ledger``;
``reconciliation``; ``gaps``), so the report depends on the analysis' published contract, not
its internals. What was observed (memory, scheduler counts, point events, per-source
diagnostics) is read from the trace itself, lazily and only inside the charts' span
(:mod:`oomtrace.report.trace_view`). Frames the analysis computes (modelled series,
per-request lanes) are optional.

Reading order: the verdict (what, who, the fix), what ran out (one chart per class), the
requests of the incident window, memory and requests over the incident, the incidents, the
ledger, the plan against what was observed, and the data gaps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import polars as pl

from oomtrace.analysis.trace_scan import TraceScan
from oomtrace.diagnostics import clock_warning
from oomtrace.isotime import iso_time
from oomtrace.report import chart_data
from oomtrace.report.cause_section import cause_section
from oomtrace.report.chart_data import ANALYSIS_SCHEMA
from oomtrace.report.document import REPORT_VERSION, Report
from oomtrace.report.downsample import DEFAULT_BUCKETS, peak_preserving
from oomtrace.report.drawn import Drawn
from oomtrace.report.gaps_section import gaps_section
from oomtrace.report.header import header_figures, subtitle_of, title_of
from oomtrace.report.lanes import culprit_ranks, lanes_section, ranked_lanes
from oomtrace.report.overview_sections import (
    activity_section,
    incidents_section,
    ledger_section,
    memory_section,
)
from oomtrace.report.processes import all_names
from oomtrace.report.records import parse_time
from oomtrace.report.span import Span, chart_span
from oomtrace.report.trace_view import TraceView, extent, view_of
from oomtrace.report.verdict import build_verdict, incident_label, incident_remedies
from oomtrace.report.worksheet_section import budget_section
from oomtrace.trace import Manifest, Trace, set_aside

# Requests drawn in the swimlanes besides the culprits.
CONTEXT_LANES: Final = 20


@dataclass(frozen=True)
class ReportOptions:
    """``buckets``: time slices per chart (each keeps its min and max, so at most twice as many
    points per series); ``context_lanes``: requests drawn in the swimlanes besides the culprits
    (those that stored the most tokens)."""

    buckets: int = DEFAULT_BUCKETS
    context_lanes: int = CONTEXT_LANES
    title: str | None = None


@dataclass(frozen=True)
class ReportInputs:
    """What a report is built from. ``trace``: a trace in memory, or a trace directory opened
    with :func:`oomtrace.analysis.open_trace` (read lazily); ``series``: the analysis' KV series
    (``ts, series, source, value`` in bytes); ``lanes``: per-request resident segments
    (``request_id, start, end, state, start_tokens, stored_tokens, kv_bytes``); ``worksheet``:
    the budget worksheet document."""

    findings: Mapping[str, Any]
    trace: Trace | TraceScan | TraceView
    series: pl.DataFrame | None = None
    lanes: pl.DataFrame | None = None
    worksheet: Mapping[str, Any] | None = None


def _earlier(incident: Mapping[str, Any] | None) -> list[datetime]:
    """Moments before the peak the charts should reach back to: when the culprits became
    resident; for another process's memory, five analysis windows (its growth)."""
    if incident is None:
        return []
    moments = [
        t
        for c in incident.get("culprits") or []
        if isinstance(c, Mapping)
        for t in (parse_time(c.get("resident_since")), parse_time(c.get("arrived")))
        if t is not None
    ]
    peak, start = parse_time(incident.get("peak_ts")), parse_time(incident.get("window_start"))
    if incident.get("class") == "foreign_memory" and peak is not None and start is not None:
        moments.append(peak - 5 * (peak - start))
    return moments


def _analysis_in(series: pl.DataFrame | None, span: Span | None) -> pl.DataFrame:
    if series is None or series.is_empty():
        return pl.DataFrame(schema=ANALYSIS_SCHEMA)
    if "source" not in series.columns:  # a frame built by hand may name no source
        series = series.with_columns(pl.lit("").alias("source"))
    frame = series.select(ANALYSIS_SCHEMA.names()).cast(dict(ANALYSIS_SCHEMA))  # type: ignore[arg-type]
    if span is not None:
        frame = frame.filter(pl.col("ts").is_between(span.start, span.end))
    return frame


def _one_source(analysis: pl.DataFrame, buckets: int) -> pl.DataFrame:
    """Each analysis series from its densest source, reduced for display: ``ts, series,
    value``."""
    if analysis.is_empty():
        return pl.DataFrame(schema=chart_data.SERIES_SCHEMA)
    best = (
        analysis.group_by("series", "source")
        .len()
        .sort("len", "source", descending=[True, False])
        .unique("series", keep="first", maintain_order=True)
    )
    chosen = analysis.join(best.select("series", "source"), on=["series", "source"])
    return peak_preserving(chosen.select("ts", "series", "value"), max_buckets=buckets)


def _preempted(view: TraceView, span: Span | None) -> pl.DataFrame:
    """The requests preempted inside the span (``ts, request_id``), where a source names them."""
    rows = view.requests.filter(pl.col("event") == "preempted")
    if span is not None:
        rows = rows.filter(pl.col("ts").is_between(span.start, span.end))
    return rows.select("ts", "request_id").collect()


def build_report(inputs: ReportInputs, options: ReportOptions | None = None) -> Report:
    options = options or ReportOptions()
    findings = inputs.findings
    view = view_of(inputs.trace)
    incidents = [i for i in findings.get("incidents") or [] if isinstance(i, Mapping)]
    primary = incidents[0] if incidents else None
    lanes = None
    if inputs.lanes is not None and inputs.lanes.height:
        lanes = ranked_lanes(inputs.lanes, culprit_ranks(primary))
    whole = extent(view, findings.get("trace"))
    span = chart_span(primary, whole, _earlier(primary))
    peaks = [
        (ts, f"peak: {incident_label(str(i.get('class')))}")
        for i in incidents
        if (ts := parse_time(i.get("peak_ts"))) is not None
    ]
    marks = chart_data.markers(view.events, peaks)
    if span is not None:
        marks = marks.filter(pl.col("ts").is_between(span.start, span.end))
    points, read = chart_data.observed_samples(view.samples, span, buckets=options.buckets)
    analysis = _analysis_in(inputs.series, span)
    memory, memory_read = chart_data.memory_series(
        points, read, _one_source(analysis, options.buckets)
    )
    activity, activity_read = chart_data.activity_series(points, read)
    drawn = Drawn(
        span=span,
        memory=memory,
        activity=activity,
        processes=chart_data.process_series(points, read),
        analysis=analysis,
        lanes=lanes,
        marks=marks,
        events=view.events,
        config=view.manifest.engine_config,
        preempted=_preempted(view, span),
    )
    weights = view.manifest.engine_config.get("model_weights_bytes")
    sections = (
        cause_section(primary, findings, drawn),
        lanes_section(
            lanes, primary, marks.filter(pl.col("kind") != "preemption"), options.context_lanes
        ),
        memory_section(drawn, memory_read, weights, findings, options.buckets),
        activity_section(view, drawn, activity_read, options.buckets),
        incidents_section(incidents),
        ledger_section(
            findings.get("ledger") or (primary or {}).get("ledger"), findings.get("kv_model")
        ),
        budget_section(inputs.worksheet, view.manifest, memory, primary),
        gaps_section(view.manifest, findings.get("gaps")),
    )
    header = header_figures(view.manifest, memory, whole)
    return Report(
        title=options.title or title_of(view.manifest),
        subtitle=subtitle_of(header),
        verdict=build_verdict(
            primary,
            incident_remedies(findings, primary),
            all_names(primary, view.events),
            engine=(findings.get("trace") or {}).get("engine"),
        ),
        sections=sections,
        meta={
            "report_version": REPORT_VERSION,
            "findings_version": findings.get("findings_version", findings.get("version")),
            "nodes": sorted(view.manifest.nodes),
            "engine": dict(sorted(view.manifest.engine.items())),
            "model": dict(sorted(view.manifest.model.items())),
            "span": [iso_time(span.start), iso_time(span.end)] if span else None,
        },
        header=header,
        alerts=_alerts(findings, view.manifest),
    )


def _alerts(findings: Mapping[str, Any], manifest: Manifest) -> tuple[str, ...]:
    """Inputs set apart from the timeline (or, where no input prints a time, that the rows were
    read in their order: the findings' own words), then deaths no incident explains."""
    summary = findings.get("trace") or {}
    if summary.get("time_note"):
        gaps = findings.get("gaps") or []
        clocks = [str(g["detail"]) for g in gaps if g.get("kind") == "untimed"]
    else:
        clocks = [w for s in set_aside(manifest) if (w := clock_warning(s))]
    deaths = [str(d)[:1].upper() + str(d)[1:] for d in summary.get("deaths") or []]
    return (*clocks, *deaths)
