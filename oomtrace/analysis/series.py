"""Memory series out of the long ``samples`` table: what was observed, in bytes where possible.

Each series is one ``(node, source, device, pid, metric)``. Device and allocator series are bytes
already. Observed KV comes as blocks, tokens or a usage ratio; with a KV model it is turned into
bytes, else kept in its own unit. Holes (a sampling interval far above the series' usual one) are
data gaps, reported with the findings.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Final, Literal

import polars as pl

from oomtrace.analysis.kvmodel import KVModel
from oomtrace.schema import TS

SERIES_KEYS: Final = ["node", "source", "device", "pid", "metric"]
BYTES_METRICS: Final = (
    "device_used_bytes",
    "device_used_peak_bytes",
    "process_used_bytes",
    "process_used_peak_bytes",
    "torch_allocated_bytes",
    "torch_allocated_peak_bytes",
    "torch_reserved_bytes",
    "torch_reserved_peak_bytes",
)
# Observed KV in order of preference: blocks are exact, tokens nearly, the ratio is rounded.
KV_METRICS: Final = ("kv_blocks_used", "kv_tokens_used", "kv_usage_ratio")
HOLE_FACTOR: Final = 5.0
HOLE_MIN_S: Final = 1.0

Unit = Literal["bytes", "ratio", "blocks", "tokens", "count"]

_SERIES_COLUMNS: dict[str, Any] = {
    "series": pl.String,
    "kind": pl.String,
    "node": pl.String,
    "source": pl.String,
    "device": pl.Int32,
    "pid": pl.Int64,
    "metric": pl.String,
    "unit": pl.String,
    "ts": TS,
    "value": pl.Float64,
}
SERIES_SCHEMA: Final = pl.Schema(_SERIES_COLUMNS)

_KV_COLUMNS: dict[str, Any] = {
    **_SERIES_COLUMNS,
    "ratio": pl.Float64,
    "raw_metric": pl.String,
    "raw_value": pl.Float64,
}
KV_SCHEMA: Final = pl.Schema(_KV_COLUMNS)


def label(metric: pl.Expr) -> pl.Expr:
    """A readable series name: ``device_used_bytes gpu0 pid 41 (nvml)``."""
    device = pl.when(pl.col("device").is_not_null()).then(
        pl.lit(" gpu") + pl.col("device").cast(pl.String)
    )
    pid = pl.when(pl.col("pid").is_not_null()).then(pl.lit(" pid ") + pl.col("pid").cast(pl.String))
    return pl.concat_str(
        metric,
        device.fill_null(""),
        pid.fill_null(""),
        pl.lit(" ("),
        pl.col("source"),
        pl.lit(")"),
    )


def memory_series(samples: pl.DataFrame) -> pl.DataFrame:
    """Observed byte series in the long :data:`SERIES_SCHEMA` form, sorted by series and time."""
    rows = samples.filter(pl.col("metric").is_in(BYTES_METRICS))
    return rows.select(
        series=label(pl.col("metric")),
        kind=pl.lit("observed"),
        node="node",
        source="source",
        device="device",
        pid="pid",
        metric="metric",
        unit=pl.lit("bytes"),
        ts="ts",
        value="value",
    ).sort("series", "ts")


ENGINE_METRICS: Final = (
    "requests_running",
    "requests_waiting",
    "requests_swapped",
    "preemptions_total",
    "preemptions_in_interval",
)


def engine_series(samples: pl.DataFrame) -> pl.DataFrame:
    """Scheduler series (running, waiting, preemptions) in the long series form."""
    rows = samples.filter(pl.col("metric").is_in(ENGINE_METRICS))
    return rows.select(
        series=label(pl.col("metric")),
        kind=pl.lit("observed"),
        node="node",
        source="source",
        device="device",
        pid="pid",
        metric="metric",
        unit=pl.lit("count"),
        ts="ts",
        value="value",
    ).sort("series", "ts")


def observed_kv(samples: pl.DataFrame, kv: KVModel) -> pl.DataFrame:
    """Observed KV in use per node, from the best metric each node has, in bytes when the KV
    model allows (blocks x bytes per block, tokens x bytes per token, ratio x pool bytes).

    Columns: :data:`KV_SCHEMA`: the series form (metric ``kv_used``) plus ``ratio`` (share of the
    pool, when the pool is known) and the sample it came from (``raw_metric``, ``raw_value``)."""
    rows = samples.filter(pl.col("metric").is_in(KV_METRICS))
    if rows.is_empty():
        return pl.DataFrame(schema=KV_SCHEMA)
    preference = pl.col("metric").replace_strict(
        {m: i for i, m in enumerate(KV_METRICS)}, return_dtype=pl.Int8
    )
    best = rows.with_columns(rank=preference).filter(
        pl.col("rank") == pl.col("rank").min().over("node")
    )
    value = pl.col("value")
    pool = {
        "kv_blocks_used": float(kv.pool_blocks) if kv.pool_blocks else None,
        "kv_tokens_used": float(kv.pool_tokens) if kv.pool_tokens else None,
        "kv_usage_ratio": 1.0,
    }
    per_unit = {
        "kv_blocks_used": float(kv.bytes_per_block) if kv.bytes_per_block else None,
        "kv_tokens_used": kv.bytes_per_token,
        "kv_usage_ratio": float(kv.pool_bytes) if kv.pool_bytes else None,
    }
    ratio = value / pl.col("metric").replace_strict(pool, return_dtype=pl.Float64, default=None)
    in_bytes = value * pl.col("metric").replace_strict(
        per_unit, return_dtype=pl.Float64, default=None
    )
    native = pl.col("metric").replace_strict(
        {"kv_blocks_used": "blocks", "kv_tokens_used": "tokens", "kv_usage_ratio": "ratio"},
        return_dtype=pl.String,
    )
    has_bytes = kv.has_bytes and per_unit[best["metric"][0]] is not None
    return best.select(
        series=pl.lit("kv_used from ") + label(pl.col("metric")),
        kind=pl.lit("observed"),
        node="node",
        source="source",
        device="device",
        pid="pid",
        metric=pl.lit("kv_used"),
        unit=pl.lit("bytes") if has_bytes else native,
        ts="ts",
        value=in_bytes.round(0) if has_bytes else value,
        ratio=ratio,
        raw_metric="metric",
        raw_value="value",
    ).sort("series", "ts")


def capacities(samples: pl.DataFrame, events: pl.DataFrame) -> pl.DataFrame:
    """Installed device memory per ``(node, device)``: the largest total any source stated."""
    stated = samples.filter(pl.col("metric") == "device_total_bytes").select(
        "node", "device", total=pl.col("value")
    )
    from_events = events.filter(pl.col("total_bytes").is_not_null()).select(
        "node", "device", total=pl.col("total_bytes").cast(pl.Float64)
    )
    both = pl.concat([stated, from_events])
    return both.group_by("node", "device").agg(capacity_bytes=pl.col("total").max().cast(pl.Int64))


def holes(samples: pl.DataFrame) -> pl.DataFrame:
    """Intervals in which a sampled series went quiet for far longer than usual.

    A hole is a gap of more than ``HOLE_FACTOR`` times the series' median interval and at least
    ``HOLE_MIN_S`` seconds. Columns: series keys, ``start``, ``end``, ``seconds``, ``usual_s``.
    """
    if samples.is_empty():
        return pl.DataFrame(
            schema={
                **{k: samples.schema[k] for k in SERIES_KEYS},
                "start": TS,
                "end": TS,
                "seconds": pl.Float64,
                "usual_s": pl.Float64,
            }
        )
    gaps = (
        samples.select(*SERIES_KEYS, "ts")
        .unique()
        .sort(*SERIES_KEYS, "ts", nulls_last=True)
        .with_columns(start=pl.col("ts").shift(1).over(SERIES_KEYS))
        .with_columns(
            seconds=((pl.col("ts") - pl.col("start")).dt.total_nanoseconds() / 1e9).round(6)
        )
    )
    gaps = gaps.with_columns(usual_s=pl.col("seconds").median().over(SERIES_KEYS))
    limit = pl.max_horizontal(pl.col("usual_s") * HOLE_FACTOR, pl.lit(HOLE_MIN_S))
    return (
        gaps.filter(pl.col("seconds") > limit)
        .select(*SERIES_KEYS, "start", end=pl.col("ts"), seconds="seconds", usual_s="usual_s")
        .sort("start", *SERIES_KEYS, nulls_last=True)
    )


def downsample(series: pl.DataFrame, buckets: int) -> pl.DataFrame:
    """At most ``2 x buckets`` points per series: the first minimum and first maximum of each
    equal-time bucket, so that no peak is averaged away. Deterministic."""
    if series.is_empty():
        return series
    keys = ["series", "kind", "node", "source", "device", "pid", "metric", "unit"]
    span = pl.col("ts").max().over("series") - pl.col("ts").min().over("series")
    offset = pl.col("ts") - pl.col("ts").min().over("series")
    width = (span.dt.total_nanoseconds() // buckets + 1).cast(pl.Int64)
    bucketed = series.filter(pl.col("value").is_not_null()).with_columns(
        bucket=offset.dt.total_nanoseconds() // width
    )
    picks = bucketed.group_by(*keys, "bucket").agg(
        ts_lo=pl.col("ts").get(pl.col("value").arg_min()),
        v_lo=pl.col("value").min(),
        ts_hi=pl.col("ts").get(pl.col("value").arg_max()),
        v_hi=pl.col("value").max(),
    )
    points = pl.concat(
        [
            picks.select(*keys, ts=pl.col(f"ts_{end}"), value=pl.col(f"v_{end}"))
            for end in ("lo", "hi")
        ]
    )
    return points.unique().sort("series", "ts", "value").select(series.columns)


ANY_PID: Final = -1  # find(): any process (pids are positive)


class SeriesIndex:
    """Fast look-ups in a long series frame: the frame is sorted once and each series is a
    zero-copy slice, so a value as of an instant is a binary search, not a scan."""

    def __init__(self, series: pl.DataFrame) -> None:
        self.frame = series.sort("series", "ts")
        self.empty = series.is_empty()
        spans = (
            self.frame.with_row_index("_i")
            .group_by("series", "kind", "node", "source", "device", "pid", "metric", "unit")
            .agg(first=pl.col("_i").min(), n=pl.len())
            .sort("series")
        )
        self.catalog = spans
        self._spans = {
            r["series"]: (int(r["first"]), int(r["n"])) for r in spans.iter_rows(named=True)
        }

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
        rows = self.catalog.filter(condition).sort("n", "series", descending=[True, False])
        return None if rows.is_empty() else str(rows["series"][0])

    def rows(self, series: str) -> pl.DataFrame:
        first, n = self._spans[series]
        return self.frame.slice(first, n)

    def between(self, series: str, start: datetime, end: datetime) -> pl.DataFrame:
        """Rows with ``start <= ts <= end``."""
        rows = self.rows(series)
        lo = int(rows["ts"].search_sorted(start, side="left"))
        hi = int(rows["ts"].search_sorted(end, side="right"))
        return rows.slice(lo, hi - lo)

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
