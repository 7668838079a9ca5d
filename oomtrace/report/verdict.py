"""The verdict: class, time, size, culprits and coverage, and one paragraph a manager can read.

Every sentence is made from figures in the findings; a figure the analysis does not state is
left out of the sentence rather than guessed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from oomtrace.analysis.request_logging import how_to_name_requests
from oomtrace.isotime import iso_time
from oomtrace.report.cause_data import check_figures
from oomtrace.report.document import Figure, Table, Verdict
from oomtrace.report.fmt import value_text
from oomtrace.report.records import parse_time, table_from_records

CLASS_LABELS: Final[dict[str, str]] = {
    "kv_exhaustion": "KV cache pool exhausted",
    "transient_peak": "Transient memory peak",
    "startup_misfit": "Startup misfit",
    "fragmentation": "Allocator fragmentation",
    "foreign_memory": "Another process on the GPU",
    "leak": "Slow growth (leak)",
    "gpu_fault": "GPU fault (Xid)",
    "workspace_overflow": "Attention workspace too small",
    "unknown": "Cause undetermined",
    "none": "No incident found",
}

CLASS_EXPLANATIONS: Final[dict[str, str]] = {
    "kv_exhaustion": (
        "The KV cache, which holds the stored tokens of every resident request, ran out of "
        "blocks: requests growing together used it up, and the engine had to preempt requests "
        "or fail."
    ),
    "transient_peak": (
        "Memory rose briefly above what the device could give while the KV cache still had "
        "room: temporary memory for a large step (a long prompt's prefill, its activations or "
        "logits) did not fit beside the cache."
    ),
    # the same class where nothing observed the KV cache at the failure (an OOM message pasted
    # alone, a log without times): what the cache held then is not known, so not said
    "transient_peak_kv_unseen": (
        "One allocation asked for more than the device could give at that moment: temporary "
        "memory for a step (a long prompt's prefill, its activations or logits, a compute "
        "buffer) did not fit beside what was already held. Nothing in the inputs shows how "
        "full the KV cache was then."
    ),
    # the same class where the failure came through the vision encoder (its frames): the step
    # was a request's images, which no KV or batch setting bounds
    "transient_peak_vision": (
        "One allocation asked for more than the device could give at that moment: the vision "
        "encoder's temporary memory for a request's images, which grows with their number and "
        "pixels, did not fit beside what was already held."
    ),
    "startup_misfit": (
        "The configuration could not work: the model weights, the KV cache and the runtime "
        "reserve together do not fit the device, or the cache cannot hold one request of the "
        "maximum length."
    ),
    # the same class where NCCL's own buffers failed while the engine started:
    # not the weights and cache, but what the engine's share left outside itself
    "startup_misfit_library": (
        "The engine could not start: NCCL's own buffers (its communicators' and transfers') did "
        "not fit in what the engine's memory share left outside itself."
    ),
    "fragmentation": (
        "At the failure the allocator held a large amount of memory reserved but not in use: "
        "enough in total, but not in one piece for the allocation that failed."
    ),
    "foreign_memory": (
        "Another process on the same GPU took memory that the server had counted on, and the "
        "server ran out."
    ),
    "leak": (
        "Memory grew steadily, also across idle periods, instead of returning to its baseline."
    ),
    "gpu_fault": (
        "The GPU itself failed: the NVIDIA driver reported an Xid error (a fault of the GPU, its "
        "memory, its link or the work running on it), which no memory setting prevents. The Xid's "
        "number says what failed and what to do (NVIDIA's Xid catalogue)."
    ),
    "workspace_overflow": (
        "FlashInfer's attention workspace, a buffer of fixed size the engine set aside at "
        "start-up, was too small for the temporaries of one prefill batch. The device's memory "
        "did not run out: a larger workspace, a smaller prefill chunk or another attention "
        "backend prevents it; a larger memory share or more GPUs would not."
    ),
    "unknown": "The evidence in this trace does not decide the cause.",
    "none": "The trace shows no out-of-memory event and no memory spike worth reporting.",
}

# The culprits' columns, in this order; every other field of a culprit is in the findings
# document and the ledger (a table of fifteen columns does not fit a page).
CULPRIT_ORDER: Final = (
    "rank",
    "request_id",
    "share",
    "bytes",
    "tokens",
    "growth_tokens",  # what the rank follows where a pool filled (its rise, not its level)
    "basis",
    "blocks_basis",
    "preemptions",
    "prompt_tokens",
    "max_tokens",
    "step_bytes",
    "reason",
)
# Columns only some sources can fill (the vLLM plugin states blocks and preemptions per
# request): shown where a row has a value, left out where every row would say "not stated".
ENGINE_STATED: Final = ("blocks_basis", "preemptions", "step_bytes")


def unstated(rows: Sequence[Mapping[str, Any]]) -> tuple[str, ...]:
    """The :data:`ENGINE_STATED` columns no row of ``rows`` has a value for."""
    return tuple(c for c in ENGINE_STATED if all(r.get(c) is None for r in rows))


REMEDY_ORDER: Final = ("action", "basis", "detail")
# The verdict names this many culprits by id; the table below has them all.
NAMED: Final = 3
# Evidence rows shown; the findings document has them all.
EVIDENCE_SHOWN: Final = 8


def incident_label(incident_class: str) -> str:
    return CLASS_LABELS.get(incident_class, incident_class.replace("_", " "))


def culprit_table(culprits: Sequence[Mapping[str, Any]]) -> Table:
    ranked = [{"rank": i + 1, **c} for i, c in enumerate(culprits)]
    note = "" if ranked else "The analysis named no request."
    left_out = unstated(ranked)
    order = tuple(k for k in CULPRIT_ORDER if k not in left_out)
    hidden = sorted({k for c in ranked for k in c} - set(order))
    return table_from_records(ranked, order=order, drop=hidden, note=note)


def remedy_table(remedies: Sequence[Mapping[str, Any]]) -> Table:
    """What would have prevented the incident, the one to apply first first."""
    rows = [{k: r.get(k) for k in REMEDY_ORDER} for r in remedies]
    note = "" if rows else "The analysis computed no remedy for this incident."
    return table_from_records(rows, order=REMEDY_ORDER, note=note)


def incident_remedies(
    findings: Mapping[str, Any], incident: Mapping[str, Any] | None
) -> list[Mapping[str, Any]]:
    """The remedies of ``incident``: the findings' ``remedies`` name their incident by id."""
    if incident is None:
        return []
    ident = incident.get("id")
    return [
        r
        for r in findings.get("remedies") or []
        if isinstance(r, Mapping) and r.get("incident") == ident
    ]


