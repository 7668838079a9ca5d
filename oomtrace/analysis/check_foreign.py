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
points to another process (or non-PyTorch allocations). An OOM message that names no process
(PyTorch before 2.1, or a build without NVML such as ROCm's) still states the device's size, what
was free and what PyTorch held: the rest was held outside the failing process's PyTorch allocator,
and where that is far more than one process's own CUDA context and libraries
(:func:`outside_allocator`), a reader blames another process first.
"""

from __future__ import annotations

from typing import Any, Final

from oomtrace.analysis import evidence as ev
from oomtrace.analysis.check_allocation import held_outside
from oomtrace.analysis.check_context import Context
from oomtrace.analysis.check_startup import MISFIT_KINDS
from oomtrace.analysis.evidence import Evidence
from oomtrace.analysis.findings import ClassCheck, ProcessUse
from oomtrace.schema import STARTUP_PHASES
from oomtrace.units import format_bytes

# What one process holds on its device outside PyTorch's allocator with nobody else there: its
# CUDA context, about 300-500 MiB with CUDA's lazy module loading (11.7 and later) and up to about
# 1 GiB before it (every kernel of the build loaded at start), plus the cuDNN/cuBLAS handles'
# and NCCL's buffers (tens to a few hundred MiB). 2 GiB is above all of that together, so more
# held outside is not the process's own overhead; and, like the other processes an OOM message
# states (``_judge``), it must be a tenth of the device to be a share worth blaming.
UNNAMED_FLOOR: Final = 2 * 2**30
UNNAMED_SHARE: Final = 0.1


# Processes an OOM message lists beside the failing one that are the engine's own workers: two
# or more, their ids consecutive (spawned together: no more than two ids apart on average) and
# their memory alike (within 5 %) and no more than one process's own overhead (UNNAMED_FLOOR):
# each tensor-parallel worker's CUDA context on this GPU
# (https://github.com/vllm-project/vllm/issues/8731: three 1.62 GiB "processes" 3179875-3179877
# on GPU 0 of a TP-4 engine). Moving them off is no remedy; leaving them room is.
_SIBLING_IDS: Final = 2
_SIBLING_SPREAD: Final = 0.05


def siblings(processes: list[ProcessUse]) -> str | None:
    """The words for other processes that look like the engine's own workers, else None."""
    pids = [p.pid for p in processes if p.pid is not None]
    sizes = [p.bytes for p in processes]
    if len(pids) < 2 or len(pids) != len(processes):
        return None
    consecutive = max(pids) - min(pids) <= _SIBLING_IDS * len(pids)
    alike = min(sizes) >= (1 - _SIBLING_SPREAD) * max(sizes)
    # no more than one process's own context and libraries: more is weights, another model's
    # replicas (launched together, alike) rather than this engine's workers' contexts
    if not (consecutive and alike) or max(sizes) > UNNAMED_FLOOR:
        return None
    return (
        f"the {len(pids)} processes ({min(pids)}-{max(pids)}) holding "
        f"{format_bytes(max(sizes))} each have consecutive ids and the same footprint: most "
        "likely the engine's own workers (tensor-parallel ranks with a CUDA context on this "
        "GPU), not another tenant"
    )


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
    if not ctx.processes and ctx.anchor == "oom" and ctx.oom is not None:
        unnamed = outside_allocator(ctx.oom)
        if unnamed is not None:
            return unnamed
    others = sum(p.bytes for p in ctx.processes)
    if others < ctx.threshold and ctx.anchor == "oom" and ctx.oom is not None:
        # the rest of the device beside the failing process is crumbs: its own use filled it
        own = outside_pytorch(ctx.oom)
        if own is not None:
            return own
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
    # an OOM whose message states as much free as it asked lacked no bytes (the free memory was
    # in pieces the allocation could not use): the others' memory is not what it lacked
    # (https://github.com/vllm-project/vllm/issues/12529: 1.16 GiB asked, 1.17 GiB free)
    lacked = not (ctx.anchor == "oom" and shortfall == 0)
    covers = lacked and (shortfall is None or held >= shortfall)
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
    own = siblings(processes)
    if own is not None:
        reasons.append(own)
    oom = ctx.oom if ctx.anchor == "oom" else None
    helper = failing_helper(oom, processes) if stated and own is None and oom else None
    if helper is not None:
        # the largest "other" process is the engine's model process; the failing one is small
        reasons = [helper[0]]
        held = helper[1]
    rows = _evidence(ctx, processes, stated)
    figures: tuple[tuple[str, Any], ...] = (
        *((("holder", "siblings"),) if own is not None else ()),
        *((("holder", "beside_engine"), ("engine_pid", top.pid)) if helper is not None else ()),
        ("pid", top.pid),
        ("process_name", top.name),
        ("foreign_bytes", held),
        ("growth_bytes", grew),
        ("shortfall_bytes", shortfall),
        ("left_for_others_bytes", left),
    )
    return ClassCheck("foreign_memory", True, "; ".join(reasons), tuple(rows), figures)


def failing_helper(oom: dict[str, Any], processes: list[ProcessUse]) -> tuple[str, int] | None:
    """Where the OOM message lists every process by id, its own too (a container's pid
    namespace: no "this process has" clause), and the failing process's own PyTorch memory is far
    below the largest listed, the failing process is one of the small ones and the largest is
    most likely the engine's model process (https://github.com/sgl-project/sglang/issues/6082:
    1.44 GiB of PyTorch memory in the failing process, four processes of 1.81-1.91 GiB and one of
    16.12 GiB, the TP0 scheduler, on GPU 0). What the model process had not counted on is then
    the small processes beside it: the words, and their bytes."""
    if not processes or oom.get("process_bytes") is not None:
        return None
    allocated = oom.get("allocated_bytes")
    if allocated is None:
        return None
    mine = int(allocated) + int(oom.get("reserved_unallocated_bytes") or 0)
    top = max(processes, key=lambda p: p.bytes)
    # the failing process's footprint: its PyTorch memory plus no more than a context's overhead
    like_mine = [p for p in processes if mine <= p.bytes <= mine + UNNAMED_FLOOR and p is not top]
    if not like_mine or top.bytes <= mine + UNNAMED_FLOOR:
        return None
    small = [p for p in processes if p is not top]
    held = sum(p.bytes for p in small)
    ids = ", ".join(str(p.pid) for p in small if p.pid is not None)
    least, most = min(p.bytes for p in small), max(p.bytes for p in small)
    sizes = f"{format_bytes(least)} to {format_bytes(most)}"
    words = (
        f"the failing process held only {format_bytes(mine)} of PyTorch memory, so it is one of "
        f"the {len(small)} small processes on the device ({ids}; {sizes} each), not process "
        f"{top.pid} ({format_bytes(top.bytes)}), which is most likely the engine's model "
        f"process; the {format_bytes(held)} the small ones held together is what the model's "
        "share had not counted on: processes of the server's own beside its model (such as one "
        "preprocessing images on the GPU) or other jobs"
    )
    return words, held


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


# PyTorch's share of a process's use under which the process's memory is not PyTorch's: almost
# none (a TensorRT-LLM process whose PyTorch held a few GiB is read as a transient beside its pool)
_TORCH_SHARE = 0.01


def outside_allocator(event: dict[str, Any]) -> ClassCheck | None:
    """``foreign_memory`` from an OOM message that names no process but states the device's
    size, what was free and what PyTorch held (allocated and reserved): the rest, held outside
    the failing process's PyTorch allocator, is well above one process's own overhead
    (:data:`UNNAMED_FLOOR`, a tenth of the device) and the allocation would have fit had it been
    free. Who held it the message does not say: another process, or libraries of the same
    process that allocate outside PyTorch. None where the rule does not hold (the caller keeps
    its other reading)."""
    outside, wanted = held_outside(event), event.get("requested_bytes")
    # without what PyTorch reserved (a message stating only what it allocated, as the "would
    # exceed allowed memory" one), the rest may be PyTorch's own cache: nothing is known outside
    stated = event.get("reserved_unallocated_bytes") is not None
    if event.get("kind") != "oom" or outside is None or wanted is None or not stated:
        return None
    total, free = int(event["total_bytes"]), int(event["free_bytes"])  # held_outside read them
    if event.get("phase") in STARTUP_PHASES:
        # an engine starting allocates outside PyTorch itself (NCCL and all-reduce buffers, the
        # graph capture's driver memory): there the rest is no sign of another process
        return None
    if outside < max(UNNAMED_FLOOR, UNNAMED_SHARE * total) or wanted > free + outside:
        return None
    # free memory can exceed what failed (split in pieces the allocator cannot use): no shortfall
    shortfall = wanted - free if wanted > free else None
    reason = (
        f"{format_bytes(outside)} of the {format_bytes(total)} device was held outside this "
        "process's PyTorch allocator: another process, or libraries in this process that "
        "allocate outside PyTorch; the message names no process. Had it been free, the "
        f"{format_bytes(wanted)} that failed ({format_bytes(free)} free) would have fit"
    )
    figures: tuple[tuple[str, Any], ...] = (
        ("pid", None),
        ("process_name", None),
        ("foreign_bytes", outside),
        ("growth_bytes", None),
        ("shortfall_bytes", shortfall),
        ("left_for_others_bytes", None),
        ("holder", "unnamed"),
    )
    return ClassCheck("foreign_memory", True, reason, (ev.event(event),), figures)


def outside_pytorch(event: dict[str, Any]) -> ClassCheck | None:
    """``foreign_memory`` from an OOM message whose failing process held the device but PyTorch
    held almost none of it (allocated and reserved under a hundredth of the process's use, the use a
    tenth of the device or more): the process's own allocations outside PyTorch's allocator (a
    runtime's engine and KV cache, as TensorRT-LLM's, NCCL's buffers, CUDA graphs' pools) filled
    the device, and the allocation that failed was only the last straw (TensorRT-LLM#2398: 0 bytes
    allocated by PyTorch of the process's 22.18 GiB). None where the rule does not hold."""
    keys = ("process_bytes", "requested_bytes", "allocated_bytes", "reserved_unallocated_bytes")
    stated = {k: event.get(k) for k in (*keys, "total_bytes")}
    if event.get("kind") != "oom" or any(v is None for v in stated.values()):
        return None
    n = {k: int(v) for k, v in stated.items() if v is not None}
    used, wanted, total = n["process_bytes"], n["requested_bytes"], n["total_bytes"]
    torch = n["allocated_bytes"] + n["reserved_unallocated_bytes"]
    if used < UNNAMED_SHARE * total or torch >= _TORCH_SHARE * used:
        return None
    outside = used - torch
    pid = event.get("pid")
    who = f"process {pid}" if pid is not None else "the failing process"
    reason = (
        f"{format_bytes(outside)} of the {format_bytes(used)} {who} held on the "
        f"{format_bytes(total)} device was outside PyTorch's allocator (PyTorch held "
        f"{format_bytes(torch)}): the process's own allocations outside PyTorch (a runtime's "
        "engine and KV cache, NCCL, CUDA graphs) filled the device, and the "
        f"{format_bytes(wanted)} that failed was only the last straw"
    )
    figures: tuple[tuple[str, Any], ...] = (
        ("pid", pid),
        ("process_name", None),
        ("foreign_bytes", outside),
        ("growth_bytes", None),
        ("shortfall_bytes", None),
        ("left_for_others_bytes", None),
        ("holder", "outside_pytorch"),
    )
    return ClassCheck("foreign_memory", True, reason, (ev.event(event),), figures)
