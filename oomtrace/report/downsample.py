"""Peak-preserving downsampling for charts.

A day of 100 Hz memory samples is millions of points; a chart needs a few thousand. Averaging
per bucket would flatten exactly the short spike a report is about, so each time bucket keeps
its minimum and its maximum row, at their own timestamps: the envelope survives, every spike
stays where it happened, and the output is a subset of the input rows (nothing is invented).

The reduction is one grouped aggregation, so it runs on a lazy scan of a trace directory as
well as on a frame in memory: a day of samples is reduced while it is read, never held whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Literal

import polars as pl

from oomtrace.errors import UsageError
from oomtrace.report.span import epoch_ns

DEFAULT_BUCKETS = 1000
# Frames at most this long are reduced by the in-memory engine; longer ones and scans stream, in
# bounded memory. Either way a tie keeps its earliest row.
IN_MEMORY_ROWS = 2_000_000


def peak_preserving(
    frame: pl.DataFrame | pl.LazyFrame,
    *,
    max_buckets: int = DEFAULT_BUCKETS,
    ts: str = "ts",
    value: str = "value",
    by: Sequence[str] = ("series",),
    bounds: tuple[datetime, datetime] | None = None,
) -> pl.DataFrame:
    """At most ``2 * max_buckets`` rows per group of ``by``: the row holding each time bucket's
    minimum ``value`` and the row holding its maximum (the earliest on ties), with the columns
    ``by``, ``ts`` and ``value``.

    Buckets are equal slices of ``bounds`` (default: the frame's own time range), shared by all
    groups, so series drawn together are cut at the same instants. Rows with a null or NaN
    ``value`` are dropped (a gap is drawn as a gap, not as zero). The result is sorted by ``by``
    then ``ts``.
    """
    points, _ = reduce_counted(
        frame, max_buckets=max_buckets, ts=ts, value=value, by=by, bounds=bounds
    )
    return points


def reduce_counted(
    frame: pl.DataFrame | pl.LazyFrame,
    *,
    max_buckets: int = DEFAULT_BUCKETS,
    ts: str = "ts",
    value: str = "value",
    by: Sequence[str] = ("series",),
    bounds: tuple[datetime, datetime] | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """:func:`peak_preserving`, and how many rows each group of ``by`` had (``by``, ``read``):
    a chart says how many samples its points were drawn from."""
    if max_buckets < 1:
        raise UsageError(f"max_buckets {max_buckets}: give at least one bucket")
    keys = list(by)
    wanted = {*keys, ts, value}
    columns = [c for c in frame.lazy().collect_schema().names() if c in wanted]
    lazy = frame.lazy().select(columns)
    lazy = lazy.filter(pl.col(value).is_not_null() & pl.col(value).is_not_nan())
    if bounds is not None:
        lazy = lazy.filter(pl.col(ts).is_between(bounds[0], bounds[1]))
    small = isinstance(frame, pl.DataFrame) and frame.height <= IN_MEMORY_ROWS
    if isinstance(frame, pl.DataFrame) and frame.height <= 2 * max_buckets:
        whole = lazy.sort([*keys, ts], maintain_order=True).collect()
        return whole, whole.group_by(keys, maintain_order=True).agg(pl.len().alias("read"))
    stamp = pl.col(ts).cast(pl.Int64)
    if bounds is None:
        found = lazy.select(stamp.min().alias("lo"), stamp.max().alias("hi")).collect().row(0)
        low, high = (0, 0) if found[0] is None else (int(found[0]), int(found[1]))
    else:
        low, high = epoch_ns(bounds[0]), epoch_ns(bounds[1])
    # Integer bucket width (ceil), so a day in nanoseconds never overflows and the last sample
    # lands in the last bucket.
    width = max(1, -(-(high - low + 1) // max_buckets))
    cells = lazy.with_columns(((stamp - low) // width).alias("_bucket"))
    engine: Literal["in-memory", "streaming"] = "in-memory" if small else "streaming"
    group = [*keys, "_bucket"]
    extremes = (
        cells.group_by(group)
        .agg(
            pl.col(value).min().alias("_low"),
            pl.col(value).max().alias("_high"),
            pl.len().alias("_read"),
        )
        .collect(engine=engine)
    )
    # Each extreme's earliest row, whatever order the rows arrive in: min_by keeps any one of
    # tied rows (a report then changed from one run to the next), and an aggregation that
    # filters inside a group does not stream (a whole day was held). A second pass joins each
    # row to its bucket's extremes and keeps the earliest time at each.
    picks = (
        cells.join(extremes.lazy(), on=group, nulls_equal=True)
        .select(
            *group,
            pl.when(pl.col(value) == pl.col("_low")).then(pl.col(ts)).alias("_low_ts"),
            pl.when(pl.col(value) == pl.col("_high")).then(pl.col(ts)).alias("_high_ts"),
        )
        .group_by(group)
        .agg(pl.col("_low_ts").min(), pl.col("_high_ts").min())
        .collect(engine=engine)
        .join(extremes, on=group, nulls_equal=True)
    )
    points = pl.concat(
        [
            picks.select(*keys, pl.col(f"_{end}_ts").alias(ts), pl.col(f"_{end}").alias(value))
            for end in ("low", "high")
        ]
    )
    reduced = points.unique().sort([*keys, ts, value]).select(columns)
    read = picks.group_by(keys).agg(pl.col("_read").sum().cast(pl.UInt32).alias("read"))
    return reduced, read.sort(keys, nulls_last=True)
