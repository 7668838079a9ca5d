"""The samples table of a long trace read in one streaming pass into time buckets, not whole.

The windowed analysis (:mod:`oomtrace.analysis.windowed`) first reads the memory series as
:meth:`~oomtrace.analysis.index.SeriesIndex.compact` would keep them: the first minimum and the
first maximum of every time bucket, with their times, so that no peak is lost; spikes are looked
for on those points, and only the incident windows are read again at full resolution. Each batch
of rows is coded by series (as :func:`oomtrace.analysis.samples.split_series` codes it), reduced
to its buckets' extremes and let go, so that memory holds a few thousand points per series,
however long the trace. The same pass counts the rows, the time span of each node, the metrics
and the sources, finds each series' holes (silences far longer than its usual interval, as
:meth:`~oomtrace.analysis.index.SeriesIndex.holes` finds them), and runs the value checks of
:func:`oomtrace.analysis.samples.read_samples`. Every other row (engine, KV and scheduler
metrics, about one a second) is kept whole, as :func:`~oomtrace.analysis.samples.read_samples`
keeps it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import polars as pl

from oomtrace.analysis.index import HOLE_FACTOR, HOLE_MIN_S, SeriesIndex
from oomtrace.analysis.observed_series import SERIES_KEYS
from oomtrace.analysis.samples import (
    CHUNK_ROWS,
    WHOLE_METRICS,
    Invalid,
    Numbering,
    SampleView,
    check_other,
    coded_batch,
    memory_index,
    numberings_of,
    series_key,
    spans_of,
)
from oomtrace.schema import SAMPLES, TS


class OutOfOrder(Exception):  # noqa: N818 - a signal, not an error a user sees
    """A series' rows are not in time order across batches: the caller reads it whole."""


@dataclass(frozen=True)
class Bucketed:
    """The samples as the windowed analysis reads them first: ``view`` (a
    :class:`~oomtrace.analysis.samples.SampleView` whose memory series hold only their buckets'
    extremes) and ``holes`` (as :meth:`SeriesIndex.holes` gives them, of the memory series)."""

    view: SampleView
    holes: pl.DataFrame


@dataclass
class _Series:
    """What the pass keeps of one series: its buckets' extremes, its ends, its intervals."""

    picks: list[pl.DataFrame] = field(default_factory=list)
    first: int | None = None  # nanoseconds
    last: int | None = None
    rows: int = 0
    gaps: list[pl.DataFrame] = field(default_factory=list)
    medians: list[tuple[float, int]] = field(default_factory=list)


def time_span(samples: pl.LazyFrame) -> tuple[datetime, datetime] | None:
    """The first and last sample time (read from the Parquet statistics where it can)."""
    ends = samples.select(lo=pl.col("ts").min(), hi=pl.col("ts").max()).collect()
    lo, hi = ends["lo"][0], ends["hi"][0]
    return None if lo is None or hi is None else (lo, hi)


def bucketed_samples(
    samples: pl.LazyFrame,
    memory_metrics: tuple[str, ...],
    invalid: Invalid,
    *,
    origin: datetime,
    width_ns: int,
    chunk_rows: int = CHUNK_ROWS // 4,
) -> Bucketed:
    """The pass of the module docstring: buckets of ``width_ns`` from ``origin``. Raises
    :class:`OutOfOrder` when a memory series is not in time order in the table."""
    wanted = list(memory_metrics)
    rows = samples.filter(pl.col("metric").is_in(wanted)).select("ts", "value", *SERIES_KEYS)
    numberings = numberings_of(samples.collect_schema())
    kept: dict[int, _Series] = {}
    bucket = ((pl.col("ts") - pl.lit(origin, dtype=TS)).dt.total_nanoseconds() // width_ns).alias(
        "_bucket"
    )
    for batch in rows.collect_batches(chunk_size=chunk_rows):
        _check_batch(batch, invalid)
        frame = coded_batch(batch, numberings)
        if frame is None:  # too many distinct keys to code: the single pass reads them exactly
            raise OutOfOrder
        parts = frame.partition_by("_code", as_dict=True, maintain_order=True, include_key=False)
        for (code,), part in parts.items():
            _add(kept.setdefault(int(code), _Series()), part, bucket)
    other = (
        samples.filter(~pl.col("metric").is_in(wanted) | pl.col("metric").is_null())
        .collect()
        .select(SAMPLES.names())
    )
    check_other(other, invalid)
    series = {series_key(numberings, code): _points(s) for code, s in kept.items()}
    series = dict(sorted(series.items(), key=lambda kv: _sort(kv[0])))
    index = memory_index(series, unit="bytes")
    ends = {
        series_key(numberings, code): (s.first, s.last)
        for code, s in kept.items()
        if s.first is not None and s.last is not None
    }
    view = SampleView(
        memory=index,
        other=other,
        rows=other.height + sum(s.rows for s in kept.values()),
        spans=spans_of(ends, other),
        metrics=frozenset([*other["metric"].unique().to_list(), *(k[4] for k in series)]),
        sources=frozenset([*other["source"].unique().to_list(), *(k[1] for k in series)]),
    )
    return Bucketed(view, _holes(kept, numberings, index))


