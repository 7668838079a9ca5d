"""Spikes on memory series: a rise within the window, or a level near capacity.

For every series, the baseline at each sample is the minimum over the preceding window (a
rolling minimum, one pass over that series alone). A sample is part of a spike when it stands at
least the rise threshold above that baseline, or when it is at or above the full level of the
series' capacity. Consecutive spike samples form runs; runs closer than a window are one spike.
Per spike, the start is the last time the series stood at its window minimum before the peak,
and the rate of rise is reported both on average (rise over start-to-peak) and at its steepest
(between two samples).

Short peaks between coarse samples are not lost: the ``*_peak_bytes`` metrics (the largest value
since the previous sample) are series of their own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import polars as pl

from oomtrace.analysis import grouped as g
from oomtrace.analysis.index import SeriesIndex, search_ts
from oomtrace.analysis.jsonfmt import TIME_DIGITS, number
from oomtrace.analysis.options import AnalyzeOptions
from oomtrace.analysis.timeline import NS_PER_S
from oomtrace.isotime import iso_time


@dataclass(frozen=True)
class Spike:
    """One spike on one series. Values are in the series' ``unit``."""

    series: str
    kind: str
    metric: str
    node: str
    source: str
    device: int | None
    pid: int | None
    unit: str
    start: datetime
    peak_ts: datetime
    peak_value: float
    baseline_value: float
    rise: float
    rate_per_s: float | None
    max_rate_per_s: float | None
    capacity: float | None

    @property
    def utilisation(self) -> float | None:
        return self.peak_value / self.capacity if self.capacity else None

    def severity(self) -> tuple[int, float, float]:
        """Sort key, larger is worse: observed before modelled, then utilisation, then rise."""
        share = self.rise / self.capacity if self.capacity else 0.0
        return (int(self.kind == "observed"), self.utilisation or 0.0, share)

    def to_json(self) -> dict[str, Any]:
        return {
            "series": self.series,
            "kind": self.kind,
            "metric": self.metric,
            "node": self.node,
            "source": self.source,
            "device": self.device,
            "pid": self.pid,
            "unit": self.unit,
            "start": iso_time(self.start, TIME_DIGITS),
            "peak_ts": iso_time(self.peak_ts, TIME_DIGITS),
            "peak_value": number(self.peak_value, self.unit),
            "baseline_value": number(self.baseline_value, self.unit),
            "rise": number(self.rise, self.unit),
            "rate_per_s": number(self.rate_per_s, self.unit),
            "max_rate_per_s": number(self.max_rate_per_s, self.unit),
            "capacity": number(self.capacity, self.unit),
            "utilisation": number(self.utilisation, "ratio"),
        }


def _threshold(
    meta: dict[str, Any], capacity: float | None, peak: float, options: AnalyzeOptions
) -> float:
    fraction = options.min_rise_fraction
    if meta["unit"] == "bytes":
        return max(float(options.min_rise_bytes), (capacity or 0.0) * fraction)
    if meta["unit"] == "ratio":
        return fraction
    return (capacity or peak) * fraction


def find_spikes(
    indexes: Iterable[SeriesIndex],
    capacity: Callable[[dict[str, Any]], float | None],
    options: AnalyzeOptions,
    *,
    per_series: int = 3,
    preemptions: pl.DataFrame | None = None,
    pool_blocks: int | None = None,
) -> list[Spike]:
    """Spikes of every series of ``indexes`` (``capacity`` gives each series' capacity from its
    description, or None), at most ``per_series`` per series, worst first overall.
    ``preemptions`` (``node, ts``) tell which fill of a pool ran it dry; ``pool_blocks`` tells
    when a pool had no block left."""
    spikes: list[Spike] = []
    times: dict[str, list[datetime]] = {}  # per node: a day has 100,000 preemptions
    for index in indexes:
        for name in index.names():
            meta = index.meta(name)
            frame = index.rows(name).select("ts", "value").drop_nulls("value")
            if frame.height:
                if meta["node"] not in times:
                    times[meta["node"]] = _times(preemptions, meta["node"])
                evicted = times[meta["node"]]
                spikes += _series_spikes(
                    frame, meta, capacity(meta), options, per_series, evicted, pool_blocks
                )
    return sorted(spikes, key=lambda s: (s.severity(), s.series), reverse=True)


