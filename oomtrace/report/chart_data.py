"""Display frames for the charts, read from the canonical trace and the analysis' series.

Memory and scheduler series come straight from the ``samples`` table (what was observed);
modelled series (modelled KV, observed KV in bytes) come from the analysis. All are long
frames ``ts, series, value`` reduced with :func:`~oomtrace.report.downsample.peak_preserving`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

import polars as pl

from oomtrace.report.downsample import peak_preserving
from oomtrace.schema import TS

MEMORY_METRICS: Final[dict[str, str]] = {
    "device_total_bytes": "device total",
    "device_used_bytes": "device used (NVML)",
    "device_used_peak_bytes": "device used peak",
    "torch_reserved_bytes": "allocator reserved",
    "torch_allocated_bytes": "allocator allocated",
    "torch_reserved_peak_bytes": "allocator reserved peak",
    "torch_allocated_peak_bytes": "allocator allocated peak",
}
ACTIVITY_METRICS: Final[dict[str, str]] = {
    "requests_running": "requests running",
    "requests_waiting": "requests waiting",
    "requests_swapped": "requests preempted",
}
MARKER_KINDS: Final = (
    "oom",
    "engine_dead",
    "startup_kv_insufficient",
    "startup_no_kv_memory",
    "xid",
)
SERIES_SCHEMA: Final = pl.Schema({"ts": TS, "series": pl.String(), "value": pl.Float64()})
MARKER_SCHEMA: Final = pl.Schema(
    {"ts": TS, "kind": pl.String(), "label": pl.String(), "detail": pl.String()}
)


PICKED: Final = (*MEMORY_METRICS, "process_used_bytes", *ACTIVITY_METRICS)


def pick_samples(samples: pl.DataFrame) -> pl.DataFrame:
    """The samples the charts draw, in one pass over the table: ``ts, code, device, pid,
    value`` with ``code`` the metric's index in :data:`PICKED`, so that every later selection
    compares integers instead of strings (a day of 100 Hz samples is millions of rows)."""
    return (
        samples.lazy()
        .filter(pl.col("metric").is_in(PICKED))
        .select(
            "ts",
            pl.col("metric").cast(pl.Enum(PICKED)).to_physical().cast(pl.Int64).alias("code"),
            "device",
            "pid",
            "value",
        )
        .collect()
    )


def _reduce(picked: pl.DataFrame, metrics: list[str], buckets: int) -> tuple[pl.DataFrame, int]:
    """Downsample the rows of ``metrics``, one series per metric, GPU and process, then label
    the (small) result: ``ts, series, value``."""
    codes = [PICKED.index(m) for m in metrics]
    rows = picked.filter(pl.col("code").is_in(codes))
    if rows.is_empty():
        return pl.DataFrame(schema=SERIES_SCHEMA), 0
    key = (
        pl.col("code") * (1 << 40)
        + (pl.col("device").cast(pl.Int64).fill_null(-1) + 1) * (1 << 24)
        + (pl.col("pid").fill_null(-1) + 1)
    )
    reduced = peak_preserving(
        rows.with_columns(key.alias("_key")), max_buckets=buckets, by=("_key",)
    )
    names = {
        i: MEMORY_METRICS.get(m) or ACTIVITY_METRICS.get(m) or "pid" for i, m in enumerate(PICKED)
    }
    label = pl.col("code").replace_strict(names, return_dtype=pl.String)
    label = (
        pl.when(pl.col("code") == PICKED.index("process_used_bytes"))
        .then(pl.format("pid {}", pl.col("pid").fill_null(-1)))
        .otherwise(label)
    )
    if reduced["device"].drop_nulls().n_unique() > 1:
        label = pl.format("GPU {} ", pl.col("device").fill_null(-1)) + label
    return reduced.select("ts", label.alias("series"), "value").cast(SERIES_SCHEMA), rows.height


def memory_series(
    picked: pl.DataFrame, modelled: pl.DataFrame | None, *, buckets: int
) -> tuple[pl.DataFrame, int]:
    """Memory series for display and how many samples they were drawn from.

    Per-process memory (``process_used_bytes``) is one series per pid, because another
    process's memory is exactly what tells foreign memory apart."""
    observed, read = _reduce(picked, [*MEMORY_METRICS, "process_used_bytes"], buckets)
    if modelled is None or modelled.is_empty():
        return observed, read
    extra = peak_preserving(
        modelled.select("ts", "series", pl.col("value").cast(pl.Float64)).cast(SERIES_SCHEMA),
        max_buckets=buckets,
    )
    return pl.concat([observed, extra]).sort(["series", "ts"]), read + modelled.height


