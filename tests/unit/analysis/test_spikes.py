"""Spikes by level and rise, short peaks through *_peak_bytes, holes, peak-keeping downsampling."""

from __future__ import annotations

from typing import Any

import polars as pl

from oomtrace.analysis.index import SeriesIndex
from oomtrace.analysis.observed_series import BYTES_METRICS, downsample
from oomtrace.analysis.options import AnalyzeOptions
from oomtrace.analysis.spikes import Spike, _stayed_up, find_spikes
from oomtrace.units import GiB, MiB
from tests.factories import at, samples

OPTIONS = AnalyzeOptions(window_s=60)


def series(metric: str, values: list[tuple[float, float]], **extra: Any) -> pl.DataFrame:
    return samples(*[{"ts": at(t), "metric": metric, "value": v, **extra} for t, v in values])


def spikes_of(frame: pl.DataFrame, capacity: float | None = 80.0 * GiB) -> list[Spike]:
    index = SeriesIndex.from_samples(frame, BYTES_METRICS, unit="bytes")
    return find_spikes([index], lambda _meta: capacity, OPTIONS)


def test_a_rise_within_the_window_is_a_spike_with_its_start_and_rate() -> None:
    # GIVEN device memory flat at 40 GiB, rising by 8 GiB over 4 s, then back down
    points = [(t, 40.0 * GiB) for t in range(100)]
    points[50:55] = [(50 + i, (40 + 2 * i) * GiB) for i in range(5)]
    # WHEN spikes are found
    spikes = spikes_of(series("device_used_bytes", points))
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
    both = [series("torch_allocated_bytes", flat), series("torch_allocated_peak_bytes", peaks)]
    spikes = spikes_of(pl.concat(both))
    assert [(s.metric, s.peak_ts) for s in spikes] == [("torch_allocated_peak_bytes", at(60))]


def test_a_series_held_near_capacity_is_a_level_spike_even_without_a_rise() -> None:
    spikes = spikes_of(series("device_used_bytes", [(t, 79.0 * GiB) for t in range(30)]))
    assert len(spikes) == 1
    assert spikes[0].rise == 0.0


def test_small_wobbles_are_not_spikes() -> None:
    points = [(t, 40.0 * GiB + (t % 3) * 10 * MiB) for t in range(100)]
    assert spikes_of(series("device_used_bytes", points)) == []


def test_noise_around_the_threshold_is_one_spike() -> None:
    # GIVEN a series that crosses its threshold three times within a window
    base = 10.0 * GiB
    values = (
        [base] * 10 + [base + 5 * GiB, base, base + 6 * GiB, base, base + 5 * GiB] + [base] * 100
    )
    spikes = spikes_of(series("device_used_bytes", list(enumerate(values))))
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
    spikes = spikes_of(pl.concat([low, high]))
    assert [s.device for s in spikes] == [1, 0]


def test_holes_are_gaps_far_longer_than_the_usual_interval() -> None:
    # GIVEN a 1 Hz series with a 30 s silence
    points = [(t, 1.0) for t in range(20)] + [(t, 1.0) for t in range(50, 60)]
    index = SeriesIndex.from_samples(
        series("device_used_bytes", points), BYTES_METRICS, unit="bytes"
    )
    found = index.holes()
    assert found.select("series", "start", "end", "seconds").rows() == [
        ("device_used_bytes gpu0 (test)", at(19), at(50), 31.0)
    ]


def test_downsampling_keeps_every_bucket_minimum_and_maximum() -> None:
    # GIVEN 10,000 points with one sharp peak and one sharp dip
    values = [5.0] * 10_000
    values[4321], values[777] = 99.0, -3.0
    index = SeriesIndex.from_samples(
        series("device_used_bytes", list(enumerate(values))), BYTES_METRICS, unit="bytes"
    )
    small = downsample(index.long(), 50)
    assert small.height <= 100
    assert small["value"].max() == 99.0
    assert small["value"].min() == -3.0
    assert small.filter(pl.col("value") == 99.0)["ts"].to_list() == [at(4321)]


def test_compacting_keeps_incident_windows_whole_and_peaks_elsewhere() -> None:
    # GIVEN a 10 Hz hour with a peak far from the incident window
    values = [(t / 10, 5.0 * GiB) for t in range(36_000)]
    values[100] = (10.0, 9.0 * GiB)
    index = SeriesIndex.from_samples(
        series("device_used_bytes", values), BYTES_METRICS, unit="bytes"
    )
    # WHEN compacted to 100 buckets with one window of 60 s
    kept = index.compact([("node-a", at(1800), at(1860))], 100)
    # THEN the window keeps all its 601 samples, the far peak survives, the rest is bucketed
    inside = kept.filter(pl.col("ts").is_between(at(1800), at(1860)))
    assert inside.height == 601
    assert kept.filter(pl.col("value") == 9.0 * GiB)["ts"].to_list() == [at(10)]
    assert kept.height < 601 + 2 * 101
    assert kept.columns == [
        "series",
        "kind",
        "node",
        "source",
        "device",
        "pid",
        "metric",
        "unit",
        "ts",
        "value",
    ]


def test_a_pool_that_stays_up_between_runs_is_one_spike_and_one_that_drops_is_two() -> None:
    # GIVEN a pool metric near its capacity in runs, separated by gaps longer than the window:
    # between the first two runs it stays above half way to full, between the last two it drops
    # to its normal level
    values = [10.0] * 50 + [99.0] * 5 + [80.0] * 100 + [99.0] * 5 + [10.0] * 100 + [99.0] * 5
    frame = pl.DataFrame({"ts": [at(t) for t in range(len(values))], "value": values})
    runs = pl.DataFrame(
        {"first_ts": [at(50), at(155), at(260)], "last_ts": [at(54), at(159), at(264)]}
    )
    # WHEN each run is checked against a floor between normal (10) and full (99)
    up = _stayed_up(frame, runs, 54.5)
    # THEN the first run has nothing before it, the second followed a gap that stayed up, the
    # third one that fell
    assert up.to_list() == [False, True, False]
