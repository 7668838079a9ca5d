"""Build the report document once, from the analysis findings, the trace and the worksheet.

The findings are read as their JSON document (``incidents`` with ``class``, ``start``,
``peak_ts``, ``peak_bytes``, ``coverage``, ``culprits``; ``ledger``; ``reconciliation``;
``gaps``), so the report depends on the analysis' published contract, not its internals. What
was observed (memory, scheduler counts, point events, per-source diagnostics) is read from the
trace itself. Frames the analysis computes (modelled series, per-request lanes) are optional.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import polars as pl

from oomtrace.diagnostics import clock_warning
from oomtrace.isotime import iso_time
from oomtrace.report import chart_data, charts
from oomtrace.report.document import REPORT_VERSION, Chart, Report, Section
from oomtrace.report.downsample import DEFAULT_BUCKETS
from oomtrace.report.fmt import value_text
from oomtrace.report.gaps_section import gaps_section
from oomtrace.report.lanes import lanes_section
from oomtrace.report.records import parse_time, table_from_mapping, table_from_records
from oomtrace.report.verdict import build_verdict, incident_label, unstated
from oomtrace.report.worksheet_section import budget_section
from oomtrace.trace import Trace, set_aside

RECONCILIATION_ORDER = (
    "name",
    "a",
    "b",
    "median_gap_bytes",
    "max_gap_bytes",
    "max_gap_ts",
    "points",
    "interpretation",
)
LEDGER_ORDER = (
    "request_id",
    "prompt_tokens",
    "max_tokens",
    "reserved_tokens",
    "reserved_bytes",
    "stored_tokens",
    "stored_low",
    "stored_high",
    "blocks",
    "stored_bytes",
    "share",
    "basis",
    "resident_since",
    "resident_since_basis",
)


@dataclass(frozen=True)
class ReportOptions:
    """``buckets``: time slices per chart (each keeps its min and max, so at most twice as many
    points per series); ``max_lanes``: requests drawn in the swimlane chart (culprits first)."""

    buckets: int = DEFAULT_BUCKETS
    max_lanes: int = 60
    title: str | None = None


@dataclass(frozen=True)
class ReportInputs:
    """What a report is built from. ``series``: modelled memory series from the analysis
    (``ts, series, value`` in bytes); ``lanes``: per-request resident segments
    (``request_id, start, end, state, stored_tokens, kv_bytes``); ``worksheet``: the budget
    worksheet document."""

    findings: Mapping[str, Any]
    trace: Trace
    series: pl.DataFrame | None = None
    lanes: pl.DataFrame | None = None
    worksheet: Mapping[str, Any] | None = None


def build_report(inputs: ReportInputs, options: ReportOptions | None = None) -> Report:
    options = options or ReportOptions()
    # The charts and tables show the rows on one clock; inputs set apart are the alerts.
    findings, trace = inputs.findings, inputs.trace.in_time()
    incidents = [i for i in findings.get("incidents") or [] if isinstance(i, Mapping)]
    primary = incidents[0] if incidents else None
    peaks = [
        (ts, f"peak: {incident_label(str(i.get('class')))}")
        for i in incidents
        if (ts := parse_time(i.get("peak_ts"))) is not None
    ]
    marks = chart_data.markers(trace.events, peaks)
    picked = chart_data.pick_samples(trace.samples)
    memory = _memory_section(trace, picked, inputs.series, marks, findings, options)
    sections = (
        _incidents_section(incidents),
        memory,
        _activity_section(trace, picked, marks, options),
        lanes_section(inputs.lanes, primary, marks, options.max_lanes),
        _ledger_section(
            findings.get("ledger") or (primary or {}).get("ledger"), findings.get("kv_model")
        ),
        budget_section(inputs.worksheet, trace.manifest, memory.charts, primary),
        gaps_section(trace.manifest, findings.get("gaps")),
    )
    return Report(
        title=options.title or _title(trace),
        subtitle=_subtitle(trace),
        verdict=build_verdict(primary),
        sections=sections,
        meta={
            "report_version": REPORT_VERSION,
            "findings_version": findings.get("findings_version", findings.get("version")),
            "nodes": sorted(trace.manifest.nodes),
            "engine": dict(sorted(trace.manifest.engine.items())),
            "model": dict(sorted(trace.manifest.model.items())),
        },
        alerts=tuple(w for s in set_aside(trace.manifest) if (w := clock_warning(s))),
    )


def _title(trace: Trace) -> str:
    nodes = ", ".join(sorted(trace.manifest.nodes)) or "unknown node"
    return f"GPU memory incident report: {nodes}"


def _subtitle(trace: Trace) -> str:
    engine = trace.manifest.engine
    model = trace.manifest.model
    parts = [
        " ".join(str(engine[k]) for k in ("name", "version_family") if engine.get(k)),
        str(model.get("name") or model.get("architecture") or ""),
    ]
    stamps = [t for t in (trace.samples["ts"], trace.requests["ts"], trace.events["ts"]) if t.len()]
    if stamps:
        merged = pl.concat(stamps)
        low, high = merged.min(), merged.max()
        if isinstance(low, datetime) and isinstance(high, datetime):
            parts.append(f"{iso_time(low)} to {iso_time(high)}")
    return " · ".join(p for p in parts if p)


def _incidents_section(incidents: list[Mapping[str, Any]]) -> Section:
    rows = [
        {
            "class": i.get("class"),
            "start": i.get("start"),
            "peak_ts": i.get("peak_ts"),
            "peak_bytes": i.get("peak_bytes"),
            "coverage": i.get("coverage"),
            "top_culprit_id": ((i.get("culprits") or [{}])[0] or {}).get("request_id"),
        }
        for i in incidents
    ]
    return Section(
        "incidents",
        "Incidents",
        paragraphs=("Every incident the analysis found, the primary one first.",),
        tables=(("incidents", table_from_records(rows, order=tuple(rows[0]))),) if rows else (),
        empty="The analysis found no incident.",
    )


def _memory_section(
    trace: Trace,
    picked: pl.DataFrame,
    modelled: pl.DataFrame | None,
    marks: pl.DataFrame,
    findings: Mapping[str, Any],
    options: ReportOptions,
) -> Section:
    frame, read = chart_data.memory_series(picked, modelled, buckets=options.buckets)
    weights = trace.manifest.engine_config.get("model_weights_bytes")
    levels = pl.DataFrame(
        [] if weights is None else [("weights", float(weights))],
        schema={"series": pl.String, "value": pl.Float64},
        orient="row",
    )
    tables = _summary_table(frame, "bytes")
    recon = findings.get("reconciliation")
    if isinstance(recon, list) and recon:
        rows = [_with_unit(r) for r in recon if isinstance(r, Mapping)]
        tables.append(("reconciliation", table_from_records(rows, order=RECONCILIATION_ORDER)))
    elif isinstance(recon, Mapping) and recon:
        tables.append(("reconciliation", table_from_mapping(recon)))
    chart_list: tuple[Chart, ...] = ()
    if frame.height or marks.height:
        spec = charts.memory_chart(frame, marks, levels, title="Memory over time")
        caption = _caption(frame.height, read, options.buckets)
        chart_list = (Chart("memory", "Memory over time", caption, spec, frame),)
    return Section(
        "memory",
        "Memory over time",
        paragraphs=(
            (
                "Device memory (NVML), the PyTorch allocator's reserved and allocated bytes, the "
                "KV cache as observed and as modelled from the requests, and the model weights; "
                "dashed rules mark out-of-memory errors and the incident peaks. Reserved memory is "
                "held by the allocator, not necessarily in use."
            ),
        ),
        tables=tuple(tables),
        charts=chart_list,
        empty="The trace has no memory samples: memory cannot be charted.",
    )


def _with_unit(row: Mapping[str, Any]) -> dict[str, Any]:
    """Reconciliation gaps carry their unit in a separate field; put it in the key, where the
    report's naming rule looks for it (``max_gap`` in bytes -> ``max_gap_bytes``)."""
    unit = row.get("unit")
    suffix = f"_{unit}" if unit in ("bytes", "tokens", "blocks") else ""
    out = {k: v for k, v in row.items() if k != "unit"}
    for key in ("median_gap", "max_gap"):
        if key in out:
            out[key + suffix] = out.pop(key)
    return out


