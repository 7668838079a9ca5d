"""The foreign-memory check: another process held the memory the engine needed.

The processes are those :func:`oomtrace.analysis.breakdown.foreign_processes` found on the
incident's device: per-process samples (NVML, nvidia-smi's compute apps, the PyTorch OOM
message's "Process N has X memory in use" clauses), else the OOM's own accounting (in use less
the engine's process). Another process is the cause when

* it is significant: at least the rise threshold, or more than the engine's budget left for
  everything else (``(1 - gpu_memory_utilization) x device``);
* it covers the shortfall: without it, the allocation that failed (or the start-up) would have
  fit (its bytes are at least what the allocation lacked);
* it is recent, or the failure is an OOM: it grew in the window, or the incident is an OOM or a
  start-up refusal (memory held all along still took the room the failure needed).

Without per-process figures, memory outside PyTorch's cache that grew while the cache did not
points to another process (or non-PyTorch allocations).
"""

from __future__ import annotations

from typing import Any

from oomtrace.analysis import evidence as ev
from oomtrace.analysis.check_context import Context
from oomtrace.analysis.check_startup import MISFIT_KINDS
from oomtrace.analysis.evidence import Evidence
from oomtrace.analysis.findings import ClassCheck, ProcessUse
from oomtrace.units import format_bytes


def foreign(ctx: Context) -> ClassCheck:
    event = ctx.event or {}
    if ctx.anchor == "startup" and event.get("kind") in MISFIT_KINDS:
        return ClassCheck(
            "foreign_memory", False, "the engine refused its own settings, not others' memory"
        )
    sampled = [p for p in ctx.processes if p.basis == "samples"]
    stated = [p for p in ctx.processes if p.basis == "oom_event"]
    found = _judge(ctx, sampled or stated)
    if found is not None:
        return found
    outside = _outside_growth(ctx)
    if outside is not None:
        return ClassCheck("foreign_memory", True, outside[0], tuple(outside[1]))
    return ClassCheck(
        "foreign_memory",
        False,
        "no other process held a significant share, and memory outside PyTorch did not grow",
    )


def _judge(ctx: Context, processes: list[ProcessUse]) -> ClassCheck | None:
    if not processes:
        return None
    held = sum(p.bytes for p in processes)
    grew = sum(p.growth_bytes or 0 for p in processes)
    left, shortfall = ctx.left_for_others, ctx.shortfall
    stated = processes[0].basis == "oom_event"
    floor = max(ctx.threshold, 0.1 * (ctx.capacity or 0)) if stated else ctx.threshold
    significant = held >= floor or (left is not None and held > left)
    recent = grew >= ctx.options.min_rise_bytes or ctx.anchor in ("oom", "startup")
    covers = shortfall is None or held >= shortfall
    if not (significant and recent and covers):
        return None
    top = max(processes, key=lambda p: p.bytes)
    reasons = [_who_held(top, stated, ctx.anchor)]
    if shortfall is not None:
        reasons.append(
            f"{_what_failed(ctx.anchor)} lacked {format_bytes(shortfall)}, less than the "
            f"{format_bytes(held)} other processes held"
        )
    if left is not None and held > left:
        reasons.append(
            f"more than the {format_bytes(left)} the engine's gpu_memory_utilization left "
            "for everything else"
        )
    rows = _evidence(ctx, processes, stated)
    figures: tuple[tuple[str, Any], ...] = (
        ("pid", top.pid),
        ("process_name", top.name),
        ("foreign_bytes", held),
        ("growth_bytes", grew),
        ("shortfall_bytes", shortfall),
        ("left_for_others_bytes", left),
    )
    return ClassCheck("foreign_memory", True, "; ".join(reasons), tuple(rows), figures)


def _what_failed(anchor: str) -> str:
    return "the engine's start-up" if anchor == "startup" else "the failed allocation"


def _who_held(top: ProcessUse, stated: bool, anchor: str) -> str:
    if stated:
        when = "at start-up" if anchor == "startup" else "at the OOM"
        return (
            f"{when}, {format_bytes(top.bytes)} of device memory was held outside the "
            "engine's process"
        )
    who = f"process {top.pid}" + (f" ({top.name})" if top.name else "")
    text = f"{who} (not the engine) held {format_bytes(top.bytes)} at the peak"
    if top.growth_bytes:
        text += f", {format_bytes(top.growth_bytes)} more than at the window start"
    return text


def _evidence(ctx: Context, processes: list[ProcessUse], stated: bool) -> list[Evidence]:
    rows: list[Evidence] = []
    if not stated:
        for p in processes:
            series = ctx.memory.find("process_used_bytes", ctx.node, ctx.device, pid=p.pid)
            if series is None:  # a series without a device (a GPU named by its UUID alone)
                series = ctx.memory.find("process_used_bytes", ctx.node, pid=p.pid)
            row = ctx.memory.at(series, ctx.peak_ts, ctx.window)
            if row is not None:
                rows.append(ev.sample(row))
    if ctx.event is not None:
        rows.append(ev.event(ctx.event))
    return rows


def _outside_growth(ctx: Context) -> tuple[str, list[Evidence]] | None:
    device = ctx.memory.find("device_used_bytes", ctx.node, ctx.device)
    reserved = ctx.memory.find("torch_reserved_bytes", ctx.node, ctx.device)
    if device is None or reserved is None:
        return None
    ends = []
    for ts in (ctx.window_start, ctx.peak_ts):
        d, r = ctx.memory.at(device, ts, ctx.window), ctx.memory.at(reserved, ts, ctx.window)
        if d is None or r is None:
            return None
        ends.append((d, r))
    (d0, r0), (d1, r1) = ends
    outside = (d1["value"] - r1["value"]) - (d0["value"] - r0["value"])
    cache = r1["value"] - r0["value"]
    if outside >= ctx.threshold and cache < ctx.options.min_rise_bytes:
        text = (
            f"memory outside PyTorch's cache grew by {format_bytes(round(outside))} in the window "
            f"while the cache grew {format_bytes(round(cache))}: another process or non-PyTorch "
            "allocations"
        )
        return text, [ev.sample(x) for x in (d0, r0, d1, r1)]
    return None
