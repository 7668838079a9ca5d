"""``oomtrace analyze`` on a terminal: what happened, when, the top culprits, coverage and data
gaps, readable by a person on call in thirty seconds. Everything that came from a log is escaped
(:func:`oomtrace.escape.terminal`)."""

from __future__ import annotations

import textwrap
from datetime import datetime
from pathlib import PurePath
from typing import Final

from oomtrace import escape
from oomtrace.analysis.findings import (
    NOT_REQUESTS,
    Culprit,
    Findings,
    Gap,
    Incident,
    Remedy,
    TraceSummary,
)
from oomtrace.analysis.request_logging import how_to_name_requests
from oomtrace.isotime import iso_time
from oomtrace.units import format_bytes

TOP_SHOWN: Final = 5
# Gap kinds of inputs left out of the timeline (oomtrace.analysis.gaps.manifest_gaps).
SET_APART_KINDS: Final = frozenset({"unaligned", "untimed"})
GAPS_SHOWN: Final = 5
REMEDIES_SHOWN: Final = 3
WRAP: Final = 100


def when(ts: datetime | None) -> str:
    return "unknown time" if ts is None else iso_time(ts, 3, sep=" ", zone=" UTC")


def _when(incident: Incident) -> str:
    """The incident's moment, or why it has none (a log that prints no time)."""
    if incident.peak_ts is None and incident.time_note:
        return escape.terminal(incident.time_note)
    return when(incident.peak_ts)


def _bytes(value: int | None) -> str:
    return "unknown" if value is None else format_bytes(value)


def render_summary(findings: Findings) -> str:
    """The whole summary as text (ends with a newline)."""
    lines = [_headline(findings), *_set_apart(findings), ""]
    deaths = [f"DEATH    {escape.terminal(d)}" for d in findings.trace.deaths]
    if not findings.incidents and deaths:
        lines += ["No OOM and no spike above the thresholds, but the engine died:", *deaths, ""]
    elif not findings.incidents:
        lines.append("No incident: no OOM event and no spike above the thresholds.")
    if findings.remedies:
        lines += [*_remedies(findings.remedies), ""]
    for incident in findings.incidents[:1]:
        lines += _incident(incident, findings.trace)
    if findings.incidents and deaths:
        lines += ["", "Deaths no incident explains:", *deaths]
    others = findings.incidents[1:]
    if others:
        lines += ["", f"Other incidents ({len(others)}):"]
        lines += [
            f"  {i.id} {i.cls} at {_when(i)}: {escape.terminal(i.reason, 110)}" for i in others
        ]
    lines += ["", *_gaps(findings), "", f"KV model: {findings.kv_model['statement']}"]
    rate = findings.decode_rate.get("statement")
    if rate:
        lines.append(f"Decode rate: {rate}")
    return "\n".join(lines) + "\n"


def _remedies(remedies: tuple[Remedy, ...]) -> list[str]:
    """The remedies first: what to change, then the numbers behind it (escaped: a remedy names
    processes and settings read from logs)."""
    lines = ["Remedies (the first prevents it at the least cost):"]
    for number, remedy in enumerate(remedies[:REMEDIES_SHOWN], start=1):
        lines.append(
            f"  {number}. {escape.terminal(remedy.action)}  [{remedy.incident}, {remedy.basis}]"
        )
        detail = textwrap.wrap(escape.terminal(remedy.detail), WRAP)
        lines += [f"       {part}" for part in detail]
    if len(remedies) > REMEDIES_SHOWN:
        lines.append(f"  … {len(remedies) - REMEDIES_SHOWN} more in --json")
    return lines


def _headline(findings: Findings) -> str:
    trace = findings.trace
    span = ""
    if trace.start is not None and trace.end is not None:
        span = f", {when(trace.start)} to {when(trace.end)}"
    elif trace.time_note:
        span = f", {trace.time_note}"
    nodes = ", ".join(escape.terminal(n) for n in trace.nodes)
    count = len(findings.incidents)
    return (
        f"oomtrace analyze: {count} incident{'s' if count != 1 else ''} on {nodes}{span} "
        f"({trace.requests:,} requests, {trace.samples:,} samples, {trace.events:,} events)"
    )


