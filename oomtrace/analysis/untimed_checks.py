"""The checks of a failure read without a timeline (:mod:`oomtrace.analysis.untimed`): each class
tested on the failure's own figures and the lines around it, in the order of
:mod:`oomtrace.analysis.classify`, the first that matches naming the class."""

from __future__ import annotations

from typing import Any

import polars as pl

from oomtrace.analysis import evidence as ev
from oomtrace.analysis.breakdown import REFUSED_FREE
from oomtrace.analysis.check_allocation import (
    kv_pool_oom,
    library_failure,
    one_allocation,
    pool_not_short,
    stated_fragmentation,
)
from oomtrace.analysis.check_foreign import (
    failing_helper,
    outside_allocator,
    outside_pytorch,
    siblings,
)
from oomtrace.analysis.check_startup import (
    MISFIT_KINDS,
    engine_figures,
    phase_engine,
    phase_reason,
    refusal_figures,
    serving_phase,
    shard_figures,
    stated_start,
)
from oomtrace.analysis.findings import ClassCheck, IncidentClass, ProcessUse
from oomtrace.analysis.options import AnalyzeOptions
from oomtrace.analysis.workspace import overflow
from oomtrace.units import format_bytes


def untimed_checks(
    anchor: dict[str, Any],
    processes: list[ProcessUse],
    retractions: pl.DataFrame,
    options: AnalyzeOptions,
    config: dict[str, Any],
    *,
    served: bool,
) -> tuple[ClassCheck, ...]:
    overflowed = overflow(anchor)
    lead = (overflowed,) if overflowed.matched else ()
    return (
        *lead,
        _foreign(anchor, processes, options),
        _startup(anchor, config, served=served),
        _fragmentation(anchor),
        _kv(anchor, retractions),
        one_allocation(anchor),
    )


def verdict(
    checks: tuple[ClassCheck, ...], anchor: dict[str, Any] | None = None
) -> tuple[IncidentClass, str]:
    # a library's own allocation (NCCL, cuBLAS) says whose memory it was before any class does
    library = library_failure(anchor)
    for check in checks:
        if check.matched:
            return check.cls, check.reason if library is None else f"{library}; {check.reason}"
    # what the failure states comes first (the allocation's size), then why nothing fits
    own = library or next(c.reason for c in checks if c.cls == "transient_peak")
    others = "; ".join(f"{c.cls}: {c.reason}" for c in checks if c.cls != "transient_peak")
    return "unknown", f"{own}; no class fits: {others}"


def _shortfall(event: dict[str, Any]) -> int | None:
    wanted, free = event.get("requested_bytes"), event.get("free_bytes")
    return None if wanted is None or free is None else max(wanted - free, 0)


def _foreign(
    event: dict[str, Any], processes: list[ProcessUse], options: AnalyzeOptions
) -> ClassCheck:
    if event["kind"] in MISFIT_KINDS:
        return ClassCheck(
            "foreign_memory", False, "the engine refused its own settings, not others' memory"
        )
    held = sum(p.bytes for p in processes)
    total, shortfall = event.get("total_bytes"), _shortfall(event)
    floor = max(float(options.min_rise_bytes), 0.1 * (total or 0))
    if not processes and (unnamed := outside_allocator(event)) is not None:
        return unnamed
    # the rest of the device beside the failing process is crumbs: its own use is what filled it
    if held < floor and (inside := outside_pytorch(event)) is not None:
        return inside
    if not processes or held < floor or (shortfall is not None and held < shortfall):
        seen = f"other processes held {format_bytes(held)}" if processes else "no other process"
        return ClassCheck(
            "foreign_memory",
            False,
            f"{seen}: not a significant share of the device, or less than the allocation lacked",
        )
    top = processes[0]
    refused = event["kind"] == REFUSED_FREE
    named = [p for p in processes if p.pid is not None]
    who = (
        ", ".join(f"process {p.pid} {format_bytes(p.bytes)}" for p in named[:4])
        if named
        else ("outside the engine" if refused else "outside the failing process")
    )
    when, failed = ("at start-up", "the start-up") if refused else ("at the OOM", "the allocation")
    reason = f"{when} other processes held {format_bytes(held)} ({who})"
    if shortfall:
        reason += f"; {failed} lacked {format_bytes(shortfall)}, which they held"
    elif shortfall == 0 and (free := event.get("free_bytes")) is not None:
        # as much free as it asked, in pieces it could not use: the device was full of theirs
        # (https://github.com/OpenMOSS/MOSS-TTSD/issues/71: 20 MiB asked, 20.38 MiB free)
        reason += (
            f"; {failed} found only {format_bytes(free)} free: the device was full, most of it "
            "theirs"
        )
    own = siblings(processes)
    if own is not None:
        reason += f"; {own}"
    helper = failing_helper(event, processes) if own is None else None
    if helper is not None:
        # the largest "other" process is the engine's model process (sglang#6082)
        reason, held = f"{when}: {helper[0]}", helper[1]
    figures = (
        *((("holder", "siblings"),) if own is not None else ()),
        *((("holder", "beside_engine"), ("engine_pid", top.pid)) if helper is not None else ()),
        ("pid", top.pid),
        ("process_name", top.name),
        ("foreign_bytes", held),
        ("growth_bytes", None),
        ("shortfall_bytes", shortfall),
        ("left_for_others_bytes", None),
    )
    return ClassCheck("foreign_memory", True, reason, (ev.event(event),), figures)