def verdict_lines(
    incident: Mapping[str, Any] | None, remedies: Sequence[Mapping[str, Any]]
) -> tuple[str, ...]:
    """At most four short lines, in the order an on-call engineer asks: what happened and when;
    the culprits by full id (or the cause, for a class whose cause is not a request); why they
    did it, in the analysis' numbers (where culprits are named: the cause line already says it
    otherwise); the fix."""
    if incident is None:
        return (CLASS_LABELS["none"] + ": no out-of-memory event and no memory spike.",)
    cls = str(incident.get("class") or "unknown")
    peak = parse_time(incident.get("peak_ts"))
    what = incident_label(cls) + (f" at {iso_time(peak)}" if peak else "")
    culprits = [c for c in incident.get("culprits") or [] if isinstance(c, Mapping)]
    ids = _named_ids(incident)
    why: tuple[str, ...] = ()
    if ids:
        more = len(culprits) - len(ids)
        who = "Culprits: " + ", ".join(ids) + (f" (and {more} more below)" if more > 0 else "")
        if reason := str(incident.get("reason") or "").strip():
            why = ("Why: " + reason[:1].upper() + reason[1:],)
    elif cls == "unknown":
        who = "Cause: " + _undecided(str(incident.get("reason") or ""))[0]
    else:
        reason = str(incident.get("reason") or "").strip()
        who = "Cause: " + (reason[:1].upper() + reason[1:] if reason else "not a request")
    if remedies:
        first = remedies[0]
        # the basis first: an action may end in a parenthesis of its own
        basis = f" ({first['basis']})" if first.get("basis") else ""
        fix = f"Fix{basis}: {first.get('action')}"
    else:
        fix = "Fix: the analysis computed none for this incident; the evidence is below."
    return (what, who, *why, fix)


# The analysis' reason of an undecided incident: what the failure states, then "no class fits:"
# and each class's check with its reason (oomtrace/analysis/classify.py, untimed_checks.py).
_NO_CLASS = "no class fits: "
_CHECKED = re.compile(r"(?:^|; )(" + "|".join(c for c in CLASS_LABELS if c != "none") + r"): ")
# What would decide a cause the inputs leave open, in the order a person would fetch it.
_DECIDES = (
    "the engine's log from its start to the failure (the phase), or nvidia-smi or metrics of the "
    "incident (other processes, the KV pool) would decide it"
)