def _set_apart(findings: Findings) -> list[str]:
    """Inputs left out of the timeline (their times could not be aligned or anchored), right
    under the headline: what the findings do not rest on, and the remedy."""
    return [
        f"WARNING  {escape.terminal(gap.detail)}"
        for gap in findings.gaps
        if gap.kind in SET_APART_KINDS
    ]


def _anchor(incident: Incident) -> str:
    """What the incident is anchored on, in words."""
    if incident.cls == "workspace_overflow":
        # not device memory: FlashInfer's fixed workspace (oomtrace/analysis/workspace.py)
        return "FlashInfer's attention workspace overflowing"
    return {
        "oom": "an out-of-memory error",
        "startup": "a startup refusal",
        "preemption": "the engine's preemptions or retractions",
        "spike": f"a spike of {escape.terminal(incident.anchor_series or '')}",
        "xid": "the driver's Xid report of a GPU fault",
    }[incident.anchor]


def _incident(incident: Incident, trace: TraceSummary) -> list[str]:
    where = escape.terminal(incident.node) + (
        f" GPU {incident.device}" if incident.device is not None else ""
    )
    anchor = _anchor(incident)
    lines = [
        f"PRIMARY  {incident.cls} at {_when(incident)} on {where} (anchored on {anchor})",
        f"  why:       {escape.terminal(incident.reason)}",
    ]
    kv_peak = incident.anchor == "spike" and (incident.anchor_series or "").startswith("kv_used")
    of_what = "KV pool" if kv_peak else "device memory"
    if incident.peak_bytes is None:
        peak = "  peak:      no memory figure at the peak"
        if incident.capacity_bytes:
            peak += f" ({format_bytes(incident.capacity_bytes)} {of_what})"
    else:
        peak = f"  peak:      {format_bytes(incident.peak_bytes)}"
        if incident.capacity_bytes:
            peak += f" of {format_bytes(incident.capacity_bytes)} {of_what}"
    if incident.start is not None:
        peak += f"; the rise began at {when(incident.start)}"
    lines.append(peak)
    lines.append(_coverage(incident) if trace.requests > 0 else no_requests_named(trace.engine))
    # Another process is worth a line when it matters: the class says so, or it holds 1 %.
    shown = [p for p in incident.processes if incident.cls == "foreign_memory" or p.share >= 0.01]
    for process in shown[:3]:
        who = f"process {process.pid}" if process.pid is not None else "other processes"
        if process.name:
            who += f" ({escape.terminal(process.name, 60)})"
        grew = (
            f" (+{format_bytes(process.growth_bytes)} in the window)"
            if process.growth_bytes
            else ""
        )
        lines.append(f"  foreign:   {who} held {format_bytes(process.bytes)}{grew}")
    if incident.culprits:
        lines += ["  culprits (most responsible first):", *_table(incident.culprits)]
        if len(incident.culprits) > TOP_SHOWN:
            lines.append(f"    … {len(incident.culprits) - TOP_SHOWN} more in --json")
    elif incident.cls in NOT_REQUESTS:
        lines.append("  culprits:  none among the requests: the class names the cause")
    ledger = incident.ledger
    if ledger.ts is None:  # no time: no request placed at the failure, no ledger to show
        return lines
    text = (
        f"  ledger:    {ledger.resident_requests} resident, {ledger.stored_tokens:,} tokens stored"
    )
    if ledger.stored_bytes is not None:
        text += f" ({format_bytes(ledger.stored_bytes)})"
    if ledger.pool_bytes:
        text += f" of a {format_bytes(ledger.pool_bytes)} pool"
    if ledger.reserved_tokens is not None:
        text += f"; contracts {ledger.reserved_tokens:,} tokens"
    if ledger.waiting_requests is not None:
        text += f"; {ledger.waiting_requests} waiting"
    lines.append(text)
    return lines


# Where the inputs name no request at all, a coverage of 0 % would read as requests that failed
# to explain the memory: say what is missing and what names them.
def no_requests_named(engine: str | None) -> str:
    return (
        "  requests:  the inputs name no request, so no memory is attributed to one: "
        + how_to_name_requests(engine)
    )


