"""Spikes by level and rise, short peaks through *_peak_bytes, holes, peak-keeping downsampling."""

from __future__ import annotations

from typing import Any

import polars as pl

from oomtrace.analysis.options import AnalyzeOptions
from oomtrace.analysis.series import downsample, holes, memory_series
from oomtrace.analysis.spikes import find_spikes
from oomtrace.units import GiB, MiB
from tests.factories import at, samples

OPTIONS = AnalyzeOptions(window_s=60)


def series(metric: str, values: list[tuple[float, float]], **extra: Any) -> pl.DataFrame:
    frame = samples(*[{"ts": at(t), "metric": metric, "value": v, **extra} for t, v in values])
    return memory_series(frame)


def with_capacity(frame: pl.DataFrame, capacity: float | None = 80.0 * GiB) -> pl.DataFrame:
    return frame.with_columns(capacity=pl.lit(capacity, dtype=pl.Float64))


def test_a_rise_within_the_window_is_a_spike_with_its_start_and_rate() -> None:
    # GIVEN device memory flat at 40 GiB, rising by 8 GiB over 4 s, then back down
    points = [(t, 40.0 * GiB) for t in range(100)]
    points[50:55] = [(50 + i, (40 + 2 * i) * GiB) for i in range(5)]
    frame = with_capacity(series("device_used_bytes", points))
    # WHEN spikes are found
    spikes = find_spikes(frame, OPTIONS)
    # THEN one spike peaks at t=54 with 8 GiB of rise, having started at t=50, 2 GiB/s
    assert len(spikes) == 1
    spike = spikes[0]
    assert (spike.start, spike.peak_ts) == (at(50), at(54))
    assert (spike.peak_value, spike.rise) == (48.0 * GiB, 8.0 * GiB)
    assert spike.rate_per_s == 2.0 * GiB
    assert spike.utilisation == 0.6


def test_a_short_peak_between_samples_is_found_through_the_peak_metric() -> None:
    # GIVEN allocated memory sampled flat, while its peak-since-last-sample shows a 6 GiB burst
    flat = [(t, 20.0 * GiB) for t in range(0, 120, 10)]
    peaks = [(t, (26.0 if t == 60 else 20.0) * GiB) for t in range(0, 120, 10)]
    frame = with_capacity(
        pl.concat(
            [
                series("torch_allocated_bytes", flat),
                series("torch_allocated_peak_bytes", peaks),
            ]
        )
    )
    spikes = find_spikes(frame, OPTIONS)
    assert [(s.metric, s.peak_ts) for s in spikes] == [("torch_allocated_peak_bytes", at(60))]


def test_a_series_held_near_capacity_is_a_level_spike_even_without_a_rise() -> None:
    frame = with_capacity(series("device_used_bytes", [(t, 79.0 * GiB) for t in range(30)]))
    spikes = find_spikes(frame, OPTIONS)
    assert len(spikes) == 1
    assert spikes[0].rise == 0.0


def test_small_wobbles_are_not_spikes() -> None:
    points = [(t, 40.0 * GiB + (t % 3) * 10 * MiB) for t in range(100)]
    assert find_spikes(with_capacity(series("device_used_bytes", points)), OPTIONS) == []


def test_noise_around_the_threshold_is_one_spike() -> None:
    # GIVEN a series that crosses its threshold three times within a window
    base = 10.0 * GiB
    values = (
        [base] * 10 + [base + 5 * GiB, base, base + 6 * GiB, base, base + 5 * GiB] + [base] * 100
    )
    frame = with_capacity(series("device_used_bytes", list(enumerate(values))))
    spikes = find_spikes(frame, OPTIONS)
    assert [s.peak_ts for s in spikes] == [at(12)]


def test_spikes_are_ordered_worst_first_by_utilisation() -> None:
    low = series(
        "device_used_bytes",
        [(t, (10.0 + (5 if t == 50 else 0)) * GiB) for t in range(100)],
        device=0,
    )
    high = series(
        "device_used_bytes",
        [(t, (60.0 + (15 if t == 50 else 0)) * GiB) for t in range(100)],
        device=1,
    )
    spikes = find_spikes(with_capacity(pl.concat([low, high])), OPTIONS)
    assert [s.device for s in spikes] == [1, 0]


def test_holes_are_gaps_far_longer_than_the_usual_interval() -> None:
    # GIVEN a 1 Hz series with a 30 s silence
    points = [(t, 1.0) for t in range(20)] + [(t, 1.0) for t in range(50, 60)]
    frame = samples(*[{"ts": at(t), "metric": "device_used_bytes", "value": v} for t, v in points])
    found = holes(frame)
    assert found.select("start", "end", "seconds").rows() == [(at(19), at(50), 31.0)]


def test_downsampling_keeps_every_bucket_minimum_and_maximum() -> None:
    # GIVEN 10,000 points with one sharp peak and one sharp dip
    values = [5.0] * 10_000
    values[4321], values[777] = 99.0, -3.0
    frame = series("device_used_bytes", list(enumerate(values)))
    small = downsample(frame, 50)
    assert small.height <= 100
    assert small["value"].max() == 99.0
    assert small["value"].min() == -3.0
    assert small.filter(pl.col("value") == 99.0)["ts"].to_list() == [at(4321)]