def _undecided(reason: str) -> tuple[str, str]:
    """An undecided incident's reason as a person reads it: what the failure states and what
    would decide the cause (the verdict's line); each class and why it was ruled out (the
    paragraph), in the report's words for the classes."""
    own, _, checks = reason.strip().partition(_NO_CLASS)
    own = own.strip().rstrip(";").strip()
    line = (own[:1].upper() + own[1:] + "; " if own else "") + "the lines given do not decide it: "
    parts = _CHECKED.split(checks)[1:]  # class, reason, class, reason, ...
    pairs = zip(parts[::2], parts[1::2], strict=True)
    ruled = "; ".join(f"{CLASS_LABELS[cls]} ({why.strip()})" for cls, why in pairs)
    return line + _DECIDES, (f"Ruled out: {ruled}." if ruled else "")


def _named_ids(incident: Mapping[str, Any]) -> list[str]:
    """The culprits the verdict's lines name by id (where none, they state the cause)."""
    culprits = [c for c in incident.get("culprits") or [] if isinstance(c, Mapping)]
    return [str(c["request_id"]) for c in culprits[:NAMED] if c.get("request_id") is not None]


def build_verdict(
    incident: Mapping[str, Any] | None,
    remedies: Sequence[Mapping[str, Any]] = (),
    names: Mapping[int, str] | None = None,
    engine: str | None = None,
) -> Verdict:
    """The verdict of the primary incident (``None``: the analysis found none) and the
    remedies the analysis computed for it; ``names`` (``pid -> name``) name the processes the
    evidence shows by pid; ``engine`` (the trace's) says how its requests are named where the
    inputs name none."""
    if incident is None:
        return Verdict(
            incident_class="none",
            label=CLASS_LABELS["none"],
            headline=CLASS_LABELS["none"],
            paragraph=CLASS_EXPLANATIONS["none"],
            figures=(),
            culprits=culprit_table([]),
            lines=verdict_lines(None, ()),
            remedies=remedy_table([]),
        )
    cls = str(incident.get("class") or "unknown")
    culprits = list(incident.get("culprits") or [])
    peak_ts = parse_time(incident.get("peak_ts"))
    peak_bytes = incident.get("peak_bytes")
    coverage = incident.get("coverage")
    figures = [
        Figure("class", "class", cls, "text"),
        Figure("start", "rise began", parse_time(incident.get("start")), "time"),
        Figure("peak_ts", "peak", peak_ts, "time"),
        Figure("peak_bytes", "peak memory", peak_bytes, "bytes"),
    ]
    unnamed = _none_named(incident)
    if unnamed:
        # no request to attribute to: a 0 % coverage would read as requests that explain none
        figures.append(Figure("requests", "requests", "none named at the peak", "text"))
    else:
        figures.append(Figure("coverage", "attribution coverage", coverage, "share"))
    if incident.get("time_note") and peak_ts is None:
        # a log that prints no time: say so, beside the n/a of the times
        figures.append(Figure("time_note", "time", str(incident["time_note"]), "text"))
    for key, label in (("explained_bytes", "explained"), ("unexplained_bytes", "unexplained")):
        if incident.get(key) is not None and not unnamed:
            figures.append(Figure(key, label, incident[key], "bytes"))
    # a figure the analysis does not state is left out, not shown as n/a
    figures = [f for f in figures if f.value is not None]
    headline = incident_label(cls) + (f" at {iso_time(peak_ts)}" if peak_ts else "")
    return Verdict(
        incident_class=cls,
        label=incident_label(cls),
        headline=headline,
        paragraph=_paragraph(cls, incident, engine),
        figures=tuple(figures),
        culprits=culprit_table(culprits),
        evidence=tuple(_evidence_lines(incident.get("evidence"), names or {})),
        lines=verdict_lines(incident, remedies),
        remedies=remedy_table(remedies),
    )


