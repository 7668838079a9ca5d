"""Peak-preserving downsampling for charts.

A day of 100 Hz memory samples is millions of points; a chart needs a few thousand. Averaging
per bucket would flatten exactly the short spike a report is about, so each time bucket keeps
its minimum and its maximum row, at their own timestamps: the envelope survives, every spike
stays where it happened, and the output is a subset of the input rows (nothing is invented).
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from oomtrace.errors import UsageError

DEFAULT_BUCKETS = 1000


def peak_preserving(
    frame: pl.DataFrame,
    *,
    max_buckets: int = DEFAULT_BUCKETS,
    ts: str = "ts",
    value: str = "value",
    by: Sequence[str] = ("series",),
) -> pl.DataFrame:
    """At most ``2 * max_buckets`` rows per group of ``by``: the row holding each time bucket's
    minimum ``value`` and the row holding its maximum (the earliest on ties).

    Buckets are equal slices of the whole frame's time range, shared by all groups, so series
    drawn together are cut at the same instants. Rows with a null ``value`` are dropped (a gap
    is drawn as a gap, not as zero). The result is sorted by ``by`` then ``ts``.
    """
    if max_buckets < 1:
        raise UsageError(f"max_buckets {max_buckets}: give at least one bucket")
    keys = list(by)
    data = frame.filter(pl.col(value).is_not_null() & pl.col(value).is_not_nan())
    if data.height <= 2 * max_buckets:
        return data.sort([*keys, ts], maintain_order=True)
    # Rows in time order, so that the first minimum of a bucket is the earliest one (a stable
    # sort by time alone; traces usually arrive sorted and skip it).
    if not data[ts].is_sorted():
        data = data.sort(ts, maintain_order=True)
    stamp = pl.col(ts).cast(pl.Int64) if data.schema[ts].is_temporal() else pl.col(ts)
    bounds = data.select(stamp.min().alias("lo"), stamp.max().alias("hi")).row(0)
    low, high = int(bounds[0]), int(bounds[1])
    # Integer bucket width (ceil), so a day in nanoseconds never overflows and the last sample
    # lands in the last bucket.
    width = max(1, -(-(high - low + 1) // max_buckets))
    # One integer per (group, bucket): grouping on it is several times faster than on strings.
    code = _group_code(data, keys)
    indexed = data.with_row_index("_row").with_columns(
        (code * (max_buckets + 1) + (stamp - low) // width).alias("_cell")
    )
    picks = indexed.group_by("_cell").agg(
        pl.col("_row").get(pl.col(value).arg_min()).alias("_low"),
        pl.col("_row").get(pl.col(value).arg_max()).alias("_high"),
    )
    keep = pl.concat([picks["_low"], picks["_high"]]).unique().sort()
    out = indexed.drop("_cell")[keep.to_list()].drop("_row")
    return out.sort([*keys, ts], maintain_order=True)


def _group_code(frame: pl.DataFrame, keys: list[str]) -> pl.Series:
    """A dense integer (0, 1, ...) per distinct combination of ``keys``: a binary search into
    the few distinct values, much cheaper than grouping on strings."""
    if not keys:
        return pl.Series("_code", [0] * frame.height, dtype=pl.Int64)
    if len(keys) == 1:
        column = frame[keys[0]]
    else:
        column = frame.select(
            pl.concat_str(
                [pl.col(k).cast(pl.String).fill_null("\x00") for k in keys], separator="\x1f"
            )
        ).to_series()
    distinct = column.unique().sort(nulls_last=True)
    return distinct.search_sorted(column).cast(pl.Int64)
