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
from typing import Any, Final

import polars as pl

from oomtrace.analysis.index import HOLE_MIN_S, HOLES, SeriesIndex, holes_of
from oomtrace.analysis.observed_series import SERIES_KEYS
from oomtrace.analysis.samples import (
    CHUNK_ROWS,
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
    """What the pass keeps of one series: its ends and rows, its batches' median intervals."""

    first: int  # nanoseconds
    last: int
    rows: int = 0
    medians: list[tuple[float, int]] = field(default_factory=list)


@dataclass
class _Kept:
    """What the pass keeps of all series: each one's ends, and every batch's buckets' extremes
    and silences (``_code`` telling the series apart)."""

    series: dict[int, _Series] = field(default_factory=dict)
    picks: list[pl.DataFrame] = field(default_factory=list)
    gaps: list[pl.DataFrame] = field(default_factory=list)


def bucketed_samples(
    samples: pl.LazyFrame,
    memory_metrics: tuple[str, ...],
    invalid: Invalid,
    *,
    width_ns: int,
    chunk_rows: int = CHUNK_ROWS // 4,
) -> Bucketed:
    """The pass of the module docstring: buckets of ``width_ns`` counted from the epoch (no
    first pass to find where the trace starts). Raises
    :class:`OutOfOrder` when a memory series is not in time order in the table."""
    wanted = list(memory_metrics)
    rows = samples.filter(pl.col("metric").is_in(wanted)).select("ts", "value", *SERIES_KEYS)
    numberings = numberings_of(samples.collect_schema())
    kept = _Kept()
    bucket = (pl.col("ts").to_physical() // width_ns).alias("_bucket")
    for batch in rows.collect_batches(chunk_size=chunk_rows):
        _check_batch(batch, invalid)
        frame = coded_batch(batch, numberings)
        if frame is None:  # too many distinct keys to code: the single pass reads them exactly
            raise OutOfOrder
        _add(kept, frame, bucket)
    other = (
        samples.filter(~pl.col("metric").is_in(wanted) | pl.col("metric").is_null())
        .collect()
        .select(SAMPLES.names())
    )
    check_other(other, invalid)
    points = _points(kept.picks)
    series = {series_key(numberings, code): points.get(code, _NONE) for code in kept.series}
    series = dict(sorted(series.items(), key=lambda kv: _sort(kv[0])))
    ends = {series_key(numberings, code): (s.first, s.last) for code, s in kept.series.items()}
    spans = spans_of(ends, other)
    index = memory_index(series, unit="bytes", by_node=spans.height > 1)
    view = SampleView(
        memory=index,
        other=other,
        rows=other.height + sum(s.rows for s in kept.series.values()),
        spans=spans,
        metrics=frozenset([*other["metric"].unique().to_list(), *(k[4] for k in series)]),
        sources=frozenset([*other["source"].unique().to_list(), *(k[1] for k in series)]),
    )
    return Bucketed(view, _holes(kept, numberings, index))


def _check_batch(batch: pl.DataFrame, invalid: Invalid) -> None:
    """The checks :func:`~oomtrace.analysis.samples.read_samples` runs on a memory series (all
    of them in bytes: whole numbers)."""
    if any(batch[c].has_nulls() for c in ("ts", "value", "node", "source")):
        invalid()
    if batch.select((pl.col("value") != pl.col("value").round(0)).any()).item():
        invalid()


_NS: Final = pl.col("ts").to_physical()
_GAPS_COLUMNS: dict[str, Any] = {"start": TS, "end": TS, "seconds": pl.Float64, "_code": pl.UInt64}
_GAPS: Final = pl.Schema(_GAPS_COLUMNS)
_NONE: Final = pl.DataFrame(schema={"ts": TS, "value": pl.Float64})


def _add(kept: _Kept, frame: pl.DataFrame, bucket: pl.Expr) -> None:
    """One batch (``ts, value, _code``): its buckets' extremes and its silences, per series. A
    table written series by series (as a day's often is) has one series a batch: not split."""
    codes = frame["_code"]
    if codes.min() == codes.max():
        _add_series(kept, int(codes[0]), frame.drop("_code"), bucket)
        return
    parts = frame.partition_by("_code", as_dict=True, maintain_order=True, include_key=False)
    for (code,), part in parts.items():
        _add_series(kept, int(code), part, bucket)


def _add_series(kept: _Kept, code: int, part: pl.DataFrame, bucket: pl.Expr) -> None:
    """Raises :class:`OutOfOrder` when the series' rows go back in time across batches."""
    if not part["ts"].is_sorted():
        part = part.sort("ts", maintain_order=True)
    ns = part["ts"].to_physical()
    first, last = int(ns[0]), int(ns[-1])
    known = kept.series.get(code)
    if known is not None and first < known.last:
        raise OutOfOrder
    seam = None if known is None else known.last
    if known is None:
        known = kept.series[code] = _Series(first, last)
    known.last, known.rows = last, known.rows + part.height
    value = pl.col("value")
    # the buckets of rows in time order are runs: grouped without hashing
    kept.picks.append(
        part.with_columns(bucket.set_sorted())
        .group_by("_bucket", maintain_order=True)
        .agg(
            lo_ts=pl.col("ts").get(value.arg_min()),
            lo=value.min(),
            hi_ts=pl.col("ts").get(value.arg_max()),
            hi=value.max(),
        )
        .with_columns(_code=pl.lit(code, pl.UInt64))
    )
    # the silence across the batches' seam counts too: the batch's first row follows the last
    previous = _NS.shift(1, fill_value=seam)
    seconds = ((_NS - previous) / 1e9).round(6)
    summary = part.select(
        median=seconds.median(), n=seconds.count(), silent=(seconds > HOLE_MIN_S).any()
    ).row(0)
    if summary[1]:
        known.medians.append((float(summary[0]), int(summary[1])))
    if summary[2]:
        gaps = part.select(start=previous.cast(TS), end="ts", seconds=seconds)
        kept.gaps.append(
            gaps.filter(pl.col("seconds") > HOLE_MIN_S).with_columns(_code=pl.lit(code, pl.UInt64))
        )


def _points(picks: list[pl.DataFrame]) -> dict[int, pl.DataFrame]:
    """Each series' kept points: the first minimum and first maximum of each bucket (buckets
    that two batches share are merged: the smallest minimum, the earliest on ties)."""
    if not picks:
        return {}
    every = pl.concat(picks)
    picks.clear()
    key = ["_code", "_bucket"]
    lows = every.sort(*key, "lo", "lo_ts").group_by(key, maintain_order=True).first()
    highs = (
        every.sort([*key, "hi", "hi_ts"], descending=[False, False, True, False])
        .group_by(key, maintain_order=True)
        .first()
    )
    both = pl.concat(
        [
            lows.select("_code", ts="lo_ts", value="lo"),
            highs.select("_code", ts="hi_ts", value="hi"),
        ]
    )
    both = both.unique(subset=["_code", "ts"], keep="first").sort("_code", "ts")
    return {
        int(code): part.with_columns(pl.col("ts").set_sorted())
        for (code,), part in both.partition_by("_code", as_dict=True, include_key=False).items()
    }


def _holes(kept: _Kept, numberings: list[Numbering], index: SeriesIndex) -> pl.DataFrame:
    """Each series' holes, as :meth:`SeriesIndex.holes` finds them, its usual interval the
    median of its batches' median intervals (weighted by their rows)."""
    frames = []
    labels = {tuple(index.meta(n)[k] for k in SERIES_KEYS): n for n in index.names()}
    gaps = pl.concat(kept.gaps) if kept.gaps else pl.DataFrame(schema=_GAPS)
    kept.gaps.clear()
    for code, series in kept.series.items():
        if series.rows < 3 or not series.medians:
            continue
        usual = _weighted_median(series.medians)
        name = labels.get(series_key(numberings, code))
        if name is None:  # its label taken by another node's series (memory_index keeps one)
            continue
        mine = gaps.filter(pl.col("_code") == code)
        frames.append(holes_of(mine, name, index.meta(name)["source"], usual))
    return pl.concat(frames) if frames else pl.DataFrame(schema=HOLES)


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
