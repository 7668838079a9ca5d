"""The sections every report has after the cause: memory and requests over the incident's
span, the incidents found, and the admission ledger at the spike."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Final

import polars as pl

from oomtrace.isotime import iso_time
from oomtrace.report import chart_data
from oomtrace.report.chart_data import y_top
from oomtrace.report.document import Chart, Section, Spec, Table
from oomtrace.report.drawn import Drawn
from oomtrace.report.fmt import value_text
from oomtrace.report.records import table_from_mapping, table_from_records
from oomtrace.report.trace_view import TraceView
from oomtrace.report.verdict import unstated

RECONCILIATION_ORDER: Final = (
    "name",
    "a",
    "b",
    "median_gap_bytes",
    "max_gap_bytes",
    "max_gap_ts",
    "points",
    "interpretation",
)
# The ledger's columns: what each request asked for, what the engine had to be ready to hold,
# what it held (with the bounds of a modelled figure) and since when. Blocks, the reserved
# tokens (prompt + max tokens) and the bases are in the findings document; ten columns fit a
# page 1,024 pixels wide.
LEDGER_ORDER: Final = (
    "request_id",
    "prompt_tokens",
    "max_tokens",
    "reserved_bytes",
    "stored_tokens",
    "stored_low",
    "stored_high",
    "stored_bytes",
    "blocks_basis",
    "preemptions",
    "share",
    "resident_since",
)
# The ledger's totals in reading order: what was resident, what it asked for, the pool, what
# was left, the queue.
TOTALS_ORDER: Final = (
    "ts",
    "resident_requests",
    "stored_tokens",
    "stored_bytes",
    "reserved_tokens",
    "reserved_bytes",
    "unknown_contracts",
    "pool_tokens",
    "pool_bytes",
    "remaining_bytes",
    "observed_used_bytes",
    "remaining_observed_bytes",
    "waiting_requests",
)
# Markers that would crowd a chart drawn over minutes (a preemption storm is tens of them):
# the KV chart marks preemptions on its own, the request chart draws them.
CROWDING: Final = ("preemption",)


def span_text(drawn: Drawn) -> str:
    span = drawn.span
    if span is None:
        return ""
    return f"from {iso_time(span.start)} to {iso_time(span.end)}"


def incidents_section(incidents: list[Mapping[str, Any]]) -> Section:
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


def memory_section(
    drawn: Drawn, read: int, weights: Any, findings: Mapping[str, Any], buckets: int
) -> Section:
    frame = drawn.memory
    levels = pl.DataFrame(
        [] if weights is None else [("weights", float(weights))],
        schema={"series": pl.String, "value": pl.Float64},
        orient="row",
    )
    tables = summary_table(frame, "bytes")
    recon = findings.get("reconciliation")
    if isinstance(recon, list) and recon:
        rows = [_with_unit(r) for r in recon if isinstance(r, Mapping)]
        tables.append(("reconciliation", table_from_records(rows, order=RECONCILIATION_ORDER)))
    elif isinstance(recon, Mapping) and recon:
        tables.append(("reconciliation", table_from_mapping(recon)))
    marks = drawn.marks.filter(~pl.col("kind").is_in(CROWDING))
    chart_list: tuple[Chart, ...] = ()
    if frame.height or marks.height:
        domain = drawn.domain()

        def draw() -> Spec:
            from oomtrace.report.overview_charts import memory_chart  # noqa: PLC0415 - Altair

            return memory_chart(frame, marks, levels, title="Memory over time", domain=domain)

        caption = caption_of(frame.height, read, buckets)
        top = y_top(frame["value"] / (1 << 30)) * (1 << 30)
        if weights is not None and weights > top:
            caption += (
                f" The model weights ({value_text(int(weights), 'bytes')}) lie above every "
                "series drawn and are left out, so that they do not flatten the rest."
            )
        chart_list = (Chart("memory", "Memory over time", caption, draw, frame),)
    where = span_text(drawn)
    return Section(
        "memory",
        "Memory over time",
        paragraphs=(
            (
                f"Device memory, the PyTorch allocator's reserved and allocated bytes, and the KV "
                f"cache as observed and as modelled from the requests{' ' + where if where else ''}"
                "; a spike between two samples is kept. Reserved memory is held by the allocator, "
                "not necessarily in use."
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


def caption_of(points: int, read: int, buckets: int) -> str:
    if points >= read:
        return f"{points:,} points: every sample read."
    return (
        f"{points:,} points drawn from {read:,} samples: the lowest and highest value of each of "
        f"{buckets:,} time slices, so no peak is averaged away."
    )


def summary_table(frame: pl.DataFrame, unit: str) -> list[tuple[str, Table]]:
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


def admissions(view: TraceView, drawn: Drawn, buckets: int) -> tuple[pl.DataFrame, str]:
    """Admitted or resumed requests per time slice of the charts' span; where the request log
    states no admission (vLLM and SGLang log a request's arrival and end only), arrivals, so
    that the bars say what was offered rather than nothing. Returns the counts and what they
    count."""
    events = view.requests.select("request_id", "event", "ts")
    span = drawn.span
    if span is not None:
        events = events.filter(pl.col("ts").is_between(span.start, span.end))
    wanted = events.filter(pl.col("event").is_in(["admitted", "resumed", "arrived"])).collect()
    stamps = wanted.filter(pl.col("event").is_in(["admitted", "resumed"]))["ts"]
    what = "admitted"
    if not stamps.len():
        # first arrival of each request (a log can state one twice: API server and engine)
        arrivals = wanted.filter(pl.col("event") == "arrived")
        stamps = arrivals.unique("request_id", keep="first", maintain_order=True)["ts"].sort()
        what = "arrived"
    if not stamps.len():
        return pl.DataFrame(), what
    low, high = (span.start, span.end) if span else (stamps.min(), stamps.max())
    if not isinstance(low, datetime) or not isinstance(high, datetime):
        return pl.DataFrame(), what
    end = high + timedelta(microseconds=1)
    counts = chart_data.counts_per_bucket(stamps, low, end, buckets=buckets, name="admissions")
    return counts, what


def lifecycle_table(view: TraceView) -> list[tuple[str, Table]]:
    """Request events of the whole trace, counted by kind (one streaming pass)."""
    counted = view.requests.group_by("event").agg(pl.len().alias("n")).sort("event").collect()
    rows = [{"event": r["event"], "events_count": r["n"]} for r in counted.to_dicts()]
    return (
        [("lifecycle", table_from_records(rows, order=("event", "events_count")))] if rows else []
    )


def activity_section(view: TraceView, drawn: Drawn, read: int, buckets: int) -> Section:
    counts = drawn.activity
    bars, what = admissions(view, drawn, min(buckets, 400))
    tables = [*summary_table(counts, "count"), *lifecycle_table(view)]
    chart_list: tuple[Chart, ...] = ()
    if counts.height or bars.height:
        marks, domain = drawn.marks, drawn.domain()

        def draw() -> Spec:
            from oomtrace.report.overview_charts import activity_chart  # noqa: PLC0415 - Altair

            return activity_chart(counts, bars, marks, title="Requests", bars=what, domain=domain)

        caption = caption_of(counts.height, read, buckets)
        chart_list = (Chart("activity", "Requests", caption, draw, counts),)
    bars_text = (
        "grey bars, admitted or resumed requests counted from the request log"
        if what == "admitted"
        else "grey bars, requests arriving, counted from the request log, which states no "
        "admissions: the analysis infers them from the running count"
    )
    return Section(
        "activity",
        "Requests running, waiting and preempted",
        paragraphs=(
            (
                f"What the scheduler reported (lines) over the requests in each time slice "
                f"({bars_text}); the lifecycle table counts the whole trace."
            ),
        ),
        tables=tuple(tables),
        charts=chart_list,
        empty="The trace states neither scheduler counts nor request lifecycles.",
    )


def ledger_section(ledger: Any, kv_model: Any = None) -> Section:
    title = "Admission ledger at the spike"
    rows = []
    if isinstance(ledger, Mapping):
        rows = [r for r in ledger.get("rows") or [] if isinstance(r, Mapping)]
    resident = ledger.get("resident_requests") if isinstance(ledger, Mapping) else None
    if not isinstance(ledger, Mapping) or not ledger or (not rows and not resident):
        return Section(
            "ledger",
            title,
            empty="No request was resident at the spike (the engine served none, or the inputs "
            "state no admissions), so there is no ledger.",
        )
    # the analysis' ledger: its rows, and its totals as the other fields
    totals = {k: v for k, v in ledger.items() if k != "rows"}
    tables: list[tuple[str, Table]] = []
    if rows:
        left_out = (*unstated(rows), *_unbounded(rows))
        order = tuple(k for k in LEDGER_ORDER if k not in left_out)
        hidden = sorted({k for r in rows for k in r} - set(order))
        tables.append(("requests", table_from_records(rows, order=order, drop=hidden)))
    if totals:
        tables.append(("totals", table_from_mapping(totals, order=TOTALS_ORDER)))
    intro = (
        "Each request resident at the spike: what it asked for (input tokens and the most new "
        "tokens it may generate), what the engine had to be ready to hold, and what it held at "
        "that moment; then the totals and what was left of the KV pool."
    )
    caveat = _over_pool(totals)
    paragraphs = [intro, _kv_basis(kv_model), caveat]
    return Section(
        "ledger", title, paragraphs=tuple(p for p in paragraphs if p), tables=tuple(tables)
    )


def _unbounded(rows: list[Mapping[str, Any]]) -> tuple[str, ...]:
    """The bounds of the stored figure, left out where every row's figure is exact (its low
    and high bounds are the figure itself: the engine stated it)."""
    exact = all(
        r.get("stored_low") in (None, r.get("stored_tokens"))
        and r.get("stored_high") in (None, r.get("stored_tokens"))
        for r in rows
    )
    return ("stored_low", "stored_high") if exact else ()


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