def _check_batch(batch: pl.DataFrame, invalid: Invalid) -> None:
    """The checks :func:`~oomtrace.analysis.samples.read_samples` runs on a memory series."""
    nulls = batch.select(pl.any_horizontal(pl.col(c).is_null() for c in ("ts", "value", "node")))
    if nulls.to_series().any() or batch["source"].has_nulls():
        invalid()
    whole = pl.col("metric").is_in(WHOLE_METRICS) & (pl.col("value") != pl.col("value").round(0))
    if batch.select(whole.any()).item():
        invalid()


def _add(series: _Series, part: pl.DataFrame, bucket: pl.Expr) -> None:
    """One batch's rows of one series: their buckets' extremes, their intervals."""
    if not part["ts"].is_sorted():
        part = part.sort("ts", maintain_order=True)
    ns = part["ts"].to_physical()
    first, last = int(ns[0]), int(ns[-1])
    if series.last is not None and first < series.last:
        raise OutOfOrder
    value = pl.col("value")
    series.picks.append(
        part.with_columns(bucket)
        .group_by("_bucket", maintain_order=True)
        .agg(
            lo_ts=pl.col("ts").get(value.arg_min()),
            lo=value.min(),
            hi_ts=pl.col("ts").get(value.arg_max()),
            hi=value.max(),
        )
    )
    ts = part["ts"]
    if series.last is not None:  # the silence across the batches' seam counts too
        ts = pl.concat([pl.Series([series.last], dtype=pl.Int64).cast(TS), ts])
    gaps = pl.DataFrame({"end": ts}).select(
        start=pl.col("end").shift(1),
        end="end",
        seconds=((pl.col("end") - pl.col("end").shift(1)).dt.total_nanoseconds() / 1e9).round(6),
    )
    if gaps.height > 1:
        series.medians.append((float(gaps["seconds"].median() or 0.0), gaps.height - 1))  # type: ignore[arg-type]
    series.gaps.append(gaps.filter(pl.col("seconds") > HOLE_MIN_S))
    series.first = first if series.first is None else series.first
    series.last = last
    series.rows += part.height


def _points(series: _Series) -> pl.DataFrame:
    """A series' kept points: the first minimum and first maximum of each bucket (buckets that
    two batches share are merged: the smallest minimum, the earliest on ties)."""
    picks = pl.concat(series.picks)
    series.picks = []
    lows = picks.sort("_bucket", "lo", "lo_ts").group_by("_bucket", maintain_order=True).first()
    highs = (
        picks.sort(["_bucket", "hi", "hi_ts"], descending=[False, True, False])
        .group_by("_bucket", maintain_order=True)
        .first()
    )
    both = pl.concat([lows.select(ts="lo_ts", value="lo"), highs.select(ts="hi_ts", value="hi")])
    return both.unique(subset="ts", keep="first").sort("ts").with_columns(pl.col("ts").set_sorted())


def _holes(
    kept: dict[int, _Series], numberings: list[Numbering], index: SeriesIndex
) -> pl.DataFrame:
    """Silences of each series longer than :data:`HOLE_FACTOR` times its usual interval (the
    median of its batches' median intervals, weighted by their rows) and :data:`HOLE_MIN_S`."""
    frames = []
    labels = {tuple(index.meta(n)[k] for k in SERIES_KEYS): n for n in index.names()}
    for code, series in kept.items():
        if series.rows < 3 or not series.medians:
            continue
        usual = _weighted_median(series.medians)
        name = labels[series_key(numberings, code)]
        found = pl.concat(series.gaps).filter(
            pl.col("seconds") > max(usual * HOLE_FACTOR, HOLE_MIN_S)
        )
        frames.append(
            found.select(
                series=pl.lit(name),
                source=pl.lit(index.meta(name)["source"]),
                start="start",
                end="end",
                seconds="seconds",
                usual_s=pl.lit(usual),
            )
        )
    schema: dict[str, Any] = {
        "series": pl.String,
        "source": pl.String,
        "start": TS,
        "end": TS,
        "seconds": pl.Float64,
        "usual_s": pl.Float64,
    }
    return pl.concat(frames) if frames else pl.DataFrame(schema=schema)


def _weighted_median(medians: list[tuple[float, int]]) -> float:
    ordered = sorted(medians)
    half, seen = sum(n for _, n in ordered) / 2, 0
    for value, n in ordered:
        seen += n
        if seen >= half:
            return value
    return ordered[-1][0]


def _sort(key: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple((value is None, value) for value in key)