def _times(preemptions: pl.DataFrame | None, node: str) -> list[datetime]:
    if preemptions is None or preemptions.is_empty():
        return []
    return sorted(preemptions.filter(pl.col("node") == node)["ts"].to_list())


def _series_spikes(
    frame: pl.DataFrame,
    meta: dict[str, Any],
    capacity: float | None,
    options: AnalyzeOptions,
    per_series: int,
    evicted: list[datetime] | None = None,
    pool_blocks: int | None = None,
) -> list[Spike]:
    window = timedelta(seconds=options.window_s)
    threshold = _threshold(meta, capacity, float(frame["value"].max()), options)  # type: ignore[arg-type]
    level = capacity * options.kv_full_ratio if capacity else None
    full = pl.col("value") >= level if level is not None else pl.lit(value=False)
    baseline = pl.col("value").rolling_min_by("ts", window_size=window)
    flagged = frame.with_columns(candidate=((pl.col("value") - baseline) >= threshold) | full)
    runs = (
        flagged.with_columns(run=g.group_id("candidate"))
        .filter(pl.col("candidate"))
        .group_by("run")
        .agg(
            first_ts=pl.col("ts").first(),
            last_ts=pl.col("ts").last(),
            peak_value=pl.col("value").max(),
            peak_ts=pl.col("ts").get(pl.col("value").arg_max()),
        )
        .sort("first_ts")
    )
    # Each time the series crosses up into the full level (a spike's run can hold several).
    entries = flagged.filter(full & ~full.shift(1).fill_null(value=False))["ts"]
    if runs.is_empty():
        return []
    fills = level is not None and meta["metric"] in POOL_METRICS
    normal = float(frame["value"].median()) if fills else None  # type: ignore[arg-type]
    # Runs closer than a window apart are one spike (noise around the threshold); so are runs of
    # a full pool that never fell back to its normal level in between (a saturated plateau).
    apart = (pl.col("first_ts") - pl.col("last_ts").shift(1)) > window
    if fills and normal is not None and level is not None:
        apart &= ~pl.lit(_stayed_up(frame, runs, (normal + level) / 2))
    merged = (
        runs.with_columns(spike=apart.fill_null(value=True).cum_sum())
        .group_by("spike")
        .agg(
            peak_value=pl.col("peak_value").max(),
            peak_ts=pl.col("peak_ts").get(pl.col("peak_value").arg_max()),
            first_ts=pl.col("first_ts").min(),
            last_ts=pl.col("last_ts").max(),
        )
        .sort("peak_value", "peak_ts", descending=[True, False])
        .head(per_series)
    )
    out = []
    for peak_ts, first_ts, last_ts in merged.select("peak_ts", "first_ts", "last_ts").rows():
        fulls = [t for t in entries if first_ts <= t <= last_ts]
        full_ts = _fill(fulls, last_ts + window, evicted or [])
        if full_ts is not None and capacity and pool_blocks:
            full_ts = _no_room(frame, full_ts, evicted or [], capacity * (1 - 0.5 / pool_blocks))
        if fills and full_ts is not None:
            # The moment a pool filled, not its noisiest maximum later: what filled it is what
            # grew from its normal level to that moment.
            out.append(_describe(frame, meta, capacity, full_ts, window, normal=normal))
        else:
            out.append(_describe(frame, meta, capacity, peak_ts, window))
    return out


def _fill(fulls: list[datetime], until: datetime, evicted: list[datetime]) -> datetime | None:
    """When a pool filled: of the moments a spike's runs first reached the full level, the last
    one at or before the first preemption the spike saw (the fill that ran it dry); without a
    preemption, the first."""
    if not fulls:
        return None
    first_eviction = next((t for t in evicted if fulls[0] <= t <= until), None)
    if first_eviction is None:
        return fulls[0]
    before = [t for t in fulls if t <= first_eviction]
    return before[-1] if before else fulls[0]