def _caption(points: int, read: int, buckets: int) -> str:
    if points >= read:
        return f"{points:,} points: every sample read."
    return (
        f"{points:,} points drawn from {read:,} samples: the lowest and highest value of each of "
        f"{buckets:,} time slices, so no peak is averaged away."
    )


def _summary_table(frame: pl.DataFrame, unit: str) -> list[tuple[str, Any]]:
    """Per series: points drawn, lowest and highest (``lowest_bytes`` ...), when highest."""
    stats = chart_data.summary(frame, value_kind=unit)
    if not stats:
        return []
    keys = ("series", "points", f"lowest_{unit}", f"highest_{unit}", "highest_at")
    rows = [
        dict(
            zip(
                keys,
                (s["series"], s["points"], s["lowest"], s["highest"], s["highest_at"]),
                strict=True,
            )
        )
        for s in stats
    ]
    return [("series", table_from_records(rows, order=keys))]


def _admissions(trace: Trace, buckets: int) -> tuple[pl.DataFrame, str]:
    """Admitted or resumed requests per time slice of the whole trace; where the request log
    states no admission (vLLM and SGLang log a request's arrival and end only), arrivals, so
    that the bars say what was offered rather than nothing. Returns the counts and what they
    count."""
    events = trace.requests.select("request_id", "event", "ts")
    stamps = events.filter(pl.col("event").is_in(["admitted", "resumed"]))["ts"]
    what = "admitted"
    if not stamps.len():
        # first arrival of each request (a log can state one twice: API server and engine)
        arrivals = events.filter(pl.col("event") == "arrived")
        stamps = arrivals.unique("request_id", keep="first", maintain_order=True)["ts"].sort()
        what = "arrived"
    if not stamps.len():
        return pl.DataFrame(), what
    both = pl.concat([s for s in (trace.samples["ts"], trace.requests["ts"]) if s.len()])
    low, high = both.min(), both.max()
    if not isinstance(low, datetime) or not isinstance(high, datetime):
        return pl.DataFrame(), what
    end = high + timedelta(microseconds=1)
    counts = chart_data.counts_per_bucket(stamps, low, end, buckets=buckets, name="admissions")
    return counts, what


