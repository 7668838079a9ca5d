"""Series out of the long ``samples`` table: what was observed, in bytes where possible.

Each series is one ``(node, source, device, pid, metric)``. Device and allocator series are bytes
already (they are kept apart per series by :class:`oomtrace.analysis.index.SeriesIndex`).
Observed KV comes as blocks, tokens or a usage ratio; with a KV model it is turned into bytes,
else kept in its own unit. Scheduler series are counts.
"""

from __future__ import annotations

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


def label(metric: pl.Expr, *, by_node: bool = False) -> pl.Expr:
    """A readable series name: ``device_used_bytes gpu0 pid 41 (nvml)``, with ``on NODE`` after
    the source where the trace holds several nodes (as
    :func:`oomtrace.analysis.index.series_label`)."""
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
        pl.lit(" on ") + pl.col("node") if by_node else pl.lit(""),
        pl.lit(")"),
    )


ENGINE_METRICS: Final = (
    "requests_running",
    "requests_waiting",
    "requests_swapped",
    "preemptions_total",
    "preemptions_in_interval",
)


def engine_series(samples: pl.DataFrame, *, by_node: bool = False) -> pl.DataFrame:
    """Scheduler series (running, waiting, preemptions) in the long series form (``by_node``:
    labels name their node, see :func:`label`)."""
    rows = samples.filter(pl.col("metric").is_in(ENGINE_METRICS))
    return rows.select(
        series=label(pl.col("metric"), by_node=by_node),
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


def observed_kv(samples: pl.DataFrame, kv: KVModel, *, by_node: bool = False) -> pl.DataFrame:
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
        series=pl.lit("kv_used from ") + label(pl.col("metric"), by_node=by_node),
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