def _paragraph(cls: str, incident: Mapping[str, Any], engine: str | None = None) -> str:
    explained = cls
    if cls == "transient_peak" and check_figures(incident).get("kv_usage_ratio") is None:
        explained = "transient_peak_kv_unseen"
    if cls == "transient_peak" and check_figures(incident).get("phase") == "mm_encode":
        explained = "transient_peak_vision"
    if cls == "startup_misfit" and check_figures(incident).get("library") == "nccl":
        explained = "startup_misfit_library"
    parts = [CLASS_EXPLANATIONS.get(explained, CLASS_EXPLANATIONS["unknown"])]
    reason = str(incident.get("reason") or "").strip()
    # the verdict's lines state the reason ("Cause:" or "Why:"): the paragraph does not repeat
    # it on the same screen
    if cls == "unknown":
        parts.append(_undecided(reason)[1])
    peak_ts = parse_time(incident.get("peak_ts"))
    if incident.get("peak_bytes") is not None and peak_ts is not None and cls == "gpu_fault":
        # the fault's moment is the driver's report, not a peak of memory
        parts.append(
            f"Device memory in use when the driver reported it: "
            f"{value_text(incident['peak_bytes'], 'bytes')} ({iso_time(peak_ts)} UTC)."
        )
    elif incident.get("peak_bytes") is not None and peak_ts is not None:
        parts.append(
            f"Memory peaked at {value_text(incident['peak_bytes'], 'bytes')} "
            f"at {iso_time(peak_ts)} (UTC)."
        )
    coverage = incident.get("coverage")
    if _none_named(incident):
        # nothing to attribute: "0.0% explained" would read as requests that failed to explain
        parts.append(
            "The inputs name no request at the peak: no memory is attributed to one. To name "
            f"them next time: {how_to_name_requests(engine)}."
        )
    elif coverage is not None:
        parts.append(
            f"Named requests explain {value_text(coverage, 'share')} of the peak; the rest is "
            "memory no named request accounts for (weights, runtime reserve, or requests the "
            "inputs do not show)."
        )
    parts.append(_over_observed(incident))
    return " ".join(p for p in parts if p)


def _none_named(incident: Mapping[str, Any]) -> bool:
    """Whether the inputs name no request at the peak (nothing explained, no resident shown)."""
    coverage = incident.get("coverage")
    return coverage is not None and not coverage and not incident.get("requests_in_window")


def _over_observed(incident: Mapping[str, Any]) -> str:
    explained, observed = incident.get("explained_bytes"), incident.get("observed_bytes")
    if not isinstance(explained, int | float) or not isinstance(observed, int | float):
        return ""
    if explained <= observed:
        return ""
    return (
        f"The requests counted as resident add up to {value_text(explained, 'bytes')}, more "
        f"than the {value_text(observed, 'bytes')} observed: where the inputs do not state when "
        "each request was scheduled, requests count as resident from the earliest moment the "
        "inputs allow, so queued or preempted ones can count too (an upper bound)."
    )


def _evidence_lines(evidence: Any, names: Mapping[int, str]) -> list[str]:
    """The incident's evidence rows (``table``, ``ts``, ``source``, ``values``), one line each,
    the first :data:`EVIDENCE_SHOWN` of them (a leak's dozens of idle levels would bury the
    chart of them below)."""
    rows = [item for item in evidence or [] if isinstance(item, Mapping)]
    lines = [_evidence_line(item, names) for item in rows[:EVIDENCE_SHOWN]]
    if len(rows) > EVIDENCE_SHOWN:
        lines.append(
            f"and {len(rows) - EVIDENCE_SHOWN} more rows of the same evidence: every one is in "
            "the findings (oomtrace analyze --json)"
        )
    return lines


def _evidence_value(key: str, value: Any, names: Mapping[int, str], in_bytes: bool = False) -> str:
    """``key=value`` as the row holds it; a byte count also reads with its unit, so that
    ``requested_bytes=4982833152 (4.64 GiB)`` can be checked against the row and read at once,
    and a pid with its process's name where a source gave one."""
    in_bytes = in_bytes or key == "bytes" or key.endswith("_bytes")
    if in_bytes and isinstance(value, int | float) and value >= 1024:
        return f"{key}={value} ({value_text(int(value), 'bytes')})"
    if key == "pid" and isinstance(value, int) and names.get(value):
        return f"{key}={value} ({names[value]})"
    return f"{key}={value}"


def _evidence_line(item: Mapping[str, Any], names: Mapping[int, str]) -> str:
    """``2025-03-14T09:03:29.000Z samples from metrics: metric=kv_blocks_used, value=977``."""
    values = item.get("values")
    values = values if isinstance(values, Mapping) else {}
    # a sample's value is in the unit of its metric (process_used_bytes: bytes)
    in_bytes = str(values.get("metric") or "").endswith("_bytes")
    text = ", ".join(
        _evidence_value(k, v, names, in_bytes and k == "value") for k, v in sorted(values.items())
    )
    ts = parse_time(item.get("ts"))
    where = " ".join(
        p
        for p in (
            iso_time(ts) if ts else "",
            str(item.get("table") or ""),
            f"from {item['source']}" if item.get("source") else "",
        )
        if p
    )
    return f"{where}: {text}" if where else str(text)
