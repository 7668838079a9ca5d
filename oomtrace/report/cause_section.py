"""The section right after the verdict: what ran out, drawn so that the cause is seen at once.

One chart per incident class (:mod:`oomtrace.report.cause_charts`), with a paragraph that reads
the chart's figures aloud and says what was computed for the drawing alone. A class without a
chart of its own (undetermined) says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Final

import polars as pl

from oomtrace.isotime import iso_time
from oomtrace.report import cause_data, palette
from oomtrace.report import processes as processes_of
from oomtrace.report.document import Chart, Figure, Section, Spec
from oomtrace.report.drawn import Drawn
from oomtrace.report.fmt import lane_text
from oomtrace.report.records import parse_time
from oomtrace.report.span import Span
from oomtrace.units import format_bytes

KEY: Final = "cause"
# The memory series a leak is drawn on, by the analysis' metric name, in order of preference.
LEAK_SERIES: Final = {
    "device_used_bytes": "device used",
    "torch_reserved_bytes": "allocator reserved",
    "torch_allocated_bytes": "allocator allocated",
}
TITLES: Final[dict[str, str]] = {
    "kv_exhaustion": "What ran out: the KV cache pool",
    "transient_peak": "What ran out: room for one step",
    "fragmentation": "What ran out: memory in one piece",
    "foreign_memory": "What ran out: memory another process took",
    "leak": "What ran out: memory that never came back",
    "startup_misfit": "What ran out: the configuration does not fit the device",
    "gpu_fault": "What failed: the GPU, not its memory",
    "workspace_overflow": "What ran out: FlashInfer's fixed attention workspace",
}


def cause_section(
    incident: Mapping[str, Any] | None, findings: Mapping[str, Any], drawn: Drawn
) -> Section:
    cls = str((incident or {}).get("class") or "none")
    title = TITLES.get(cls, "What ran out")
    if incident is None:
        return Section(KEY, title, empty="There is no incident, so nothing ran out.")
    build = {
        "kv_exhaustion": _kv,
        "transient_peak": _allocation,
        "fragmentation": _allocation,
        "foreign_memory": _foreign,
        "leak": _leak,
        "startup_misfit": _misfit,
        "workspace_overflow": _workspace,
    }.get(cls)
    if build is None and cls == "gpu_fault":
        return Section(
            KEY,
            title,
            empty="The driver reported a fault of the GPU (its Xid, in the verdict): nothing ran "
            "out of memory, so no chart of what ran out is drawn; the memory chart below shows "
            "what the device held.",
        )
    if build is None:
        return Section(
            KEY,
            title,
            empty="The analysis did not decide the cause, so no chart shows it; the memory and "
            "request charts below show what was recorded.",
        )
    section: Section = build(incident, findings, drawn, title)
    return section


# -- KV exhaustion -------------------------------------------------------------------------------


def _observed_kv(drawn: Drawn, incident: Mapping[str, Any]) -> tuple[pl.DataFrame, str]:
    """The observed KV series the incident was found on (its anchor's source), else the one
    with the most points; else the modelled one. Returns ``ts, value`` and what it is."""
    frame = drawn.analysis
    observed = frame.filter(pl.col("series") == "KV observed")
    if observed.height:
        anchor = str(incident.get("anchor_series") or "")
        sources = observed.group_by("source").len().sort("len", "source", descending=[True, False])
        named = [s for s in sources["source"].to_list() if s and f"({s})" in anchor]
        source = named[0] if named else sources["source"][0]
        chosen = observed.filter(pl.col("source") == source)
        return chosen.select("ts", "value").sort("ts"), "observed"
    modelled = frame.filter(pl.col("series") == "KV modelled")
    return modelled.select("ts", "value").sort("ts"), "modelled"


def _kv(
    incident: Mapping[str, Any], findings: Mapping[str, Any], drawn: Drawn, title: str
) -> Section:
    peak = parse_time(incident.get("peak_ts"))
    start = parse_time(incident.get("window_start")) or parse_time(incident.get("start"))
    kv_model = findings.get("kv_model") or {}
    capacity = cause_data.number(kv_model.get("pool_bytes"), incident.get("capacity_bytes"))
    if peak is None or start is None or capacity is None:
        return Section(KEY, title, empty="The findings state no KV pool size or peak to draw.")
    # From the start of the window, or later when every culprit became resident later (a pool
    # filled in half a second is not drawn across a minute), to a little after the peak.
    since = [
        t
        for c in incident.get("culprits") or []
        if isinstance(c, Mapping) and (t := parse_time(c.get("resident_since"))) is not None
    ]
    if since and start < min(since) < peak:
        start = min(since)
    length = max(peak - start, timedelta(seconds=1))
    start = min(start, peak - length)
    window = Span(start - length / 20, peak + length / 10, peak)
    series, what = _observed_kv(drawn, incident)
    inside = series.filter(pl.col("ts").is_between(start, peak))
    use = cause_data.kv_use(inside, drawn.lanes)
    preempted = cause_data.preemptions(drawn.events, drawn.preempted, window.start, window.end)
    marks = drawn.marks_in(window).filter(pl.col("kind") != "preemption")
    if use.is_empty():
        return Section(
            KEY,
            title,
            paragraphs=(
                (
                    f"The pool holds {format_bytes(capacity)}; no series of the KV in use "
                    "(observed or modelled) covers the analysis window, so it is not drawn."
                ),
            ),
            figures=(Figure("pool", "KV pool", capacity, "bytes"),),
        )
    domain = drawn.domain(window)

    def draw() -> Spec:
        from oomtrace.report.cause_charts import kv_pool_chart  # noqa: PLC0415 - Altair: to draw

        return kv_pool_chart(use, capacity, preempted, marks, title=title, domain=domain)

    culprits = [c for c in incident.get("culprits") or [] if isinstance(c, Mapping)]
    held = sum(int(c.get("bytes") or 0) for c in culprits)
    observed = cause_data.number(incident.get("observed_bytes"), incident.get("peak_bytes"))
    text = f"The pool holds {format_bytes(capacity)}. At {iso_time(peak)}, " + (
        f"{format_bytes(observed)} were in use ({observed / capacity:.1%} full)."
        if observed is not None
        else "the pool was full."
    )
    if culprits and observed is not None and held > observed:
        text += (
            f" The {len(culprits)} culprits are modelled to hold {format_bytes(held)}, more than "
            "was in use (where the inputs do not state when each was scheduled, residency is an "
            "upper bound), so the chart caps their part at what was in use."
        )
    elif culprits:
        text += f" The {len(culprits)} culprits held {format_bytes(held)} of it."
    window_start = parse_time(incident.get("window_start"))
    since_when = (
        "the start of the analysis window"
        if start == window_start
        else "a little before the culprits became resident"
    )
    text += (
        f" The chart splits the {what} KV in use into the culprits' part, which grows with their "
        f"stored tokens, and the other requests' part, from {iso_time(start)} ({since_when})."
    )
    if preempted.height:
        text += (
            f" {preempted.height} preemption(s) in that time: the engine evicted requests to make "
            "room (marked along the top)."
        )
    figures = (
        Figure("pool", "KV pool", capacity, "bytes"),
        Figure("in_use", "in use at the peak", observed, "bytes"),
        Figure(
            "culprits",
            "held by the culprits"
            + (" (modelled, an upper bound)" if observed is not None and held > observed else ""),
            held or None,
            "bytes",
        ),
        Figure("preemptions", "preemptions drawn", preempted.height, "count"),
    )
    caption = (
        f"KV in use ({what}) against the pool's capacity, {use['ts'].n_unique():,} observations "
        "of the pool in the window."
    )
    chart = Chart(KEY, title, caption, draw, use)
    return Section(KEY, title, paragraphs=(text,), figures=figures, charts=(chart,))


# -- transient peak and fragmentation ------------------------------------------------------------


def _allocation(
    incident: Mapping[str, Any], findings: Mapping[str, Any], drawn: Drawn, title: str
) -> Section:
    labels = {
        str(c.get("request_id")): lane_text(
            str(c.get("request_id")), c.get("rank") if isinstance(c.get("rank"), int) else None
        )
        for c in incident.get("culprits") or []
        if isinstance(c, Mapping)
    }
    bars, headroom, stated = cause_data.allocation_bars(incident, labels)
    if bars.is_empty():
        return Section(
            KEY,
            title,
            empty="The findings state neither the failed allocation nor "
            "the memory free at the failure.",
        )

    def draw() -> Spec:
        from oomtrace.report.cause_charts import allocation_chart  # noqa: PLC0415 - as above

        return allocation_chart(bars, headroom, title=title)

    requested, free, slack = stated["requested"], stated["free"], stated["slack"]
    total, in_use = stated["total"], stated["in_use"]
    parts = []
    if requested is not None:
        parts.append(f"An allocation of {format_bytes(requested)} failed")
    if free is not None:
        room = f"with {format_bytes(free)} free"
        if total is not None:
            room += f" on the {format_bytes(total)} device"
        if in_use is not None:
            room += f" ({format_bytes(in_use)} in use)"
        parts.append(room)
    if slack:
        parts.append(
            f"and {format_bytes(slack)} cached by PyTorch's allocator but not in one piece"
        )
    steps = bars.filter(pl.col("part") == "estimated for this request's step")
    sentence = " ".join(parts) + "."
    if steps.height:
        named = "; ".join(
            f"{row} ({note}, about {format_bytes(int(value))})"
            for row, value, note in steps.select("row", "value", "note").iter_rows()
        )
        sentence += (
            f" The analysis estimates what the requests of that step needed: {named}. The chart "
            "sets each against the headroom."
        )
    elif incident.get("culprits"):
        sentence += (
            " The analysis estimated no per-request step bytes for this incident; the culprits "
            "are the requests admitted in the window."
        )
    else:
        # no request in the inputs: say so, rather than point at culprits that are not there
        sentence += (
            " The inputs name no request at the failure, so the step is not attributed to "
            "requests: the headroom is what the fix changes."
        )
    figures = (
        Figure("requested", "allocation that failed", requested, "bytes"),
        Figure("free", "free on the device", free, "bytes"),
        Figure("slack", "allocator slack", slack, "bytes"),
        Figure("total", "device total", total, "bytes"),
    )
    caption = "Bytes at the failure (the OOM event), and the analysis' estimate per request."
    chart = Chart(KEY, title, caption, draw, bars)
    return Section(KEY, title, paragraphs=(sentence,), figures=figures, charts=(chart,))


# -- foreign memory ------------------------------------------------------------------------------


def _foreign(
    incident: Mapping[str, Any], findings: Mapping[str, Any], drawn: Drawn, title: str
) -> Section:
    foreign = processes_of.foreign_pids(incident)
    names = processes_of.all_names(incident, drawn.events)
    device = incident.get("device")
    processes = drawn.processes
    if isinstance(device, int):
        processes = processes.filter(pl.col("device").is_null() | (pl.col("device") == device))
    frame = processes_of.process_use(processes.select("ts", "pid", "value"), foreign, names)
    tables = (("other processes", processes_of.process_table(incident, names)),)
    if frame.is_empty():
        unsampled = (
            "No source sampled memory per process, so the processes cannot be drawn; the "
            "evidence above names the other process."
        )
        return Section(KEY, title, paragraphs=(unsampled,), tables=tables)
    total = cause_data.number(incident.get("capacity_bytes"))
    # a source that states each process once (PyTorch's OOM message) gives no line to draw:
    # the processes are then one stacked bar at that moment
    once = frame.group_by("process").len()["len"].max() == 1
    marks, domain = drawn.marks_in(drawn.span), drawn.domain()

    def draw() -> Spec:
        if once:
            return processes_of.process_snapshot(frame, total, title=title)
        from oomtrace.report.cause_charts import process_chart  # noqa: PLC0415 - as above

        return process_chart(frame, total, marks, title=title, domain=domain)

    if once:
        drawing = (
            " The bar stacks each process's device memory at that moment, the engine's first, "
            "against the device's total."
        )
    else:
        drawing = (
            " The chart stacks each process's device memory, the engine's at the bottom, under "
            "the device's total: the engine ran out when the stack reached it."
        )
    text = processes_of.held_text(incident, names) + drawing
    last = frame["ts"].max()
    caption = (
        f"Device memory per process as stated once, at {iso_time(last)}."
        if once and isinstance(last, datetime)
        else f"Device memory per process, {frame.height:,} points."
    )
    chart = Chart(KEY, title, caption, draw, frame)
    return Section(KEY, title, paragraphs=(text.strip(),), charts=(chart,), tables=tables)


# -- leak ----------------------------------------------------------------------------------------


def _leak(
    incident: Mapping[str, Any], findings: Mapping[str, Any], drawn: Drawn, title: str
) -> Section:
    memory = drawn.memory
    figures_of = cause_data.check_figures(incident)
    # the series the analysis measured the leak on first, at its first idle level
    measured = LEAK_SERIES.get(str(figures_of.get("metric")))
    level = pl.DataFrame()
    for name in dict.fromkeys([*([measured] if measured else []), *LEAK_SERIES.values()]):
        level = memory.filter(pl.col("series") == name).select("ts", "value")
        if level.height:
            break
    if level.is_empty() or drawn.span is None:
        return Section(KEY, title, empty="No memory series to draw the growth on.")
    running = drawn.activity.filter(pl.col("series") == "requests running").select("ts", "value")
    settled = figures_of.get("first_level_bytes") if name == measured else None
    idle = cause_data.idle_levels(
        level, running, cause_data.number(settled), parse_time(incident.get("peak_ts"))
    )
    line = cause_data.trend(idle, drawn.span.start, drawn.span.end)
    totals = memory.filter(pl.col("series") == "device total")["value"]
    limit = cause_data.number(
        incident.get("capacity_bytes"), totals.max() if totals.len() else None
    )
    domain = drawn.domain()

    def draw() -> Spec:
        from oomtrace.report.cause_charts import leak_chart  # noqa: PLC0415 - as above

        return leak_chart(level, idle, line, limit, drawn.marks, title=title, domain=domain)

    rate = cause_data.number(figures_of.get("rise_bytes_per_hour"))
    room = cause_data.number(figures_of.get("headroom_bytes"))
    text = (
        f"Memory at the {idle.height:,} idle moments (no request running), with their trend (a "
        "least-squares line, drawn for reading only)"
        + (f", against the {format_bytes(limit)} device" if limit else "")
        + "."
    )
    if rate:
        text += f" The analysis measured a rise of {format_bytes(rate)} per hour at idle"
        text += f" against {format_bytes(room)} of headroom." if room else "."
    figures = (
        Figure("rate", "rise per hour at idle", rate, "bytes"),
        Figure("headroom", "headroom", room, "bytes"),
    )
    chart = Chart(KEY, title, f"{level.height:,} points of memory in use.", draw, level)
    return Section(KEY, title, paragraphs=(text,), figures=figures, charts=(chart,))


# -- start-up misfit -----------------------------------------------------------------------------


def _misfit(
    incident: Mapping[str, Any], findings: Mapping[str, Any], drawn: Drawn, title: str
) -> Section:
    values = cause_data.refusal_values(incident)
    totals = drawn.memory.filter(pl.col("series") == "device total")["value"]
    total = cause_data.number(
        incident.get("capacity_bytes"), totals.max() if totals.len() else None
    )
    remedies = [r for r in findings.get("remedies") or [] if isinstance(r, Mapping)]
    phased = values.get("phase") is not None
    if phased:
        bars, limits = cause_data.phase_bars(values, total)
    else:
        bars, limits = cause_data.fit_bars(values, drawn.config, total, remedies)
    if bars.is_empty():
        what = "refusal" if incident.get("anchor") == "startup" else "failure"
        return Section(KEY, title, empty=f"The {what} states no sizes to draw.")
    colours = palette.FAILED_ALLOCATION if phased else palette.PARTS

    def draw() -> Spec:
        from oomtrace.report.cause_charts import fit_chart  # noqa: PLC0415 - as above

        return fit_chart(bars, limits, title=title, colours=colours)

    if phased:
        text = cause_data.phase_text(values, bars, limits)
    else:
        sums = bars.group_by("bar", maintain_order=True).agg(pl.col("value").sum())
        rows = [f"{bar}: {format_bytes(int(v))}" for bar, v in sums.iter_rows()]
        text = (
            "Model weights, the runtime reserve (activations, CUDA graphs and what lies outside "
            "PyTorch: the engine's share of the device less weights and KV cache) and the KV "
            "cache one request of the configured length needs, against the device: "
            + "; ".join(rows)
            + "."
        )
    caption = "From the engine's start-up statements and its refusal."
    chart = Chart(KEY, title, caption, draw, bars)
    return Section(KEY, title, paragraphs=(text,), charts=(chart,))


# -- FlashInfer's workspace ----------------------------------------------------------------------


def _workspace(
    incident: Mapping[str, Any], findings: Mapping[str, Any], drawn: Drawn, title: str
) -> Section:
    """No chart: the buffer is not device memory, so no memory series shows it."""
    figures_of = cause_data.check_figures(incident)
    asked = cause_data.number(figures_of.get("requested_bytes"))
    left = cause_data.number(figures_of.get("available_bytes"))
    tokens = cause_data.number(figures_of.get("batch_tokens"))
    buffer = str(figures_of.get("buffer") or "a temporary buffer")
    text = (
        f"FlashInfer planned a prefill batch's attention into its workspace and {buffer} did not "
        "fit: the workspace is a buffer of fixed size, set aside once, so the device's free "
        "memory did not help."
    )
    figures = [
        Figure("asked", f"{buffer} asked", asked, "bytes"),
        Figure("left", "workspace left", left, "bytes"),
        Figure("batch", "prefill batch", tokens, "tokens"),
    ]
    return Section(
        KEY, title, paragraphs=(text,), figures=tuple(f for f in figures if f.value is not None)
    )
