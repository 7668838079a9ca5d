"""The leak check: the memory level the engine returns to when idle kept rising before the peak.

The level is the lowest sample of each idle stretch (no request running) since the engine began
serving, or, without idle information, of each sixth of that time. A leak is a steady rise of
that level (no step down beyond 1 % of the device) over at least :data:`LEAK_POINTS` levels and two
windows, judged against the **headroom** the engine left, not against the device: a preallocating
server holds most of the device by design, and what a leak eats is the rest. The headroom is the
device less the engine's first idle level (device memory in use), else less its budget
(``gpu_memory_utilization``); the rise must be half of it (or the usual rise threshold, when
that is smaller). Every memory series of the device is followed and the one that rose most is
reported: a leak outside PyTorch shows in device memory only.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from itertools import pairwise
from typing import Any, Final

import polars as pl

from oomtrace.analysis import evidence as ev
from oomtrace.analysis.check_context import Context
from oomtrace.analysis.findings import ClassCheck
from oomtrace.analysis.timeline import RESETS, lit_ts
from oomtrace.schema import TS
from oomtrace.units import MiB, format_bytes

LEAK_POINTS: Final = 3
HEADROOM_SHARE: Final = 0.5
_FLOOR: Final = 64 * MiB  # below this no rise is told apart from the allocator's own churn
_METRICS: Final = ("device_used_bytes", "torch_reserved_bytes", "torch_allocated_bytes")


def leak(ctx: Context) -> ClassCheck:
    found = [
        (metric, series)
        for metric in _METRICS
        if (series := ctx.memory.find(metric, ctx.node, ctx.device)) is not None
    ]
    if not found:
        return ClassCheck("leak", False, "no device or allocator series to follow")
    trends = [t for metric, series in found if (t := _trend(ctx, metric, series)) is not None]
    if not trends:
        return ClassCheck("leak", False, "the memory level at idle moments did not rise steadily")
    trend = max(trends, key=lambda t: t.rise)
    needed = ctx.threshold
    if trend.headroom:
        needed = min(needed, max(HEADROOM_SHARE * trend.headroom, _FLOOR))
    if trend.rise < needed:
        against = f" of {format_bytes(trend.headroom)} headroom" if trend.headroom else ""
        return ClassCheck(
            "leak",
            False,
            f"{trend.metric} at idle moments rose {format_bytes(round(trend.rise))}{against}, "
            f"below the {format_bytes(round(needed))} a leak must take",
        )
    how = "at idle moments" if ctx.idle.height >= LEAK_POINTS else "in its lowest points"
    hours = trend.span.total_seconds() / 3600
    text = (
        f"{trend.metric} {how} rose by {format_bytes(round(trend.rise))} over {hours:.1f} h "
        "before the peak without falling back"
    )
    if trend.headroom:
        text += (
            f": {trend.rise / trend.headroom:.0%} of the {format_bytes(trend.headroom)} headroom "
            "the engine had left"
        )
    return ClassCheck(
        "leak",
        True,
        text,
        tuple(ev.sample(r) for r in trend.levels),
        (
            ("metric", trend.metric),
            ("rise_bytes", round(trend.rise)),
            ("span_s", round(trend.span.total_seconds(), 3)),
            ("rise_bytes_per_hour", round(trend.rise / hours) if hours else None),
            ("headroom_bytes", trend.headroom),
            ("first_level_bytes", round(trend.values[0])),
            ("last_level_bytes", round(trend.values[-1])),
        ),
    )


class _Trend:
    def __init__(self, metric: str, levels: list[dict[str, Any]], headroom: int | None) -> None:
        self.metric = metric
        self.levels = levels
        self.values = [float(r["value"]) for r in levels]
        self.rise = self.values[-1] - self.values[0]
        self.span: timedelta = levels[-1]["ts"] - levels[0]["ts"]
        self.headroom = headroom


def _trend(ctx: Context, metric: str, series: str) -> _Trend | None:
    """The series' idle levels when they rose steadily over two windows, else None."""
    levels = _levels(ctx, series)
    values = [float(r["value"]) for r in levels]
    if len(values) < LEAK_POINTS:
        return None
    tolerance = 0.01 * (ctx.capacity or max(values))
    if not all(b >= a - tolerance for a, b in pairwise(values)):
        return None
    if values[-1] <= values[0] or levels[-1]["ts"] - levels[0]["ts"] < 2 * ctx.window:
        return None
    return _Trend(metric, levels, _headroom(ctx, metric, values[0]))


def _headroom(ctx: Context, metric: str, first: float) -> int | None:
    """What the engine left of the device when it began serving (see the module docstring)."""
    if metric == "device_used_bytes" and ctx.capacity:
        return max(round(ctx.capacity - first), 0) or None
    return ctx.left_for_others


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
    stretches = idle.select("start", "end")
    if stretches.height < LEAK_POINTS:
        first = ctx.memory.rows(series)["ts"][0]
        if since is not None and since > first:
            first = since
        step = (ctx.peak_ts - first) / 6
        sixths = [(first + step * i, first + step * (i + 1)) for i in range(6)]
        stretches = pl.DataFrame(sixths, schema={"start": TS, "end": TS}, orient="row")
    return ctx.memory.lowest_in(series, stretches).to_dicts()
