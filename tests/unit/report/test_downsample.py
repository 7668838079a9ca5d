"""Peak-preserving downsampling: the spike a report is about can never be averaged away."""

from __future__ import annotations

from datetime import timedelta

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from oomtrace.errors import UsageError
from oomtrace.report.downsample import peak_preserving
from tests.factories import T0

GiB = 1 << 30


def series_frame(values: list[float], *, step_ms: int = 10, series: str = "used") -> pl.DataFrame:
    return pl.DataFrame(
        {
            "ts": [T0 + timedelta(milliseconds=i * step_ms) for i in range(len(values))],
            "series": [series] * len(values),
            "value": values,
        },
        schema={"ts": pl.Datetime("ns", "UTC"), "series": pl.String, "value": pl.Float64},
    )


def test_a_one_sample_spike_in_a_day_of_flat_samples_survives() -> None:
    # GIVEN a flat series of 100,000 samples with one sample 40 GiB above the rest
    values = [10.0 * GiB] * 100_000
    values[71_234] = 50.0 * GiB
    frame = series_frame(values)
    # WHEN it is reduced to 500 buckets
    out = peak_preserving(frame, max_buckets=500)
    # THEN the spike is there with its own timestamp, and the output is small
    spike = out.filter(pl.col("value") == 50.0 * GiB)
    assert spike["ts"].to_list() == [frame["ts"][71_234]]
    assert out.height <= 1000


def test_short_series_are_returned_whole_and_sorted() -> None:
    frame = series_frame([3.0, 1.0, 2.0])
    out = peak_preserving(frame.reverse(), max_buckets=10)
    assert_frame_equal(out, frame)


def test_null_and_nan_values_are_dropped_not_drawn_as_zero() -> None:
    frame = series_frame([1.0, float("nan"), 2.0]).with_columns(
        pl.when(pl.int_range(pl.len()) == 2).then(None).otherwise(pl.col("value")).alias("value")
    )
    out = peak_preserving(frame, max_buckets=10)
    assert out["value"].to_list() == [1.0]


def test_tied_extremes_keep_their_earliest_row_whatever_the_order_of_the_rows() -> None:
    # GIVEN a stepped count (each value held for many samples), in time order and shuffled, in
    # memory and as a scan (which streams, in no order)
    values = [float(k // 97 % 5) for k in range(20_000)]
    frame = series_frame(values)
    shuffled = frame.sample(fraction=1.0, shuffle=True, seed=7)
    # WHEN each is reduced to 50 buckets
    outs = [
        peak_preserving(f, max_buckets=50) for f in (frame, shuffled, frame.lazy(), shuffled.lazy())
    ]
    # THEN all four agree, and each point is the first sample of its value in its bucket
    for out in outs[1:]:
        assert_frame_equal(out, outs[0])
    # (a run of one value starts every 97 samples; a bucket is 20,000 / 50 = 400 samples wide)
    index = {ts: k for k, ts in enumerate(frame["ts"].to_list())}
    for ts in outs[0]["ts"].to_list():
        k = index[ts]
        assert k % 97 == 0 or k % 400 == 0 or values[k - 1] != values[k], k


def test_zero_buckets_is_refused() -> None:
    with pytest.raises(UsageError, match="at least one bucket"):
        peak_preserving(series_frame([1.0]), max_buckets=0)


def test_series_are_bucketed_together_but_reduced_separately() -> None:
    # GIVEN two series over the same time range, each with its own spike
    a = [1.0] * 5000
    a[10] = 9.0
    b = [2.0] * 5000
    b[4990] = -9.0
    frame = pl.concat([series_frame(a, series="a"), series_frame(b, series="b")])
    # WHEN reduced
    out = peak_preserving(frame, max_buckets=100)
    # THEN each keeps its own extreme and stays within its bound
    assert 9.0 in out.filter(pl.col("series") == "a")["value"].to_list()
    assert -9.0 in out.filter(pl.col("series") == "b")["value"].to_list()
    for _, part in out.group_by("series"):
        assert part.height <= 200


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(
        st.floats(min_value=-1e15, max_value=1e15, allow_nan=False), min_size=1, max_size=400
    ),
    gaps=st.lists(st.integers(min_value=1, max_value=10_000_000_000), min_size=400, max_size=400),
    buckets=st.integers(min_value=1, max_value=60),
)
def test_every_bucket_keeps_its_min_and_max_and_the_count_is_bounded(
    values: list[float], gaps: list[int], buckets: int
) -> None:
    # GIVEN irregularly spaced samples (gaps up to 10 s, in nanoseconds)
    stamps: list[int] = []
    now = 1_700_000_000_000_000_000
    for gap in gaps[: len(values)]:
        now += gap
        stamps.append(now)
    frame = pl.DataFrame(
        {"ts": stamps, "series": ["s"] * len(values), "value": values},
        schema={"ts": pl.Int64, "series": pl.String, "value": pl.Float64},
    ).with_columns(pl.col("ts").cast(pl.Datetime("ns", "UTC")))
    # WHEN downsampled
    out = peak_preserving(frame, max_buckets=buckets)
    # THEN the output is a subset of the input rows, at most two per bucket...
    assert out.height <= max(2 * buckets, len(values))
    assert out.join(frame, on=["ts", "series", "value"], how="anti").height == 0
    # ...the global extremes survive...
    assert out["value"].max() == frame["value"].max()
    assert out["value"].min() == frame["value"].min()
    # ...and so does the min and max of every bucket of the frame's own time range
    if len(values) > 2 * buckets:
        low, high = stamps[0], stamps[-1]
        width = -(-(high - low + 1) // buckets)
        with_bucket = frame.with_columns(((pl.col("ts").cast(pl.Int64) - low) // width).alias("b"))
        expected = with_bucket.group_by("b").agg(
            pl.col("value").min().alias("lo"), pl.col("value").max().alias("hi")
        )
        got = out.with_columns(((pl.col("ts").cast(pl.Int64) - low) // width).alias("b"))
        got_extremes = got.group_by("b").agg(
            pl.col("value").min().alias("lo"), pl.col("value").max().alias("hi")
        )
        assert_frame_equal(expected.sort("b"), got_extremes.sort("b"))