def activity_series(picked: pl.DataFrame, *, buckets: int) -> tuple[pl.DataFrame, int]:
    return _reduce(picked, list(ACTIVITY_METRICS), buckets)


def counts_per_bucket(
    stamps: pl.Series, low: datetime, high: datetime, *, buckets: int, name: str
) -> pl.DataFrame:
    """How many ``stamps`` fall in each of ``buckets`` equal slices of ``[low, high]``:
    ``ts`` (slice start), ``end``, ``name`` (count). Empty slices are left out."""
    low_ns = int(pl.Series([low], dtype=TS).cast(pl.Int64)[0])
    high_ns = int(pl.Series([high], dtype=TS).cast(pl.Int64)[0])
    width = max(1, -(-(high_ns - low_ns + 1) // buckets))
    frame = pl.DataFrame({"ns": stamps.cast(TS).cast(pl.Int64)})
    counted = (
        frame.filter(pl.col("ns").is_between(low_ns, high_ns))
        .group_by(((pl.col("ns") - low_ns) // width).alias("b"))
        .agg(pl.len().cast(pl.Int64).alias(name))
        .sort("b")
    )
    start = pl.col("b") * width + low_ns
    return counted.select(
        start.cast(TS).alias("ts"), (start + width).cast(TS).alias("end"), pl.col(name)
    )


def markers(events: pl.DataFrame, incidents: list[tuple[datetime, str]]) -> pl.DataFrame:
    """Point events worth a vertical rule (OOM, engine death, Xid, startup refusals) and the
    incident peaks, as ``ts, kind, label, detail``."""
    rows = events.filter(pl.col("kind").is_in(list(MARKER_KINDS))).select(
        "ts",
        "kind",
        pl.col("kind").str.replace_all("_", " ").alias("label"),
        pl.concat_str(
            [
                pl.when(pl.col("requested_bytes").is_not_null()).then(
                    pl.format("tried to allocate {} B; ", pl.col("requested_bytes"))
                ),
                pl.col("detail"),
            ],
            ignore_nulls=True,
        ).alias("detail"),
    )
    peaks = pl.DataFrame(
        {
            "ts": [ts for ts, _ in incidents],
            "kind": ["peak"] * len(incidents),
            "label": [label for _, label in incidents],
            "detail": [""] * len(incidents),
        },
        schema=MARKER_SCHEMA,
    )
    return pl.concat([rows.cast(MARKER_SCHEMA), peaks]).sort("ts", maintain_order=True)


def summary(frame: pl.DataFrame, *, value_kind: str) -> list[dict[str, object]]:
    """Per series: points drawn, lowest and highest value, and when the highest occurred
    (the downsampled frame keeps both extremes, so these are the recorded ones)."""
    if not frame.height:
        return []
    stats = (
        frame.sort("ts")
        .group_by("series", maintain_order=False)
        .agg(
            pl.len().alias("points"),
            pl.col("value").min().alias("lowest"),
            pl.col("value").max().alias("highest"),
            pl.col("ts").get(pl.col("value").arg_max()).alias("highest_at"),
        )
        .sort("series")
    )
    cast = pl.Int64 if value_kind in ("bytes", "count") else pl.Float64
    out: list[dict[str, object]] = stats.with_columns(
        pl.col("lowest").round(0).cast(cast), pl.col("highest").round(0).cast(cast)
    ).to_dicts()
    return out
