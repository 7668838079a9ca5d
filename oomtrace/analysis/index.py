"""Series kept apart: one small frame per series, and a catalog of what each one is.

A day at 100 Hz is tens of millions of sample rows; a long frame with a label per row, or a
window function over all of them, costs gigabytes. Here each series (one ``(node, source, device,
pid, metric)``) is its own frame of ``ts, value`` sorted by time, so that spikes, holes and
look-ups work on one series at a time, and the findings keep full resolution only inside
incident windows (:meth:`SeriesIndex.compact`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal

import polars as pl

from oomtrace.analysis.observed_series import SERIES_SCHEMA
from oomtrace.schema import TS

META: Final = ["series", "kind", "node", "source", "device", "pid", "metric", "unit"]
ANY_PID: Final = -1  # find(): any process (pids are positive)
HOLE_FACTOR: Final = 5.0
HOLE_MIN_S: Final = 1.0
_CATALOG: Final = pl.Schema(
    {
        "series": pl.String(),
        "kind": pl.String(),
        "node": pl.String(),
        "source": pl.String(),
        "device": pl.Int32(),
        "pid": pl.Int64(),
        "metric": pl.String(),
        "unit": pl.String(),
        "n": pl.Int64(),
    }
)


def search_ts(ts: pl.Series, when: datetime, side: Literal["left", "right"]) -> int:
    """Where ``when`` falls in a sorted nanosecond timestamp column, compared at the microsecond a
    Python datetime holds: a row within the same microsecond as ``when`` counts as at it (so
    ``side="right"`` keeps it). One binary search on the integers; searching with the datetime
    itself would first convert the whole column to microseconds (tens of milliseconds a call)."""
    at_ns = micros(when) * 1000
    target = at_ns if side == "left" else at_ns + 999
    return int(ts.to_physical().search_sorted(target, side=side))


_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND: Final = timedelta(microseconds=1)


def micros(when: datetime) -> int:
    """Microseconds since the epoch (a time without a zone is UTC, as Polars reads it): plain
    arithmetic, not a one-value Series (a leak check searches thousands of idle stretches)."""
    aware = when if when.tzinfo is not None else when.replace(tzinfo=UTC)
    return (aware - _EPOCH) // _MICROSECOND


def series_label(
    metric: str, source: str, device: int | None, pid: int | None, node: str | None = None
) -> str:
    """A readable series name: ``device_used_bytes gpu0 pid 41 (nvml)``, or with its node where
    the trace holds several (``... (nvml on node-b)``: two nodes' series may share the rest)."""
    where = (f" gpu{device}" if device is not None else "") + (f" pid {pid}" if pid else "")
    return f"{metric}{where} ({source}{f' on {node}' if node is not None else ''})"


@dataclass(frozen=True)
class Family:
    """Series of one node that share their times, computed together when read: ``frame()`` gives
    ``ts`` and one Float64 column per series (``columns``: series name to column)."""

    frame: Callable[[], pl.DataFrame]
    columns: dict[str, str]


class SeriesIndex:
    """Series by label, each a ``ts``-sorted frame (``ts, value`` and any extra columns)."""

    def __init__(self, parts: dict[str, pl.DataFrame], meta: dict[str, dict[str, Any]]) -> None:
        self._parts = parts
        self._families: dict[str, Family] = {}
        self._meta = meta
        self._descriptions: dict[str, list[pl.Expr]] = {}
        self._set_catalog({s: frame.height for s, frame in parts.items()})

    @classmethod
    def of_families(
        cls, families: list[Family], sizes: dict[str, int], meta: dict[str, dict[str, Any]]
    ) -> SeriesIndex:
        """Series computed each time they are read (``sizes``: their row counts), for long series
        derived from something already in memory, so that they are never all held at once."""
        index = cls({}, meta)
        index._families = {name: family for family in families for name in family.columns}
        index._set_catalog(sizes)
        return index

    def _set_catalog(self, sizes: dict[str, int]) -> None:
        rows = [{**self._meta[s], "series": s, "n": sizes[s]} for s in sorted(sizes)]
        self.catalog = pl.DataFrame(rows, schema=_CATALOG)
        self.empty = not sizes

    @classmethod
    def from_samples(
        cls, samples: pl.DataFrame, metrics: Iterable[str], *, unit: str, kind: str = "observed"
    ) -> SeriesIndex:
        """One series per ``(node, source, device, pid, metric)`` of ``metrics``."""
        from oomtrace.analysis.samples import memory_index, split_series  # noqa: PLC0415

        series = split_series(samples.lazy(), metrics)
        by_node = samples["node"].n_unique() > 1
        return memory_index(series, unit=unit, kind=kind, by_node=by_node)

    @classmethod
    def from_long(cls, frame: pl.DataFrame) -> SeriesIndex:
        """From a long frame with the :data:`META` columns, ``ts``, ``value`` and extras."""
        parts: dict[str, pl.DataFrame] = {}
        meta: dict[str, dict[str, Any]] = {}
        for (name,), part in frame.partition_by("series", as_dict=True).items():
            first = part.row(0, named=True)
            meta[str(name)] = {k: first[k] for k in META if k != "series"}
            parts[str(name)] = part.drop(META).sort("ts")
        return cls(parts, meta)

    def names(self) -> list[str]:
        return sorted([*self._parts, *self._families])

    def meta(self, series: str) -> dict[str, Any]:
        return {"series": series, **self._meta[series]}

    def find(
        self, metric: str, node: str, device: int | None = None, *, pid: int | None = ANY_PID
    ) -> str | None:
        """The best-sampled series of ``metric`` on ``node``, on ``device`` when given, of
        ``pid`` when given (``None`` asks for a series without a pid)."""
        if self.empty:
            return None
        condition = (pl.col("metric") == metric) & (pl.col("node") == node)
        if device is not None:
            condition &= pl.col("device") == device
        if pid != ANY_PID:
            condition &= pl.col("pid").eq_missing(pid)
        # A MIG instance's series (source qualifier "mig=GI") is a part of its device: at equal
        # sampling the device's own series is the one meant.
        part = pl.col("source").str.contains(r"[#,]mig=").fill_null(value=False)
        rows = self.catalog.filter(condition).sort(
            pl.col("n"), part, pl.col("series"), descending=[True, False, False]
        )
        return None if rows.is_empty() else str(rows["series"][0])

    def rows(self, series: str) -> pl.DataFrame:
        """The series' own frame (``ts, value`` and extras), sorted by time."""
        if series in self._families:
            family = self._families[series]
            return family.frame().select("ts", value=pl.col(family.columns[series]))
        return self._parts[series]

    def between(self, series: str, start: datetime, end: datetime) -> pl.DataFrame:
        """Rows with ``start <= ts <= end``, with the series' description as columns."""
        rows = self.rows(series)
        lo = search_ts(rows["ts"], start, "left")
        hi = search_ts(rows["ts"], end, "right")
        return rows.slice(lo, hi - lo).with_columns(self._described(series))

    def lowest_in(self, series: str, stretches: pl.DataFrame) -> pl.DataFrame:
        """The row holding the smallest value (the first, on ties) in each of ``stretches``
        (``start, end``, each bound taken as :meth:`between` takes it), in the stretches' order,
        with the series' description as columns; a stretch without rows gives none. In bulk:
        every stretch's rows found by one vectorised search, their minima by one grouping (a leak
        check asks for thousands of idle stretches; the cost grows with the rows they cover)."""
        rows = self.rows(series)
        ns = rows.get_column("ts").to_physical()
        us = 1000  # between() compares at the microsecond a Python datetime holds
        bounds = stretches.select(
            lo=pl.col("start").cast(TS).to_physical() // us * us,
            hi=pl.col("end").cast(TS).to_physical() // us * us + (us - 1),
        )
        spans = pl.DataFrame(
            {
                "stretch": pl.int_range(bounds.height, dtype=pl.UInt32, eager=True),
                "lo": ns.search_sorted(bounds.get_column("lo"), side="left"),
                "hi": ns.search_sorted(bounds.get_column("hi"), side="right"),
            }
        )
        covered = spans.filter(pl.col("hi") > pl.col("lo")).select(
            "stretch", row=pl.int_ranges("lo", "hi", dtype=pl.UInt32)
        )
        covered = covered.explode("row")
        covered = covered.with_columns(value=rows.get_column("value").gather(covered["row"]))
        lowest = (
            covered.group_by("stretch", maintain_order=True)
            .agg(pl.col("row").get(pl.col("value").arg_min().fill_null(0)))
            .get_column("row")
        )
        return rows[lowest].with_columns(self._described(series))

    def _described(self, series: str) -> list[pl.Expr]:
        """The series' description as literal columns, built once per series."""
        if series not in self._descriptions:
            self._descriptions[series] = [
                pl.lit(v, dtype=SERIES_SCHEMA[k]).alias(k) for k, v in self.meta(series).items()
            ]
        return self._descriptions[series]

    def at(self, series: str | None, ts: datetime, within: timedelta) -> dict[str, Any] | None:
        """The last row at or before ``ts``, if it is no older than ``within``."""
        if series is None:
            return None
        rows = self.between(series, ts - within, ts)
        return None if rows.is_empty() else rows.row(rows.height - 1, named=True)

    def value_at(self, series: str | None, ts: datetime, within: timedelta) -> float | None:
        row = self.at(series, ts, within)
        return None if row is None else float(row["value"])

    def max_between(
        self, series: str | None, start: datetime, end: datetime
    ) -> dict[str, Any] | None:
        """The row holding the largest value in ``[start, end]`` (the first, on ties)."""
        if series is None:
            return None
        rows = self.between(series, start, end)
        if rows.is_empty():
            return None
        return rows.row(int(rows["value"].arg_max() or 0), named=True)

    def long(self, series: Iterable[str] | None = None) -> pl.DataFrame:
        """The chosen series (all by default) as one long frame of :data:`SERIES_SCHEMA`."""
        frames = [
            self.rows(s)
            .select("ts", "value")
            .with_columns(
                pl.lit(v, dtype=SERIES_SCHEMA[k]).alias(k) for k, v in self.meta(s).items()
            )
            .select(SERIES_SCHEMA.names())
            for s in (self.names() if series is None else series)
        ]
        return pl.concat(frames) if frames else pl.DataFrame(schema=SERIES_SCHEMA)

    def compact(self, windows: list[tuple[str, datetime, datetime]], buckets: int) -> pl.DataFrame:
        """Every series as one long frame: full resolution inside ``windows`` (``node, start,
        end``) on the series' node, elsewhere the first minimum and maximum of each of
        ``buckets`` equal time buckets, so that no peak is lost."""
        frames = []
        done: dict[str, pl.DataFrame] = {}
        for name in self.names():
            meta = self.meta(name)
            mine = [(s, e) for node, s, e in windows if node == meta["node"]]
            if name in self._families and name not in done:  # the whole family in one pass
                family = self._families[name]
                done |= _compact_many(family.frame(), family.columns, mine, buckets)
            part = done.pop(name, None)
            if part is None:
                part = _compact(self.rows(name).select("ts", "value"), mine, buckets)
            frames.append(
                part.with_columns(
                    pl.lit(v, dtype=SERIES_SCHEMA[k]).alias(k) for k, v in meta.items()
                ).select(SERIES_SCHEMA.names())
            )
        return pl.concat(frames) if frames else pl.DataFrame(schema=SERIES_SCHEMA)

    def holes(self) -> pl.DataFrame:
        """Gaps far longer than a series' usual interval: more than ``HOLE_FACTOR`` times its
        median interval and at least ``HOLE_MIN_S``. Columns: ``series, source, start, end,
        seconds, usual_s``."""
        frames = []
        for name in self.names():
            ts = self.rows(name)["ts"]
            if ts.len() < 3:
                continue
            gaps = pl.DataFrame({"end": ts}).with_columns(start=pl.col("end").shift(1))
            gaps = gaps.with_columns(
                seconds=((pl.col("end") - pl.col("start")).dt.total_nanoseconds() / 1e9).round(6)
            )
            usual = float(gaps["seconds"].median() or 0.0)  # type: ignore[arg-type]
            frames.append(holes_of(gaps, name, self._meta[name]["source"], usual))
        return pl.concat(frames) if frames else pl.DataFrame(schema=HOLES)


_HOLE_COLUMNS: dict[str, Any] = {
    "series": pl.String,
    "source": pl.String,
    "start": TS,
    "end": TS,
    "seconds": pl.Float64,
    "usual_s": pl.Float64,
}
HOLES: Final = pl.Schema(_HOLE_COLUMNS)


def holes_of(gaps: pl.DataFrame, series: str, source: str, usual: float) -> pl.DataFrame:
    """The silences of ``gaps`` (``start, end, seconds``) long enough to be holes of a series
    usually sampled every ``usual`` seconds (see :meth:`SeriesIndex.holes`)."""
    found = gaps.filter(pl.col("seconds") > max(usual * HOLE_FACTOR, HOLE_MIN_S))
    return found.select(
        series=pl.lit(series),
        source=pl.lit(source),
        start="start",
        end="end",
        seconds="seconds",
        usual_s=pl.lit(usual),
    )


def _compact(
    frame: pl.DataFrame, windows: list[tuple[datetime, datetime]], buckets: int
) -> pl.DataFrame:
    return _compact_many(frame, {"value": "value"}, windows, buckets)["value"]


def _compact_many(
    frame: pl.DataFrame,
    columns: dict[str, str],
    windows: list[tuple[datetime, datetime]],
    buckets: int,
) -> dict[str, pl.DataFrame]:
    """:meth:`SeriesIndex.compact` of the series in ``columns`` (name to column of ``frame``),
    which share ``frame``'s times: one bucketing and one grouping for all of them."""
    if frame.height <= 2 * buckets:
        return {name: frame.select("ts", value=pl.col(c)) for name, c in columns.items()}
    first, last = frame["ts"][0], frame["ts"][-1]
    width_ns = max(int((last - first).total_seconds() * 1e9) // buckets, 1)
    offset_ns = (pl.col("ts") - pl.lit(first, dtype=TS)).dt.total_nanoseconds()
    bucket = offset_ns // width_ns
    # Series are in time order, so their buckets are too: the grouping then takes runs of rows
    # instead of hashing millions of keys, and the windows are runs of rows, cut out by slicing
    # instead of filtering (a filter would copy every column).
    in_order = frame["ts"].is_sorted()
    inside_rows, outside = _split_windows(frame, windows, in_order)
    outside = outside.with_columns(_bucket=bucket.set_sorted() if in_order else bucket)
    # Columns without nulls share one grouping; a column with nulls is grouped over its values.
    dense = [c for c in columns.values() if not frame[c].has_nulls()]
    picks = {c: _picks(outside, [c], in_order) for c in columns.values() if c not in dense}
    if dense:
        together = _picks(outside, dense, in_order)
        picks |= dict.fromkeys(dense, together)
    out = {}
    for name, column in columns.items():
        kept = [
            inside_rows.select("ts", value=pl.col(column)),
            picks[column].select(ts=f"lo_ts_{column}", value=f"lo_{column}"),
            picks[column].select(ts=f"hi_ts_{column}", value=f"hi_{column}"),
        ]
        out[name] = pl.concat(kept).unique(subset="ts", keep="any").sort("ts")
    return out


def _split_windows(
    frame: pl.DataFrame, windows: list[tuple[datetime, datetime]], in_order: bool
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The rows inside any window (``start <= ts <= end``) and the rows outside all of them."""
    if not in_order:
        inside = pl.lit(value=False)
        for start, end in windows:
            inside = inside | pl.col("ts").is_between(
                pl.lit(start, dtype=TS), pl.lit(end, dtype=TS)
            )
        marked = frame.with_columns(_inside=inside)
        return (
            marked.filter(pl.col("_inside")).drop("_inside"),
            marked.filter(~pl.col("_inside")).drop("_inside"),
        )
    ns = frame["ts"].to_physical()
    bounds = pl.Series([w for pair in windows for w in pair], dtype=TS).to_physical()
    lows = ns.search_sorted(bounds[0::2], side="left").to_list()
    highs = ns.search_sorted(bounds[1::2], side="right").to_list()
    runs: list[list[int]] = []  # windows as merged row ranges, in order
    for lo, hi in sorted(zip(lows, highs, strict=True)):
        if hi <= lo:
            continue
        if runs and lo <= runs[-1][1]:
            runs[-1][1] = max(runs[-1][1], hi)
        else:
            runs.append([lo, hi])
    cuts = [0, *[x for run in runs for x in run], frame.height]
    within = [frame.slice(lo, hi - lo) for lo, hi in runs]
    beyond = [frame.slice(lo, hi - lo) for lo, hi in zip(cuts[0::2], cuts[1::2], strict=True)]
    return pl.concat([frame.clear(), *within]), pl.concat([frame.clear(), *beyond])


def _picks(outside: pl.DataFrame, columns: list[str], in_order: bool) -> pl.DataFrame:
    """Per bucket, the first minimum and the first maximum of each column, with their times."""
    rows = outside
    if len(columns) == 1:
        rows = outside.filter(pl.col(columns[0]).is_not_null())
    aggs = []
    for c in columns:
        value = pl.col(c)
        aggs += [
            pl.col("ts").get(value.arg_min()).alias(f"lo_ts_{c}"),
            value.min().alias(f"lo_{c}"),
            pl.col("ts").get(value.arg_max()).alias(f"hi_ts_{c}"),
            value.max().alias(f"hi_{c}"),
        ]
    return rows.group_by("_bucket", maintain_order=in_order).agg(aggs)