def _coverage(incident: Incident) -> str:
    if incident.coverage is None:
        return f"  coverage:  not computed ({incident.coverage_basis})"
    named = incident.ledger.resident_requests
    text = (
        f"  coverage:  {incident.coverage:.1%} of the {incident.coverage_basis} "
        f"({_bytes(incident.observed_bytes)}) is explained by {named} named request"
        f"{'s' if named != 1 else ''}"
    )
    if incident.unexplained_bytes:
        text += f"; {format_bytes(incident.unexplained_bytes)} unexplained"
    if incident.model_note:
        text += "\n  model:     " + escape.terminal(incident.model_note)
    return text


def _table(culprits: tuple[Culprit, ...]) -> list[str]:
    # Ids are shown whole, however long: a person copies them into grep.
    shown = culprits[:TOP_SHOWN]
    width = max(len("request"), *(len(escape.terminal(c.request_id)) for c in shown))
    header = f"    {'#':>2}  {'request':<{width}}  {'tokens':>16}  {'KV':>11}  {'share':>6}  notes"
    rows = [header]
    for c in shown:
        tokens = "?" if c.tokens is None else f"{c.tokens:,} {c.basis or ''}".strip()
        kv = "?" if c.bytes is None else format_bytes(c.bytes)
        notes = []
        if c.in_prefill:
            notes.append(
                f"in prefill, prompt {c.prompt_tokens:,}" if c.prompt_tokens else "in prefill"
            )
        if c.admitted_in_window:
            notes.append("admitted in window")
        elif c.growth_tokens:
            notes.append(f"+{c.growth_tokens:,} tokens in window")
        request = escape.terminal(c.request_id)
        rows.append(
            f"    {c.rank:>2}  {request:<{width}}  {tokens:>16}  "
            f"{kv:>11}  {c.share:>6.1%}  {', '.join(notes)}"
        )
    return rows


def _gaps(findings: Findings) -> list[str]:
    """The real gaps, one line each and folded per source (skipped lines by source, holes by
    source); assumptions only counted, the report and ``--json`` list them."""
    gaps = [g for g in findings.gaps if g.category == "gap"]
    assumed = len(findings.gaps) - len(gaps)
    lines = [_gap_line(*item) for item in _folded(gaps)]
    head = f"Data gaps ({len(lines)}):" if lines else "Data gaps: none found."
    out = [head, *(f"  - {line}" for line in lines[:GAPS_SHOWN])]
    if len(lines) > GAPS_SHOWN:
        out.append(f"  … {len(lines) - GAPS_SHOWN} more in --json")
    if assumed:
        out.append(
            f"Assumptions: {assumed} (how times were placed, what was inferred) in the report "
            "and --json"
        )
    return out


def _folded(gaps: list[Gap]) -> list[tuple[str | None, str]]:
    """Missing data first, then holes and skipped lines per source, then the rest."""
    missing, rest = [], []
    skipped: dict[str | None, list[Gap]] = {}
    holes: dict[str | None, list[Gap]] = {}
    for gap in gaps:
        if gap.kind == "skipped_lines":
            skipped.setdefault(gap.source, []).append(gap)
        elif gap.kind == "hole":
            holes.setdefault(gap.source, []).append(gap)
        elif gap.kind.startswith("no_") or gap.kind in ("single_source", "unrecognised_source"):
            missing.append((gap.source, gap.detail))
        else:
            rest.append((gap.source, gap.detail))
    for source, group in holes.items():
        if len(group) == 1:
            missing.append((source, group[0].detail))
            continue
        longest = max(
            ((g.end - g.start).total_seconds() for g in group if g.start and g.end), default=0
        )
        missing.append((source, f"{len(group)} holes in its series, the longest {longest:.1f} s"))
    for source, group in skipped.items():
        count = sum(g.count or 0 for g in group)
        reasons = f"{len(group)} reasons" if len(group) > 1 else "1 reason"
        missing.append((source, f"{count:,} line(s) skipped ({reasons}; listed in the report)"))
    return missing + rest


def _gap_line(source: str | None, detail: str) -> str:
    if source is None:
        return escape.terminal(detail, 120)
    # Series name their source ``parser:path``: the file name is enough to read it by.
    short = PurePath(source.split(":", 1)[-1].replace("\\", "/")).name or source
    # a detail that begins with its source's name already (untimed inputs') names it once
    detail = detail.replace(f" ({source})", "").removeprefix(f"{source}: ")
    return (
        f"{escape.terminal(short, 40)}: {escape.terminal(detail.removeprefix(f'{short}: '), 120)}"
    )
