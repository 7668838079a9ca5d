"""Classification of an incident: every class is tested and keeps its reason and evidence rows.

Checks run in this order and the first that matches names the class; the others stay in the
findings so a reader sees what else was considered and why it was ruled out:

1. ``startup_misfit`` — the engine said at startup that the cache cannot hold one request or that
   nothing is left for it, or the OOM came before any request, or weights + KV cache + CUDA graphs
   stated at startup exceed what the engine was allowed to use;
2. ``foreign_memory`` — another process held or took device memory (per-process samples, or the
   OOM's own accounting), or memory outside PyTorch's cache grew while the cache did not;
3. ``fragmentation`` — at the OOM the allocator held, reserved but unallocated, at least the
   allocation that failed;
4. ``kv_exhaustion`` — the KV pool was full (observed usage at or above the full ratio, or the
   modelled KV at the pool size), or requests were preempted in the window (a preemption storm);
5. ``leak`` — the memory level at idle moments (no request running) rose steadily before the peak
   (without idle information: the minimum of each stretch of time before the peak rose);
6. ``transient_peak`` — an allocation failed or a series peaked and fell back while the pool had
   room, with the requests in prefill at that moment;
7. ``unknown`` — with the reasons every check gave.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from itertools import pairwise
from typing import Any, cast

import polars as pl

from oomtrace.analysis import evidence as ev
from oomtrace.analysis.evidence import Evidence
from oomtrace.analysis.findings import ClassCheck, IncidentClass, ProcessUse
from oomtrace.analysis.incidents import STARTUP_KINDS
from oomtrace.analysis.index import SeriesIndex
from oomtrace.analysis.kvmodel import KVModel
from oomtrace.analysis.options import AnalyzeOptions
from oomtrace.analysis.spikes import Spike
from oomtrace.analysis.timeline import RESETS, lit_ts
from oomtrace.units import format_bytes

STORM = 10  # preemptions in one window that make a storm rather than an episode
LEAK_POINTS = 3


@dataclass(frozen=True)
class Context:
    """What the checks read about one incident."""

    node: str
    device: int | None
    peak_ts: datetime
    window_start: datetime
    window: timedelta
    anchor: str
    spike: Spike | None
    oom: dict[str, Any] | None
    events: pl.DataFrame
    requests: pl.LazyFrame  # the node's lifecycle rows: each check collects only what it reads
    residents: pl.DataFrame
    memory: SeriesIndex
    kv_index: SeriesIndex
    engine: SeriesIndex  # scheduler series: running, waiting, preemptions
    kv: KVModel
    config: dict[str, Any]
    capacity: int | None
    options: AnalyzeOptions
    engine_pids: frozenset[int]
    idle: pl.DataFrame  # node, start, end of stretches with no request running
    modelled_kv_bytes: int | None
    processes: list[ProcessUse] = field(default_factory=list)

    @property
    def threshold(self) -> float:
        share = self.capacity * self.options.min_rise_fraction if self.capacity else 0.0
        return max(float(self.options.min_rise_bytes), share)


def classify(ctx: Context) -> tuple[IncidentClass, str, tuple[ClassCheck, ...]]:
    """The class, its reason, and every check in order."""
    checks = tuple(check(ctx) for check in CHECKS)
    for check in checks:
        if check.matched:
            return check.cls, check.reason, checks
    reason = "no class fits: " + "; ".join(f"{c.cls}: {c.reason}" for c in checks)
    return "unknown", reason, checks


def _startup(ctx: Context) -> ClassCheck:
    before = pl.col("ts") <= lit_ts(ctx.peak_ts)
    refused = ctx.events.filter(pl.col("kind").is_in(STARTUP_KINDS) & before)
    if refused.height:
        first = refused.row(0, named=True)
        return ClassCheck(
            "startup_misfit",
            True,
            f"the engine refused to start ({first['kind']}): its KV cache cannot hold one request "
            "with the configured limits",
            tuple(ev.event(r) for r in refused.head(5).iter_rows(named=True)),
        )
    served = int(ctx.requests.filter(before).select(pl.len()).collect().item())
    if ctx.anchor == "oom" and served == 0 and ctx.oom is not None:
        return ClassCheck(
            "startup_misfit",
            True,
            "the OOM came before any request arrived: weights, cache and reserve did not fit",
            (ev.event(ctx.oom),),
        )
    keys = ("model_weights_bytes", "available_kv_cache_bytes", "cuda_graph_bytes")
    parts = {k: ctx.config[k] for k in keys if isinstance(ctx.config.get(k), int | float)}
    utilisation = ctx.config.get("gpu_memory_utilization")
    if ctx.capacity and len(parts) >= 2 and isinstance(utilisation, int | float):
        allowed = ctx.capacity * float(utilisation)
        total = sum(parts.values())
        if total > allowed:
            return ClassCheck(
                "startup_misfit",
                True,
                f"weights + KV cache + graphs stated at startup ({format_bytes(round(total))}) "
                f"exceed what gpu_memory_utilization allows ({format_bytes(round(allowed))})",
                (ev.manifest({**parts, "gpu_memory_utilization": utilisation}),),
            )
    return ClassCheck(
        "startup_misfit", False, "the engine started and served requests before the peak"
    )


def _foreign(ctx: Context) -> ClassCheck:
    rows: list[Evidence] = []
    reasons: list[str] = []
    foreign = [p for p in ctx.processes if p.basis == "samples"]
    held = sum(p.bytes for p in foreign)
    grew = sum(p.growth_bytes or 0 for p in foreign)
    if held >= ctx.threshold and (grew >= ctx.options.min_rise_bytes or ctx.anchor == "oom"):
        top = max(foreign, key=lambda p: p.bytes)
        reasons.append(
            f"process {top.pid} (not the engine) held {format_bytes(top.bytes)} at the peak"
            + (
                f", {format_bytes(top.growth_bytes)} more than at the window start"
                if top.growth_bytes
                else ""
            )
        )
        for p in foreign:
            series = ctx.memory.find("process_used_bytes", ctx.node, ctx.device, pid=p.pid)
            row = ctx.memory.at(series, ctx.peak_ts, ctx.window)
            if row is not None:
                rows.append(ev.sample(row))
    stated = [p for p in ctx.processes if p.basis == "oom_event"]
    if not reasons and stated and stated[0].bytes >= max(ctx.threshold, 0.1 * (ctx.capacity or 0)):
        reasons.append(
            f"at the OOM, {format_bytes(stated[0].bytes)} of device memory was held outside the "
            "engine's process"
        )
        if ctx.oom is not None:
            rows.append(ev.event(ctx.oom))
    if not reasons:
        outside = _outside_growth(ctx)
        if outside is not None:
            reasons.append(outside[0])
            rows += outside[1]
    if reasons:
        return ClassCheck("foreign_memory", True, "; ".join(reasons), tuple(rows))
    return ClassCheck(
        "foreign_memory",
        False,
        "no other process held a significant share, and memory outside PyTorch did not grow",
    )


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


def _fragmentation(ctx: Context) -> ClassCheck:
    oom = ctx.oom
    if oom is not None and oom.get("reserved_unallocated_bytes") is not None:
        slack, wanted = oom["reserved_unallocated_bytes"], oom.get("requested_bytes")
        floor = 0.02 * (ctx.capacity or oom.get("total_bytes") or 0)
        if wanted is not None and slack >= wanted and slack >= floor:
            return ClassCheck(
                "fragmentation",
                True,
                f"the allocator held {format_bytes(slack)} reserved but unallocated, more than the "
                f"{format_bytes(wanted)} it failed to allocate: the free cache was fragmented",
                (ev.event(oom),),
                (("slack_bytes", slack), ("requested_bytes", wanted)),
            )
        return ClassCheck(
            "fragmentation",
            False,
            f"reserved but unallocated at the OOM ({format_bytes(slack)}) was below the failed "
            "allocation",
            (ev.event(oom),),
        )
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


def _preemptions(ctx: Context) -> tuple[int, list[Evidence]]:
    rows: list[Evidence] = []
    count = 0
    stop = ctx.peak_ts + timedelta(seconds=1)
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
    return count, rows


def _kv_full(ctx: Context) -> tuple[float | None, dict[str, Any] | None]:
    series = ctx.kv_index.find("kv_used", ctx.node)
    row = ctx.kv_index.max_between(series, ctx.window_start, ctx.peak_ts + timedelta(seconds=1))
    if row is None or row.get("ratio") is None:
        return None, row
    return float(row["ratio"]), row


def _kv_exhaustion(ctx: Context) -> ClassCheck:
    ratio, row = _kv_full(ctx)
    preemptions, rows = _preemptions(ctx)
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
        parts.append(f"{storm}{preemptions} preemption{plural} in the window")
    if parts:
        return ClassCheck("kv_exhaustion", True, "; ".join(parts), tuple(rows))
    seen = (
        f"the KV pool peaked at {ratio:.1%} in the window"
        if ratio is not None
        else ("no KV pool observation")
    )
    evidence = (ev.sample(row),) if row is not None else ()
    return ClassCheck("kv_exhaustion", False, f"{seen} and no request was preempted", evidence)


def _serving_since(ctx: Context) -> datetime | None:
    """When the engine that peaked began serving: its node's first request after the last engine
    start or reset before the peak. Memory before that is the engine loading, not a level it
    returned to (a leak compares levels while serving)."""
    before = pl.col("ts") <= lit_ts(ctx.peak_ts)
    resets = ctx.events.filter(pl.col("kind").is_in(RESETS) & before)["ts"]
    since = resets.max() if resets.len() else None
    served = ctx.requests.filter(before)
    if since is not None:
        served = served.filter(pl.col("ts") >= lit_ts(since))  # type: ignore[arg-type]
    first = served.select(pl.col("ts").min()).collect().item()
    return first if first is not None else since  # type: ignore[return-value]


def _levels(ctx: Context, series: str) -> list[dict[str, Any]]:
    """The lowest sample in each idle stretch (or, without idle information, in each sixth of the
    time before the peak) since the engine began serving: the level memory returns to when no
    request holds it."""
    since = _serving_since(ctx)
    idle = ctx.idle.filter(pl.col("end") <= lit_ts(ctx.peak_ts))
    if since is not None:
        idle = idle.filter(pl.col("start") >= lit_ts(since))
    stretches = list(idle.select("start", "end").iter_rows())
    if len(stretches) < LEAK_POINTS:
        first = ctx.memory.rows(series)["ts"][0]
        if since is not None and since > first:
            first = since
        step = (ctx.peak_ts - first) / 6
        stretches = [(first + step * i, first + step * (i + 1)) for i in range(6)]
    levels = []
    for start, end in stretches:
        rows = ctx.memory.between(series, start, end)
        if rows.height:
            levels.append(rows.row(int(rows["value"].arg_min() or 0), named=True))
    return levels


def _leak(ctx: Context) -> ClassCheck:
    metrics = ("torch_allocated_bytes", "torch_reserved_bytes", "device_used_bytes")
    series = next(
        (s for m in metrics if (s := ctx.memory.find(m, ctx.node, ctx.device)) is not None), None
    )
    if series is None:
        return ClassCheck("leak", False, "no device or allocator series to follow")
    levels = _levels(ctx, series)
    values = [float(r["value"]) for r in levels]
    tolerance = 0.01 * (ctx.capacity or max(values or [0.0]))
    rising = all(b >= a - tolerance for a, b in pairwise(values))
    rise = values[-1] - values[0] if values else 0.0
    span = (levels[-1]["ts"] - levels[0]["ts"]) if len(levels) >= 2 else timedelta(0)
    if len(values) >= LEAK_POINTS and rising and rise >= ctx.threshold and span >= 2 * ctx.window:
        how = "at idle moments" if ctx.idle.height >= LEAK_POINTS else "in its lowest points"
        hours = span.total_seconds() / 3600
        return ClassCheck(
            "leak",
            True,
            f"{levels[0]['metric']} {how} rose by {format_bytes(round(rise))} over "
            f"{hours:.1f} h before the peak without falling back",
            tuple(ev.sample(r) for r in levels),
        )
    return ClassCheck("leak", False, "the memory level at idle moments did not rise steadily")


def _transient(ctx: Context) -> ClassCheck:
    ratio, row = _kv_full(ctx)
    rows: list[Evidence] = [ev.sample(row)] if row is not None else []
    room = ratio is not None and ratio < ctx.options.kv_full_ratio
    prefill = ctx.residents.filter(pl.col("in_prefill").fill_null(value=False))
    transient = ctx.anchor == "oom" or _fell_back(ctx)
    if not transient:
        return ClassCheck("transient_peak", False, "the peak did not fall back within the window")
    if not room and prefill.is_empty():
        return ClassCheck(
            "transient_peak",
            False,
            "neither a KV observation showing room nor a request in prefill at the peak",
            tuple(rows),
        )
    parts = []
    if ctx.oom is not None and ctx.oom.get("requested_bytes"):
        parts.append(f"an allocation of {format_bytes(ctx.oom['requested_bytes'])} failed")
        rows.insert(0, ev.event(ctx.oom))
    elif ctx.spike is not None:
        parts.append(f"{ctx.spike.metric} peaked and fell back")
    if room and ratio is not None:
        parts.append(f"while the KV pool was {ratio:.1%} full")
    if prefill.height:
        longest = cast("int | None", prefill["prompt_tokens"].max())
        parts.append(
            f"{prefill.height} request(s) in prefill"
            + (f", the longest with {longest:,} prompt tokens" if longest is not None else "")
        )
        admitted = _rows(
            ctx.requests.filter(
                pl.col("request_id").is_in(prefill["request_id"].head(3).implode())
                & pl.col("event").is_in(["arrived", "admitted"])
            )
        )
        rows += [ev.request(r) for r in admitted.iter_rows(named=True)]
    return ClassCheck("transient_peak", True, ", ".join(parts), tuple(rows))


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
    _startup,
    _foreign,
    _fragmentation,
    _kv_exhaustion,
    _leak,
    _transient,
)
