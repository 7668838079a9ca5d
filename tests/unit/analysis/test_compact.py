"""Series kept at full resolution inside windows and as bucket extremes elsewhere."""

from __future__ import annotations

from datetime import datetime

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from oomtrace.analysis.index import _compact, _compact_many
from oomtrace.schema import TS
from tests.factories import at


def _plain(
    frame: pl.DataFrame, windows: list[tuple[datetime, datetime]], buckets: int
) -> pl.DataFrame:
    """The compaction written plainly: a filter for the windows, a grouping per bucket."""
    if frame.height <= 2 * buckets:
        return frame
    inside = pl.lit(value=False)
    for start, end in windows:
        inside = inside | pl.col("ts").is_between(pl.lit(start, dtype=TS), pl.lit(end, dtype=TS))
    first, last = frame["ts"][0], frame["ts"][-1]
    width = max(int((last - first).total_seconds() * 1e9) // buckets, 1)
    offset = (pl.col("ts") - pl.lit(first, dtype=TS)).dt.total_nanoseconds()
    marked = frame.with_columns(_inside=inside)
    outside = (
        marked.filter(~pl.col("_inside") & pl.col("value").is_not_null())
        .group_by(offset // width)
        .agg(
            lo_ts=pl.col("ts").get(pl.col("value").arg_min()),
            lo=pl.col("value").min(),
            hi_ts=pl.col("ts").get(pl.col("value").arg_max()),
            hi=pl.col("value").max(),
        )
    )
    kept = [
        marked.filter(pl.col("_inside")).select("ts", "value"),
        outside.select(ts="lo_ts", value="lo"),
        outside.select(ts="hi_ts", value="hi"),
    ]
    return pl.concat(kept).unique(subset="ts", keep="any").sort("ts")


@st.composite
def series(draw: st.DrawFn) -> pl.DataFrame:
    times = sorted(set(draw(st.lists(st.integers(0, 500), max_size=80))))
    if not draw(st.booleans()):
        times = draw(st.permutations(times))
    values = [draw(st.none() | st.integers(0, 20).map(float)) for _ in times]
    return pl.DataFrame(
        {"ts": [at(t / 4) for t in times], "value": values},
        schema={"ts": TS, "value": pl.Float64},
    )


windows = st.lists(st.tuples(st.integers(-10, 130), st.integers(0, 40)), max_size=3).map(
    lambda ws: [(at(s), at(s + w)) for s, w in ws]
)


@settings(max_examples=80, deadline=None)
@given(frame=series(), spans=windows, buckets=st.integers(1, 12))
def test_compaction_equals_the_plain_definition(
    frame: pl.DataFrame, spans: list[tuple[datetime, datetime]], buckets: int
) -> None:
    assert_frame_equal(_compact(frame, spans, buckets), _plain(frame, spans, buckets))


@settings(max_examples=40, deadline=None)
@given(frame=series(), spans=windows, buckets=st.integers(1, 12))
def test_series_sharing_their_times_compact_as_each_alone(
    frame: pl.DataFrame, spans: list[tuple[datetime, datetime]], buckets: int
) -> None:
    # GIVEN two series on the same times, one of them without nulls
    both = frame.with_columns(dense=pl.col("value").fill_null(3.0) * 2)
    # WHEN compacted together, THEN each is what compacting it alone gives
    got = _compact_many(both, {"a": "value", "b": "dense"}, spans, buckets)
    assert_frame_equal(got["a"], _compact(frame, spans, buckets))
    alone = both.select("ts", value="dense")
    assert_frame_equal(got["b"], _compact(alone, spans, buckets))
