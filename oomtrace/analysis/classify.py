"""Classification of an incident: every class is tested and keeps its reason, evidence rows and
the figures it computed.

Checks run in this order and the first that matches names the class; the others stay in the
findings so a reader sees what else was considered and why it was ruled out:

0. ``workspace_overflow`` — the failure is FlashInfer's attention workspace, a fixed buffer,
   too small for a prefill batch (:mod:`oomtrace.analysis.workspace`): no memory class applies
   (the check stands among the others only where it matched);
1. ``foreign_memory`` — another process held the memory the failure lacked and more than the
   engine left for others, or took it in the window (:mod:`oomtrace.analysis.check_foreign`);
   memory outside PyTorch's cache grew while the cache did not; an OOM message naming no
   process left far more outside PyTorch's allocator than one process's own context;
2. ``startup_misfit`` — the engine said at startup that the cache cannot hold one request or that
   nothing is left for it, or the lines around the OOM place it in the start-up (its ``phase``),
   or the OOM came before the engine served anything since it started (in any source), or
   weights + KV cache + CUDA graphs stated at startup exceed what the engine was allowed to use
   (:mod:`oomtrace.analysis.check_startup`);
3. ``fragmentation`` — at the OOM the allocator held, reserved but unallocated, at least the
   allocation that failed;
4. ``kv_exhaustion`` — the KV pool was full (observed usage at or above the full ratio, or the
   modelled KV at the pool size), or requests were preempted in the window (a preemption storm);
   not where the engine's own KV-pool OOM counted the tokens it asked as available;
5. ``leak`` — the memory level at idle moments rose steadily before the peak by a good part of
   the headroom the engine had left (:mod:`oomtrace.analysis.check_leak`);
6. ``transient_peak`` — an allocation failed or a series peaked and fell back while the pool had
   room, with the requests of that step ranked by the memory their step needs
   (:mod:`oomtrace.analysis.step_bytes`);
7. ``unknown`` — with the reasons every check gave.

An incident anchored on the driver's Xid report is a ``gpu_fault`` and no other check runs on it
(:mod:`oomtrace.analysis.check_gpu_fault`): a fault of the GPU is no lack of memory. An Xid report
within the window of an incident anchored on something else is named in its reason and cited as a
``gpu_fault`` check that does not decide the class (:func:`_fault_beside`).

One exception to "the first that matches": where the allocator held the failed allocation's size
reserved but unallocated (``fragmentation``) and one request's prefill chunk dominates the failed
step (:func:`dominant_prefill`), the class is ``transient_peak`` naming that request, with the
fragmentation said beside it: the prompt is what a person sees grow.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any, cast

import polars as pl

from oomtrace.analysis import evidence as ev
from oomtrace.analysis.check_allocation import (
    library_failure,
    one_allocation,
    pool_not_short,
    stated_fragmentation,
)
from oomtrace.analysis.check_context import Context
from oomtrace.analysis.check_foreign import foreign
from oomtrace.analysis.check_gpu_fault import gpu_fault, severity, what_failed, xid_number
from oomtrace.analysis.check_leak import leak
from oomtrace.analysis.check_startup import startup
from oomtrace.analysis.evidence import Evidence
from oomtrace.analysis.findings import ClassCheck, IncidentClass
from oomtrace.analysis.spikes import POOL_METRICS
from oomtrace.analysis.step_bytes import StepEstimate
from oomtrace.analysis.timeline import lit_ts
from oomtrace.analysis.workspace import workspace
from oomtrace.units import format_bytes

__all__ = ["CHECKS", "Context", "classify"]

STORM = 10  # preemptions in one window that make a storm rather than an episode
# One request's prefill dominates the failing step when its chunk is at least this share of the
# step's tokens and at least this many tokens: its activations, not the allocator's cache, are
# what a person sees grow (wtdcode/vllm-backport#94: one 245k-token prompt's 640 MiB activation).
DOMINANT_SHARE = 0.5
DOMINANT_TOKENS = 4096


def classify(ctx: Context) -> tuple[IncidentClass, str, tuple[ClassCheck, ...]]:
    """The class, its reason, and every check in order; the driver's Xid report in the window
    of a failure anchored on something else is named beside its class (:func:`_fault_beside`)."""
    cls, reason, checks = _classify(ctx)
    if ctx.anchor == "xid" or (fault := _fault_beside(ctx)) is None:
        return cls, reason, checks
    said = fault.reason
    own, sep, rest = reason.partition(NO_CLASS)
    # an undecided reason keeps its checks last (the report reads them after "no class fits")
    reason = f"{own}{said}; {sep}{rest}" if sep else f"{reason}; {said}"
    return cls, reason, (*checks, fault)


NO_CLASS = "no class fits: "


def _fault_beside(ctx: Context) -> ClassCheck | None:
    """The gravest Xid report of the driver on the incident's node within its window (a window
    before the failure to a window after it): a GPU fault beside the lack of memory, named in
    the reason and cited as a ``gpu_fault`` check that does not decide the class."""
    near = pl.col("ts").is_between(
        lit_ts(ctx.window_start - ctx.window), lit_ts(ctx.peak_ts + ctx.window)
    )
    rows = ctx.events.filter((pl.col("kind") == "xid") & (pl.col("node") == ctx.node) & near)
    if rows.is_empty():
        return None
    event = max(rows.iter_rows(named=True), key=severity)  # a handful of reports at most
    number, bus = xid_number(event.get("detail"))
    what, _ = what_failed(number)
    label = f"Xid {number}" if number is not None else "an Xid"
    where = f" on the GPU at {bus}" if bus else ""
    gap = (event["ts"] - ctx.peak_ts).total_seconds()
    when = f"{gap:.0f} s after the failure" if gap >= 0 else f"{-gap:.0f} s before the failure"
    return ClassCheck(
        "gpu_fault",
        False,
        f"the driver also reported {label}{where} {when}: {what}; a fault of the GPU beside "
        "the lack of memory, with its own action among the fixes",
        (ev.event(event),),
        (("xid", number), ("pci_bus", bus), ("xid_offset_s", round(gap, 3))),
    )


def _classify(ctx: Context) -> tuple[IncidentClass, str, tuple[ClassCheck, ...]]:
    if ctx.anchor == "xid":
        # the driver's fault report: no memory class is tested against it (none would explain it)
        fault = gpu_fault(ctx)
        return fault.cls, fault.reason, (fault,)
    # FlashInfer's workspace overflowing is no memory failure: it is tested first, and only
    # where it is the failure stands among the checks (the others stay, for what they say)
    overflowed = workspace(ctx)
    lead = (overflowed,) if overflowed.matched else ()
    checks = lead + tuple(check(ctx) for check in CHECKS)
    # a library's own allocation (NCCL, cuBLAS) says whose memory it was before any class does
    library = library_failure(ctx.oom) if ctx.anchor == "oom" else None
    # one huge prompt's prefill is the cause a person sees, even where the allocator's cache
    # held the allocation's size reserved: the fragmentation is named beside it, and its fix
    first = next((c for c in checks if c.matched), None)
    transient = next((c for c in checks if c.cls == "transient_peak"), None)
    if (
        first is not None
        and first.cls == "fragmentation"
        and transient is not None
        and transient.matched
        and dominant_prefill(ctx) is not None
    ):
        moved = _beside_fragmentation(transient, first)
        checks = tuple(moved if c is transient else c for c in checks)
        return moved.cls, _lead(library, moved.reason), checks
    if first is not None:
        return first.cls, _lead(library, first.reason), checks
    room = _pool_room(ctx)
    # what the engine itself said at the failure comes first, once
    others = [c for c in checks if room is None or c.cls != "kv_exhaustion"]
    reason = NO_CLASS + "; ".join(f"{c.cls}: {c.reason}" for c in others)
    return "unknown", _lead(library, reason if room is None else f"{room}; {reason}"), checks


def dominant_prefill(ctx: Context) -> StepEstimate | None:
    """The request whose prefill chunk dominates the failing step (:data:`DOMINANT_SHARE` of its
    tokens, :data:`DOMINANT_TOKENS` at least), or None."""
    if ctx.anchor != "oom" or not ctx.steps:
        return None
    top = ctx.steps[0]
    total = sum(e.step_tokens for e in ctx.steps)
    if not top.in_prefill or top.parameter is not None or total <= 0:
        return None
    if top.step_tokens < DOMINANT_TOKENS or top.step_tokens < DOMINANT_SHARE * total:
        return None
    return top


def _beside_fragmentation(transient: ClassCheck, fragmented: ClassCheck) -> ClassCheck:
    """The transient peak of one prompt's prefill, with the allocator's reserved-but-unallocated
    memory said beside it (and its figure kept: the allocator's setting is its second fix)."""
    slack = fragmented.figure("slack_bytes")
    said = (
        f"; the allocator also held {format_bytes(slack)} reserved but unallocated "
        "(expandable segments may return it), but what grew was the prompt's step"
        if isinstance(slack, int)
        else ""
    )
    return replace(
        transient,
        reason=transient.reason + said,
        evidence=transient.evidence + fragmented.evidence[:1],
        figures=(*transient.figures, ("slack_bytes", slack)),
    )


def _lead(first: str | None, reason: str) -> str:
    return reason if first is None else f"{first}; {reason}"


def _pool_room(ctx: Context) -> str | None:
    page = ctx.config.get("block_size")
    return pool_not_short(ctx.oom or {}, page if isinstance(page, int) else None)


def _fragmentation(ctx: Context) -> ClassCheck:
    if ctx.oom is not None and (stated := stated_fragmentation(ctx.oom, ctx.capacity)):
        return stated
    reserved = ctx.memory.at(
        ctx.memory.find("torch_reserved_bytes", ctx.node, ctx.device), ctx.peak_ts, ctx.window
    )
    allocated = ctx.memory.at(
        ctx.memory.find("torch_allocated_bytes", ctx.node, ctx.device), ctx.peak_ts, ctx.window
    )
    if ctx.anchor == "oom" and reserved is not None and allocated is not None:
        slack = reserved["value"] - allocated["value"]
        if slack >= max(ctx.threshold, 0.1 * reserved["value"]):
            return ClassCheck(
                "fragmentation",
                True,
                f"{format_bytes(round(slack))} reserved but unallocated just before the OOM",
                (ev.sample(reserved), ev.sample(allocated)),
                (("slack_bytes", round(slack)),),
            )
    return ClassCheck("fragmentation", False, "no large reserved-but-unallocated memory at an OOM")


def _filled(ctx: Context) -> bool:
    """Whether the incident is a pool that filled (its moment is the fill, what followed is
    its consequence: preemptions are counted for a window after it too)."""
    return ctx.anchor == "spike" and ctx.spike is not None and ctx.spike.metric in POOL_METRICS


def _preemptions(ctx: Context) -> tuple[int, list[Evidence], list[str]]:
    """How many preemptions the window holds (the most any source counts), their evidence, and
    the ids of the requests preempted (those a source names)."""
    rows: list[Evidence] = []
    count = 0
    stop = ctx.peak_ts + (ctx.window if _filled(ctx) else timedelta(seconds=1))
    counter = ctx.engine.find("preemptions_total", ctx.node)
    if counter is not None:
        window = ctx.engine.between(counter, ctx.window_start, stop)
        if window.height >= 2:
            values = window["value"]
            count += round(cast("float", values.max()) - cast("float", values.min()))
            rows.append(ev.sample(window.row(window.height - 1, named=True)))
    interval = ctx.engine.find("preemptions_in_interval", ctx.node)
    if interval is not None:
        window = ctx.engine.between(interval, ctx.window_start, stop).filter(pl.col("value") > 0)
        count = max(count, int(window["value"].sum()))
        rows += [ev.sample(r) for r in window.head(3).iter_rows(named=True)]
    in_window = (pl.col("ts") >= lit_ts(ctx.window_start)) & (pl.col("ts") <= lit_ts(stop))
    events = ctx.events.filter((pl.col("kind") == "preemption") & in_window)
    preempted = _rows(ctx.requests.filter((pl.col("event") == "preempted") & in_window))
    count = max(count, events.height, preempted.height)
    rows += [ev.event(r) for r in events.head(3).iter_rows(named=True)]
    rows += [ev.request(r) for r in preempted.head(3).iter_rows(named=True)]
    ids = list(dict.fromkeys(str(i) for i in preempted["request_id"].to_list() if i is not None))
    return count, rows, ids


def _kv_full(ctx: Context) -> tuple[float | None, dict[str, Any] | None]:
    """The fullest the pool was seen in the window: on the series that filled, up to the fill,
    for a pool that filled; else on the best-sampled KV series, up to a second after the peak (a
    log's whole-second stamps)."""
    filled = _filled(ctx) and ctx.spike is not None and ctx.spike.metric == "kv_used"
    series = ctx.spike.series if filled and ctx.spike else ctx.kv_index.find("kv_used", ctx.node)
    stop = ctx.peak_ts if filled else ctx.peak_ts + timedelta(seconds=1)
    row = ctx.kv_index.max_between(series, ctx.window_start, stop)
    if row is None or row.get("ratio") is None:
        return None, row
    return float(row["ratio"]), row


def _kv_exhaustion(ctx: Context) -> ClassCheck:
    if ctx.oom is not None and (room := _pool_room(ctx)):
        # the engine's own count at the failure: the pool had what the step asked for
        return ClassCheck("kv_exhaustion", False, room, (ev.event(ctx.oom),))
    ratio, row = _kv_full(ctx)
    preemptions, rows, preempted = _preemptions(ctx)
    parts: list[str] = []
    if ratio is not None and ratio >= ctx.options.kv_full_ratio and row is not None:
        parts.append(f"the KV pool was {ratio:.1%} full at {row['ts']:%H:%M:%S}")
        rows.insert(0, ev.sample(row))
    elif ratio is None and ctx.modelled_kv_bytes and ctx.kv.pool_bytes:
        modelled = ctx.modelled_kv_bytes / ctx.kv.pool_bytes
        if modelled >= ctx.options.kv_full_ratio:
            parts.append(f"the modelled KV reached {modelled:.1%} of the pool (no observation)")
    if preemptions:
        storm = "a preemption storm: " if preemptions >= STORM else ""
        plural = "" if preemptions == 1 else "s"
        when = "from the rise to a window after it filled" if _filled(ctx) else "in the window"
        if ctx.anchor == "preemption":
            named = ", ".join(preempted[:3]) + (" and more" if len(preempted) > 3 else "")
            when = (
                f"({named})" if named else "(preemptions or retractions)"
            ) + ": the engine ran out of KV cache and took running requests back"
            if ratio is not None and ratio < ctx.options.kv_full_ratio and row is not None:
                # the stats lines come every few seconds: the pool filled between two of them
                when += (
                    f"; its last stats before that saw the pool {ratio:.1%} full at "
                    f"{row['ts']:%H:%M:%S}: it filled between two of them"
                )
                rows.insert(0, ev.sample(row))
        parts.append(f"{storm}{preemptions} preemption{plural} {when}")
    if parts:
        return ClassCheck("kv_exhaustion", True, "; ".join(parts), tuple(rows))
    seen = (
        f"the KV pool peaked at {ratio:.1%} in the window"
        if ratio is not None
        else ("no KV pool observation")
    )
    evidence = (ev.sample(row),) if row is not None else ()
    return ClassCheck("kv_exhaustion", False, f"{seen} and no request was preempted", evidence)


def _transient(ctx: Context) -> ClassCheck:
    ratio, row = _kv_full(ctx)
    rows: list[Evidence] = [ev.sample(row)] if row is not None else []
    room = ratio is not None and ratio < ctx.options.kv_full_ratio
    prefill = ctx.residents.filter(pl.col("in_prefill").fill_null(value=False))
    transient = ctx.anchor == "oom" or _fell_back(ctx)
    if not transient:
        return ClassCheck("transient_peak", False, "the peak did not fall back within the window")
    if not room and prefill.is_empty():
        if (
            ctx.anchor == "oom"
            and ctx.oom is not None
            and ratio is None
            and ctx.residents.is_empty()
        ):
            # nothing places the OOM in a step (no KV figure, no request): its own figures
            alone = one_allocation(ctx.oom)
            if alone.matched:
                return alone
        return ClassCheck(
            "transient_peak",
            False,
            "neither a KV observation showing room nor a request in prefill at the peak",
            tuple(rows),
        )
    parts = []
    wanted = (ctx.oom or {}).get("requested_bytes")
    if (one := dominant_prefill(ctx)) is not None:
        # one prompt's prefill is the step: the story starts with it
        parts.append(_prefill_words(ctx, one))
        if ctx.oom is not None:
            rows.insert(0, ev.event(ctx.oom))
    elif ctx.oom is not None and wanted:
        parts.append(f"an allocation of {format_bytes(wanted)} failed")
        rows.insert(0, ev.event(ctx.oom))
    elif ctx.spike is not None:
        parts.append(f"{ctx.spike.metric} peaked and fell back")
    if room and ratio is not None:
        parts.append(f"while the KV pool was {ratio:.1%} full")
    if ctx.steps and one is None:
        parts.append(_step_words(ctx))
    elif prefill.height:
        longest = cast("int | None", prefill["prompt_tokens"].max())
        parts.append(
            f"{prefill.height} request(s) in prefill"
            + (f", the longest with {longest:,} prompt tokens" if longest is not None else "")
        )
    named = [e.request_id for e in ctx.steps[:3]] or prefill["request_id"].head(3).to_list()
    if named:
        admitted = _rows(
            ctx.requests.filter(
                pl.col("request_id").is_in(pl.Series(named, dtype=pl.String).implode())
                & pl.col("event").is_in(["arrived", "admitted"])
            )
        )
        rows += [ev.request(r) for r in admitted.iter_rows(named=True)]
    # the KV pool's share in use where it was observed: what lets a reader say the cache still
    # had room (the report's explanation says so only then)
    seen: tuple[tuple[str, Any], ...] = (
        (("kv_usage_ratio", ratio),) if room and ratio is not None else ()
    )
    if one is not None:
        seen += (("prefill_request", one.request_id),)
    return ClassCheck(
        "transient_peak", True, ", ".join(parts), tuple(rows), _step_figures(ctx, wanted) + seen
    )


def _prefill_words(ctx: Context, one: StepEstimate) -> str:
    """One request's prefill as the cause: its chunk, its share of the step, what failed."""
    total = sum(e.step_tokens for e in ctx.steps)
    text = f"one request's prefill: {one.request_id}'s {one.step_tokens:,}-token prompt chunk"
    if total > one.step_tokens:
        share = one.step_tokens / total
        text += f" was {share:.0%} of the {total:,} tokens of the step that failed"
    else:
        text += " was the whole step that failed"
    if one.bytes is not None:
        text += f" (about {format_bytes(one.bytes)} of activations estimated)"
    oom = ctx.oom or {}
    if wanted := oom.get("requested_bytes"):
        free = oom.get("free_bytes")
        room = f" with {format_bytes(free)} free" if free is not None else ""
        text += f"; its allocation of {format_bytes(wanted)} failed{room}"
    return text


def _step_words(ctx: Context) -> str:
    """The heaviest request of the step and what the step's requests need together."""
    top = ctx.steps[0]
    what = {
        "prompt_logprobs": f"prompt_logprobs over its {top.step_tokens:,}-token chunk",
        "n": f"{top.logit_rows} parallel sequences (n)",
        "best_of": f"{top.logit_rows} sequences (best_of)",
        "logprobs": "logprobs",
    }.get(top.parameter or "", f"{top.step_tokens:,} tokens in the step")
    text = f"the heaviest request in the step, {top.request_id}, with {what}"
    if top.bytes is not None:
        total = sum(e.bytes or 0 for e in ctx.steps)
        text += f": {format_bytes(top.bytes)} of step memory estimated"
        if len(ctx.steps) > 1:
            text += f" ({format_bytes(total)} with the {len(ctx.steps) - 1} others in the step)"
    return text


def _step_figures(ctx: Context, wanted: int | None) -> tuple[tuple[str, Any], ...]:
    """What a chunking or parameter limit is sized from: the heaviest request's tokens and bytes
    a token (the model's widths, else the failed allocation over its tokens), and the room."""
    if not ctx.steps:
        return ()
    top = ctx.steps[0]
    per_token: float | None = None
    if top.bytes is not None and top.step_tokens:
        per_token = top.bytes / top.step_tokens
    elif wanted and top.step_tokens:
        per_token = wanted / top.step_tokens
    free = (ctx.oom or {}).get("free_bytes")
    return (
        ("request_id", top.request_id),
        ("parameter", top.parameter),
        ("step_tokens", top.step_tokens),
        ("step_bytes", top.bytes),
        ("step_total_bytes", sum(e.bytes or 0 for e in ctx.steps) if top.bytes else None),
        ("step_bytes_per_token", round(per_token) if per_token else None),
        ("requested_bytes", wanted),
        ("room_bytes", free),
    )


def _rows(requests: pl.LazyFrame) -> pl.DataFrame:
    """The chosen lifecycle rows in time order (the table's order among rows of one instant)."""
    return requests.collect().sort("ts", maintain_order=True)


def _fell_back(ctx: Context) -> bool:
    spike = ctx.spike
    if spike is None or spike.kind != "observed" or spike.metric == "kv_used":
        return False
    after = ctx.memory.between(spike.series, spike.peak_ts, spike.peak_ts + ctx.window)
    if after.height < 2:
        return False
    return float(after["value"].min()) <= spike.peak_value - spike.rise / 2  # type: ignore[arg-type]


CHECKS: tuple[Callable[[Context], ClassCheck], ...] = (
    foreign,
    startup,
    _fragmentation,
    _kv_exhaustion,
    leak,
    _transient,
)
