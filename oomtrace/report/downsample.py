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
    data = data.sort([*keys, ts], maintain_order=True)
    if data.height <= 2 * max_buckets:
        return data
    stamp = pl.col(ts).cast(pl.Int64) if data.schema[ts].is_temporal() else pl.col(ts)
    bounds = data.select(stamp.min().alias("lo"), stamp.max().alias("hi")).row(0)
    low, high = int(bounds[0]), int(bounds[1])
    # Integer bucket width (ceil), so a day in nanoseconds never overflows and the last sample
    # lands in the last bucket.
    width = max(1, -(-(high - low + 1) // max_buckets))
    indexed = data.with_row_index("_row").with_columns(((stamp - low) // width).alias("_bucket"))
    picks = indexed.group_by([*keys, "_bucket"]).agg(
        pl.col("_row").get(pl.col(value).arg_min()).alias("_low"),
        pl.col("_row").get(pl.col(value).arg_max()).alias("_high"),
    )
    keep = pl.concat([picks["_low"], picks["_high"]]).unique()
    return indexed.filter(pl.col("_row").is_in(keep.implode())).drop("_row", "_bucket")
