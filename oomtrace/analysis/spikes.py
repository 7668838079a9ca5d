"""Spikes on memory series: a rise within the window, or a level close to capacity.

For every series, the baseline at each sample is the minimum over the preceding window (a rolling
minimum, one pass per series). A sample is part of a spike when it stands at least the rise
threshold above that baseline, or when it is at or above the full level of the series' capacity.
Consecutive spike samples form runs; runs closer than a window are one spike. Per spike, the start
is the last time the series stood at its window minimum before the peak, and the rate of rise is
reported both on average (rise over start-to-peak) and at its steepest (between two samples).

Short peaks between coarse samples are not lost: the ``*_peak_bytes`` metrics (the largest value
since the previous sample) are series of their own.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import polars as pl

from oomtrace.analysis.jsonfmt import iso, number
from oomtrace.analysis.options import AnalyzeOptions
from oomtrace.timeline import NS_PER_S


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
            "start": iso(self.start),
            "peak_ts": iso(self.peak_ts),
            "peak_value": number(self.peak_value, self.unit),
            "baseline_value": number(self.baseline_value, self.unit),
            "rise": number(self.rise, self.unit),
            "rate_per_s": number(self.rate_per_s, self.unit),
            "max_rate_per_s": number(self.max_rate_per_s, self.unit),
            "capacity": number(self.capacity, self.unit),
            "utilisation": number(self.utilisation, "ratio"),
        }


def _threshold(options: AnalyzeOptions) -> pl.Expr:
    capacity = pl.col("capacity")
    fraction = options.min_rise_fraction
    by_capacity = pl.when(capacity.is_not_null()).then(capacity * fraction)
    return (
        pl.when(pl.col("unit") == "bytes")
        .then(pl.max_horizontal(pl.lit(float(options.min_rise_bytes)), by_capacity))
        .when(pl.col("unit") == "ratio")
        .then(pl.lit(fraction))
        .otherwise(by_capacity.fill_null(pl.col("value").max().over("series") * fraction))
    )


def find_spikes(
    series: pl.DataFrame, options: AnalyzeOptions, *, per_series: int = 3
) -> list[Spike]:
    """Spikes of every series in ``series`` (the long series form with a ``capacity`` column),
    at most ``per_series`` per series, worst first overall."""
    if series.is_empty():
        return []
    window = timedelta(seconds=options.window_s)
    frame = series.filter(pl.col("value").is_not_null()).sort("series", "ts")
    frame = frame.with_columns(
        baseline=pl.col("value").rolling_min_by("ts", window_size=window).over("series"),
        threshold=_threshold(options),
    )
    full = (pl.col("value") >= pl.col("capacity") * options.kv_full_ratio).fill_null(value=False)
    candidate = ((pl.col("value") - pl.col("baseline")) >= pl.col("threshold")) | full
    frame = frame.with_columns(candidate=candidate)
    run = (
        (pl.col("candidate") != pl.col("candidate").shift(1))
        | (pl.col("series") != pl.col("series").shift(1))
    ).fill_null(value=True)
    frame = frame.with_columns(run=run.cum_sum())
    runs = (
        frame.filter(pl.col("candidate"))
        .group_by("series", "run")
        .agg(
            first_ts=pl.col("ts").first(),
            last_ts=pl.col("ts").last(),
            peak_value=pl.col("value").max(),
            peak_ts=pl.col("ts").get(pl.col("value").arg_max()),
        )
        .sort("series", "first_ts")
    )
    # Runs closer than a window apart are one spike (noise around the threshold).
    merged = (
        runs.with_columns(
            apart=(
                (pl.col("first_ts") - pl.col("last_ts").shift(1).over("series")) > window
            ).fill_null(value=True)
        )
        .with_columns(spike=pl.col("apart").cum_sum().over("series"))
        .group_by("series", "spike")
        .agg(
            peak_value=pl.col("peak_value").max(),
            peak_ts=pl.col("peak_ts").get(pl.col("peak_value").arg_max()),
        )
        .sort("series", pl.col("peak_value"), descending=[False, True])
        .group_by("series", maintain_order=True)
        .head(per_series)
    )
    bounds = (
        frame.with_row_index("_i")
        .group_by("series")
        .agg(first=pl.col("_i").min(), n=pl.len())
        .rows_by_key("series", unique=True)
    )
    spikes = [
        _describe(frame, bounds[row["series"]], row["peak_ts"], window)
        for row in merged.iter_rows(named=True)
    ]
    return sorted(spikes, key=lambda s: (s.severity(), s.series), reverse=True)


def _describe(
    frame: pl.DataFrame, bound: tuple[Any, ...], peak_ts: datetime, window: timedelta
) -> Spike:
    """The spike that peaks at ``peak_ts``, measured on the samples of the window before it."""
    first, n = int(bound[0]), int(bound[1])
    rows = frame.slice(first, n)
    ts = rows["ts"]
    lo = ts.search_sorted(peak_ts - window, side="left")
    hi = ts.search_sorted(peak_ts, side="right")
    win = rows.slice(int(lo), int(hi) - int(lo))
    peak = win.row(win.height - 1, named=True)
    minimum = win["value"].min()
    start_row = win.filter(pl.col("value") == minimum).row(-1, named=True)
    seconds = (peak["ts"] - start_row["ts"]).total_seconds()
    rise = float(peak["value"]) - float(start_row["value"])
    steps = win.select(
        rate=pl.col("value").diff()
        / (pl.col("ts").diff().dt.total_nanoseconds().cast(pl.Float64) / NS_PER_S)
    ).filter(pl.col("rate").is_finite())
    capacity = peak.get("capacity")
    return Spike(
        series=str(peak["series"]),
        kind=str(peak["kind"]),
        metric=str(peak["metric"]),
        node=str(peak["node"]),
        source=str(peak["source"]),
        device=peak["device"],
        pid=peak["pid"],
        unit=str(peak["unit"]),
        start=start_row["ts"],
        peak_ts=peak["ts"],
        peak_value=float(peak["value"]),
        baseline_value=float(start_row["value"]),
        rise=rise,
        rate_per_s=rise / seconds if seconds > 0 else None,
        max_rate_per_s=float(steps["rate"].max()) if steps.height else None,  # type: ignore[arg-type]
        capacity=float(capacity) if capacity is not None else None,
    )