def _lifecycle_table(requests: pl.DataFrame) -> list[tuple[str, Any]]:
    counted = requests.group_by("event").agg(pl.len().alias("n")).sort("event")
    rows = [{"event": r["event"], "events_count": r["n"]} for r in counted.to_dicts()]
    return (
        [("lifecycle", table_from_records(rows, order=("event", "events_count")))] if rows else []
    )


def _activity_section(
    trace: Trace, picked: pl.DataFrame, marks: pl.DataFrame, options: ReportOptions
) -> Section:
    counts, read = chart_data.activity_series(picked, buckets=options.buckets)
    admissions, what = _admissions(trace, min(options.buckets, 400))
    tables = [*_summary_table(counts, "count"), *_lifecycle_table(trace.requests)]
    chart_list: tuple[Chart, ...] = ()
    if counts.height or admissions.height:
        spec = charts.activity_chart(counts, admissions, marks, title="Requests", bars=what)
        caption = _caption(counts.height, read, options.buckets)
        chart_list = (Chart("activity", "Requests", caption, spec, counts),)
    bars = (
        "grey bars, admitted or resumed requests counted from the request log"
        if what == "admitted"
        else "grey bars, requests arriving, counted from the request log, which states no "
        "admissions: the analysis infers them from the running count"
    )
    return Section(
        "activity",
        "Requests running, waiting and preempted",
        paragraphs=(
            f"What the scheduler reported (lines) over the requests in each time slice ({bars}).",
        ),
        tables=tuple(tables),
        charts=chart_list,
        empty="The trace states neither scheduler counts nor request lifecycles.",
    )


def _ledger_section(ledger: Any, kv_model: Any = None) -> Section:
    if not isinstance(ledger, Mapping) or not ledger:
        return Section(
            "ledger",
            "Admission ledger at the spike",
            empty="The analysis has no admission ledger (no resident requests known at the spike).",
        )
    rows = [r for r in ledger.get("rows") or ledger.get("requests") or [] if isinstance(r, Mapping)]
    totals = ledger.get("totals")
    rest = {k: v for k, v in ledger.items() if k not in ("rows", "requests", "totals")}
    tables: list[tuple[str, Any]] = []
    if rows:
        tables.append(
            ("requests", table_from_records(rows, order=LEDGER_ORDER, drop=unstated(rows)))
        )
    if isinstance(totals, Mapping):
        tables.append(("totals", table_from_mapping({**totals, **rest})))
    elif rest:
        tables.append(("totals", table_from_mapping(rest)))
    intro = (
        "Each request resident at the spike: what it asked for (input tokens and the most new "
        "tokens it may generate), what the engine had to be ready to hold, and what it held at "
        "that moment; then the totals and what was left of the KV pool."
    )
    caveat = _over_pool(totals if isinstance(totals, Mapping) else rest)
    paragraphs = [intro, _kv_basis(kv_model), caveat]
    return Section(
        "ledger",
        "Admission ledger at the spike",
        paragraphs=tuple(p for p in paragraphs if p),
        tables=tuple(tables),
    )


def _kv_basis(kv_model: Any) -> str:
    """Where the bytes per token came from, so that a reader can check a row by hand."""
    if not isinstance(kv_model, Mapping):
        return ""
    statement = kv_model.get("statement")
    if not isinstance(statement, str) or not statement:
        return ""
    per_token = kv_model.get("bytes_per_token")
    if not isinstance(per_token, int) or per_token <= 0:
        return f"KV model: {statement}."
    figure = "" if "per token" in statement else f" ({value_text(per_token, 'bytes')} per token)"
    return f"Bytes are whole blocks of stored tokens. KV model: {statement}{figure}."


def _over_pool(totals: Mapping[str, Any]) -> str:
    """Why a ledger can hold more than the pool: residency is an upper bound where the inputs
    do not state when the engine scheduled each request."""
    stored, pool = totals.get("stored_bytes"), totals.get("pool_bytes")
    if not isinstance(stored, int | float) or not isinstance(pool, int | float) or stored <= pool:
        return ""
    waiting = totals.get("waiting_requests")
    engine = (
        f" The engine itself reported {waiting:,} request(s) waiting at that moment."
        if isinstance(waiting, int)
        else ""
    )
    return (
        f"These requests add up to {value_text(stored, 'bytes')}, more than the "
        f"{value_text(pool, 'bytes')} pool, so some of them were not resident: where the inputs "
        "do not state when the engine scheduled each request (vLLM logs when a request enters "
        "its queue), a request counts as resident from the earliest moment they allow (its "
        "arrival, or the start of the stats interval in which the engine's running count "
        "reached it), an upper bound that can count queued or preempted requests too."
        f"{engine} The largest holders are ranked the same way; the totals are an upper bound."
    )
