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


def _labelled(samples: pl.DataFrame, names: dict[str, str]) -> pl.DataFrame:
    """Samples of ``names`` as ``ts, series, value``; the GPU index is added to the label when
    the trace has more than one device."""
    rows = samples.filter(pl.col("metric").is_in(list(names)))
    label = pl.col("metric").replace_strict(names, return_dtype=pl.String)
    if rows["device"].drop_nulls().n_unique() > 1:
        label = pl.format("GPU {} ", pl.col("device").fill_null(-1)) + label
    return rows.select("ts", label.alias("series"), "value")


def memory_series(
    samples: pl.DataFrame, modelled: pl.DataFrame | None, *, buckets: int
) -> tuple[pl.DataFrame, int]:
    """Memory series for display and how many samples they were drawn from.

    Per-process memory (``process_used_bytes``) is one series per pid, because another
    process's memory is exactly what tells foreign memory apart."""
    observed = _labelled(samples, MEMORY_METRICS)
    per_process = samples.filter(pl.col("metric") == "process_used_bytes").select(
        "ts", pl.format("pid {}", pl.col("pid").fill_null(-1)).alias("series"), "value"
    )
    parts = [observed, per_process]
    if modelled is not None and modelled.height:
        parts.append(modelled.select("ts", "series", pl.col("value").cast(pl.Float64)))
    frame = pl.concat(parts, how="vertical").cast(SERIES_SCHEMA)
    return peak_preserving(frame, max_buckets=buckets), frame.height


def activity_series(samples: pl.DataFrame, *, buckets: int) -> tuple[pl.DataFrame, int]:
    frame = _labelled(samples, ACTIVITY_METRICS).cast(SERIES_SCHEMA)
    return peak_preserving(frame, max_buckets=buckets), frame.height


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
