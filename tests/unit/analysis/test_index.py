"""Series look-ups: positions in a nanosecond column for a microsecond datetime."""

from __future__ import annotations

from datetime import timedelta

import polars as pl
from hypothesis import given
from hypothesis import strategies as st

from oomtrace.analysis.index import SeriesIndex, search_ts
from oomtrace.schema import TS
from tests.factories import T0, at, samples

T0_NS = int(pl.Series([T0], dtype=TS).to_physical()[0])


def ns_column(offsets: list[int]) -> pl.Series:
    return pl.Series([T0_NS + o for o in sorted(offsets)], dtype=pl.Int64).cast(TS)


@given(
    offsets=st.lists(st.integers(-5_000, 5_000), max_size=30),
    micros=st.integers(-6, 6),
    side=st.sampled_from(["left", "right"]),
)
def test_a_search_places_a_datetime_as_searching_with_the_datetime_itself_does(
    offsets: list[int], micros: int, side: str
) -> None:
    # GIVEN timestamps with nanoseconds a Python datetime cannot hold
    column = ns_column(offsets)
    when = T0 + timedelta(microseconds=micros)
    # WHEN searched on integers, THEN the position is the one the datetime search gives
    assert search_ts(column, when, side) == column.search_sorted(when, side=side)  # type: ignore[arg-type]


def test_rows_within_the_microsecond_of_the_end_are_between() -> None:
    # GIVEN a sample 999 ns after a whole second and one a microsecond later
    frame = samples(
        {"ts": at(0), "metric": "device_used_bytes", "value": 1.0},
        {"ts": at(1), "metric": "device_used_bytes", "value": 2.0},
    ).with_columns(pl.col("ts") + pl.Series([999, 1_000], dtype=pl.Duration("ns")))
    index = SeriesIndex.from_samples(frame, ["device_used_bytes"], unit="bytes")
    name = index.names()[0]
    # WHEN the rows up to t=0 are asked for, THEN the sample inside that microsecond is kept
    assert index.between(name, at(-1), at(0))["value"].to_list() == [1.0]
    assert index.between(name, at(0), at(1))["value"].to_list() == [1.0]


def test_at_equal_sampling_a_device_is_found_before_its_mig_instances() -> None:
    # GIVEN one nvidia-smi table: the GPU's own row and two MIG instances' rows (#mig= sources)
    frame = samples(
        {"ts": at(0), "metric": "device_used_bytes", "value": 1442.0, "source": "t#mig=1"},
        {"ts": at(0), "metric": "device_used_bytes", "value": 5728.0, "source": "t"},
        {"ts": at(0), "metric": "device_used_bytes", "value": 1513.0, "source": "t#pod=a,mig=5"},
    )
    index = SeriesIndex.from_samples(frame, ["device_used_bytes"], unit="bytes")
    # WHEN the device's series is looked up, THEN it is the GPU's, not an instance's
    found = index.find("device_used_bytes", "node-a", 0)
    assert found is not None
    assert index.rows(found)["value"].to_list() == [5728.0]


# Nanoseconds at the edges of a microsecond, where a bound taken as a datetime is tested.
EDGES = [-1_001, -1_000, -1, 0, 999, 1_000, 1_999, 2_000, 2_999, 3_000]


@given(
    offsets=st.lists(st.integers(-3_000, 3_000) | st.sampled_from(EDGES), min_size=1, max_size=40),
    values=st.lists(st.integers(0, 4), min_size=40, max_size=40),
    bounds=st.lists(st.tuples(st.integers(-4, 4), st.integers(0, 3)), max_size=8),
)
def test_the_lowest_row_of_each_stretch_is_the_one_each_between_gives(
    offsets: list[int], values: list[int], bounds: list[tuple[int, int]]
) -> None:
    # GIVEN a series with nanosecond times and repeated values (ties), and stretches with
    # microsecond bounds that may touch or overlap, bounds falling inside a microsecond's rows
    column = ns_column(offsets)
    frame = pl.DataFrame({"ts": column, "value": [float(v) for v in values[: column.len()]]})
    index = SeriesIndex({"s": frame}, {"s": {"kind": "observed", "node": "n", "metric": "m"}})
    stretches = [
        (T0 + timedelta(microseconds=start), T0 + timedelta(microseconds=start + length))
        for start, length in sorted(bounds)
    ]
    # WHEN the lowest rows are asked for in one call
    lowest = index.lowest_in(
        "s", pl.DataFrame(stretches, schema={"start": TS, "end": TS}, orient="row")
    )
    # THEN they are each stretch's first smallest row, as between() finds it, in order
    expected = []
    for start, end in stretches:
        rows = index.between("s", start, end)
        if rows.height:
            expected.append(rows.row(int(rows["value"].arg_min() or 0), named=True))
    assert lowest.to_dicts() == expected