def _no_room(
    frame: pl.DataFrame, entry: datetime, evicted: list[datetime], level: float
) -> datetime:
    """Where a series states the pool to the block (the vLLM plugin's steps), the fill is the
    first reading after ``entry`` with no block left (``level``: the pool, which leaves out
    vLLM's null block, less half a block), before the first preemption; a coarser series keeps
    ``entry``."""
    until = next((t for t in evicted if t >= entry), None)
    after = frame.filter(pl.col("ts") >= pl.lit(entry, dtype=frame.schema["ts"]))
    if until is not None:
        after = after.filter(pl.col("ts") <= pl.lit(until, dtype=frame.schema["ts"]))
    full = after.filter(pl.col("value") >= level)
    return full["ts"][0] if full.height else entry


# Series of a pool that fills and stays full (preemptions, churn): their spike is the fill.
POOL_METRICS = ("kv_used", "modelled_kv_bytes", "modelled_stored_tokens")
# How far back the rise of a filled pool is looked for.
FILL_LOOKBACK = timedelta(minutes=15)


def _stayed_up(frame: pl.DataFrame, runs: pl.DataFrame, floor: float) -> pl.Series:
    """Per run (in ``runs``' order): whether the series stayed at or above ``floor`` since the
    previous run ended. Times are compared at the microsecond, as :func:`search_ts` compares
    them; all gaps at once (a saturated pool has tens of thousands of runs a day)."""
    if runs.height < 2:
        return pl.Series("up", [False] * runs.height, dtype=pl.Boolean)
    ts = frame["ts"].to_physical()
    ends = runs["last_ts"].to_physical().head(-1)
    firsts = runs["first_ts"].to_physical().tail(-1)
    lo = ts.search_sorted(ends // 1000 * 1000 + 999, side="right").to_numpy()
    hi = ts.search_sorted(firsts // 1000 * 1000, side="left").to_numpy()
    between = hi > lo
    # Each gap's minimum by one reduction over (lo, hi) pairs; an empty gap reads row 0 and is
    # not looked at. hi is a run's first row, so always a row of the frame.
    pairs = np.column_stack([np.where(between, lo, 0), np.where(between, hi, 0)]).ravel()
    lows = np.fmin.reduceat(frame["value"].to_numpy(), pairs)[0::2]
    up = ~between | (lows >= floor)
    return pl.Series("up", [False, *up.tolist()], dtype=pl.Boolean)


def _describe(
    frame: pl.DataFrame,
    meta: dict[str, Any],
    capacity: float | None,
    peak_ts: datetime,
    window: timedelta,
    *,
    normal: float | None = None,
) -> Spike:
    """The spike that peaks at ``peak_ts``, measured on the samples of the window before it; a
    pool that filled is measured from the last time it stood at its ``normal`` level (its median),
    up to :data:`FILL_LOOKBACK` before."""
    ts = frame["ts"]
    lo = search_ts(ts, peak_ts - window, "left")
    hi = search_ts(ts, peak_ts, "right")
    win = frame.slice(lo, hi - lo)
    peak = win.row(win.height - 1, named=True)
    minimum = win["value"].min()
    start_row = win.filter(pl.col("value") == minimum).row(-1, named=True)
    if normal is not None and float(start_row["value"]) > normal:
        first = search_ts(ts, peak_ts - FILL_LOOKBACK, "left")
        back = frame.slice(first, hi - first)
        below = back.filter((pl.col("value") <= normal) & (pl.col("ts") <= peak["ts"]))
        if below.height:
            start_row = below.row(-1, named=True)
    seconds = (peak["ts"] - start_row["ts"]).total_seconds()
    rise = float(peak["value"]) - float(start_row["value"])
    steps = win.select(
        rate=pl.col("value").diff()
        / (pl.col("ts").diff().dt.total_nanoseconds().cast(pl.Float64) / NS_PER_S)
    ).filter(pl.col("rate").is_finite())
    return Spike(
        series=str(meta["series"]),
        kind=str(meta["kind"]),
        metric=str(meta["metric"]),
        node=str(meta["node"]),
        source=str(meta["source"]),
        device=meta["device"],
        pid=meta["pid"],
        unit=str(meta["unit"]),
        start=start_row["ts"],
        peak_ts=peak["ts"],
        peak_value=float(peak["value"]),
        baseline_value=float(start_row["value"]),
        rise=rise,
        rate_per_s=rise / seconds if seconds > 0 else None,
        max_rate_per_s=float(steps["rate"].max()) if steps.height else None,  # type: ignore[arg-type]
        capacity=capacity,
    )