def _startup(event: dict[str, Any], config: dict[str, Any], *, served: bool) -> ClassCheck:
    if event["kind"] in (*MISFIT_KINDS, "startup_memory_insufficient"):
        detail = str(event.get("detail") or event["kind"])
        return ClassCheck(
            "startup_misfit",
            True,
            f"the engine refused to start: {detail}",
            (ev.event(event),),
            refusal_figures(event, config, event.get("free_bytes"), event.get("total_bytes")),
        )
    figures = (
        ("requested_bytes", event.get("requested_bytes")),
        ("free_bytes", event.get("free_bytes")),
        ("kv_available_bytes", config.get("available_kv_cache_bytes")),
        ("max_model_len", config.get("max_model_len")),
        ("device_total_bytes", event.get("total_bytes")),
    )
    oom = event["kind"] == "oom"
    # the phase the failure's own lines state wins over what else the input shows
    if oom and (stated := phase_reason(event)) is not None:
        phased = (
            *figures,
            ("phase", event.get("phase")),
            ("engine", phase_engine(event)),
            *shard_figures(event),
        )
        return ClassCheck("startup_misfit", True, stated, (ev.event(event),), phased)
    if oom and (serving := serving_phase(event)) is not None:
        return ClassCheck(
            "startup_misfit", False, f"the lines around the OOM place it in {serving}"
        )
    evidence = stated_start(event, config) if oom and not served else None
    if evidence is not None:
        return ClassCheck(
            "startup_misfit",
            True,
            f"the OOM came while the engine was starting ({evidence}; nothing served): what it "
            "loads and reserves did not fit",
            (ev.event(event),),
            (*figures, *engine_figures(event)),
        )
    return ClassCheck(
        "startup_misfit",
        False,
        "phase unknown: the input shows no start-up line, refusal or request served, so the OOM "
        "is judged by its own figures",
    )


def _fragmentation(event: dict[str, Any]) -> ClassCheck:
    stated = stated_fragmentation(event, None)
    return stated or ClassCheck(
        "fragmentation", False, "the failure states no reserved-but-unallocated memory"
    )


def _kv(event: dict[str, Any], retractions: pl.DataFrame) -> ClassCheck:
    # SGLang's KV-pool OOM ("Decode out of memory" raised) is an OOM of the pool, not the device,
    # unless the pool had the tokens it asked for
    pool = kv_pool_oom(event) and pool_not_short(event) is None
    if retractions.height or pool:
        parts = []
        if pool:
            parts.append(f"the engine could not allocate KV cache slots ({event.get('detail')})")
        if retractions.height:
            plural = "" if retractions.height == 1 else "s"
            first = retractions.row(0, named=True).get("detail")
            parts.append(
                f"{retractions.height} preemption{plural} or retraction{plural} of running "
                "requests" + (f" ({first})" if first else "")
            )
        rows = [ev.event(r) for r in retractions.head(3).iter_rows(named=True)]
        return ClassCheck(
            "kv_exhaustion",
            True,
            "the KV pool ran out: " + "; ".join(parts),
            (ev.event(event), *rows) if event["kind"] != "preemption" else tuple(rows),
        )
    return ClassCheck("kv_exhaustion", False, "no KV pool figure and no request retracted")
