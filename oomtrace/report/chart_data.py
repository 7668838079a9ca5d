"""Display frames for the charts, read from the canonical trace and the analysis' series.

The samples the charts draw are read once, lazily, inside the charts' span and reduced while
they are read (:func:`observed_samples`): a day at 100 Hz is never held whole. Where two sources
state the same series (the engine's log and its Prometheus endpoint both count running
requests), the one with more samples is drawn, so a line never zigzags between two clocks.
Modelled series (modelled KV, observed KV in bytes) come from the analysis. All frames are long
``ts, series, value``, reduced with :func:`~oomtrace.report.downsample.peak_preserving`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

import polars as pl

from oomtrace.report.downsample import reduce_counted
from oomtrace.report.span import Span, epoch_ns
from oomtrace.schema import TS

# metric -> the series it is drawn as; a "peak since the previous sample" metric joins its
# series, so a spike between two samples is drawn where it belongs, without a line of its own.
MEMORY_METRICS: Final[dict[str, str]] = {
    "device_total_bytes": "device total",
    "device_used_bytes": "device used",
    "device_used_peak_bytes": "device used",
    "torch_reserved_bytes": "allocator reserved",
    "torch_reserved_peak_bytes": "allocator reserved",
    "torch_allocated_bytes": "allocator allocated",
    "torch_allocated_peak_bytes": "allocator allocated",
}
PROCESS_METRICS: Final[dict[str, str]] = {
    "process_used_bytes": "process",
    "process_used_peak_bytes": "process",
}
ACTIVITY_METRICS: Final[dict[str, str]] = {
    "requests_running": "requests running",
    "requests_waiting": "requests waiting",
    "requests_swapped": "requests preempted",
}
LABELS: Final = {**MEMORY_METRICS, **PROCESS_METRICS, **ACTIVITY_METRICS}
PICKED: Final = tuple(LABELS)
MARKER_KINDS: Final = (
    "oom",
    "engine_dead",
    "startup_kv_insufficient",
    "startup_no_kv_memory",
    "xid",
    "preemption",
)
SERIES_SCHEMA: Final = pl.Schema({"ts": TS, "series": pl.String(), "value": pl.Float64()})
MARKER_SCHEMA: Final = pl.Schema(
    {"ts": TS, "kind": pl.String(), "label": pl.String(), "detail": pl.String()}
)
# The analysis' series as the report keeps them: which source each came from, so that a chart
# draws one source per series.
ANALYSIS_SCHEMA: Final = pl.Schema(
    {"ts": TS, "series": pl.String(), "source": pl.String(), "value": pl.Float64()}
)
OBSERVED_SCHEMA: Final = pl.Schema(
    {
        "metric": pl.String(),
        "source": pl.String(),
        "device": pl.Int32(),
        "pid": pl.Int64(),
        "ts": TS,
        "value": pl.Float64(),
    }
)
KEYS: Final = ("metric", "source", "device", "pid")


def observed_samples(
    samples: pl.LazyFrame, span: Span | None, *, buckets: int
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The charted metrics inside ``span``, reduced to the lowest and highest row of each of
    ``buckets`` slices per series (``metric, source, device, pid, ts, value``), and the rows
    read per series (``metric, source, device, pid, read``)."""
    rows = samples.filter(pl.col("metric").is_in(PICKED))
    bounds = None
    if span is not None:
        bounds = (span.start, span.end)
        rows = rows.filter(pl.col("ts").is_between(span.start, span.end))
    points, read = reduce_counted(
        rows.select(*KEYS, "ts", "value"), max_buckets=buckets, by=KEYS, bounds=bounds
    )
    return points.cast(dict(OBSERVED_SCHEMA)), read  # type: ignore[arg-type]


def _preferred(points: pl.DataFrame, read: pl.DataFrame, labels: dict[str, str]) -> pl.DataFrame:
    """Rows of ``labels``' metrics, labelled, from one source per series and GPU and process:
    the one that read the most samples."""
    label = pl.col("metric").replace_strict(labels, default=None, return_dtype=pl.String)
    best = (
        read.with_columns(label.alias("series"))
        .filter(pl.col("series").is_not_null())
        .group_by("series", "device", "pid", "source")
        .agg(pl.col("read").sum())
        .sort("read", "source", descending=[True, False])
        .unique(["series", "device", "pid"], keep="first", maintain_order=True)
        .select("series", "device", "pid", "source")
    )
    return points.with_columns(label.alias("series")).join(
        best, on=["series", "device", "pid", "source"], nulls_equal=True
    )


def _gpu_prefix(frame: pl.DataFrame) -> pl.Expr:
    """``GPU 1 device used`` where the frame holds more than one GPU."""
    if frame["device"].drop_nulls().n_unique() > 1:
        return pl.format("GPU {} ", pl.col("device").fill_null(-1)) + pl.col("series")
    return pl.col("series")


def memory_series(
    points: pl.DataFrame, read: pl.DataFrame, modelled: pl.DataFrame | None
) -> tuple[pl.DataFrame, int]:
    """Device and allocator memory for display (``ts, series, value``), with the analysis'
    modelled series beside them, and how many samples they were drawn from."""
    chosen = _preferred(points, read, MEMORY_METRICS)
    frame = chosen.select("ts", _gpu_prefix(chosen).alias("series"), "value")
    count = _read_of(read, MEMORY_METRICS)
    if modelled is not None and not modelled.is_empty():
        frame = pl.concat([frame, modelled.select(SERIES_SCHEMA.names()).cast(SERIES_SCHEMA)])
        count += modelled.height
    # a peak metric and its series can share a moment: keep the higher
    merged = frame.group_by("series", "ts").agg(pl.col("value").max())
    return merged.sort("series", "ts").select(SERIES_SCHEMA.names()), count


def activity_series(points: pl.DataFrame, read: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    chosen = _preferred(points, read, ACTIVITY_METRICS)
    frame = chosen.select("ts", _gpu_prefix(chosen).alias("series"), "value")
    return frame.sort("series", "ts"), _read_of(read, ACTIVITY_METRICS)


def process_series(points: pl.DataFrame, read: pl.DataFrame) -> pl.DataFrame:
    """Per-process device memory: ``ts, device, pid, value`` (the peak between samples
    joins its process's series)."""
    chosen = _preferred(points, read, PROCESS_METRICS).filter(pl.col("pid").is_not_null())
    merged = chosen.group_by("device", "pid", "ts").agg(pl.col("value").max())
    return merged.sort("pid", "ts").select("ts", "device", "pid", "value")


def _read_of(read: pl.DataFrame, labels: dict[str, str]) -> int:
    return int(read.filter(pl.col("metric").is_in(list(labels)))["read"].sum())


def counts_per_bucket(
    stamps: pl.Series, low: datetime, high: datetime, *, buckets: int, name: str
) -> pl.DataFrame:
    """How many ``stamps`` fall in each of ``buckets`` equal slices of ``[low, high]``:
    ``ts`` (slice start), ``end``, ``name`` (count). Empty slices are left out."""
    low_ns, high_ns = epoch_ns(low), epoch_ns(high)
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
    """Point events worth a vertical rule (OOM, engine death, Xid, startup refusals,
    preemptions) and the incident peaks, as ``ts, kind, label, detail``."""
    labels = {
        "oom": "out of memory",
        "engine_dead": "engine died",
        "startup_kv_insufficient": "refused to start",
        "startup_no_kv_memory": "refused to start",
        "xid": "Xid error",
        "preemption": "preemption",
    }
    rows = events.filter(pl.col("kind").is_in(list(MARKER_KINDS))).select(
        "ts",
        "kind",
        pl.col("kind").replace_strict(labels, return_dtype=pl.String).alias("label"),
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


def y_top(values: pl.Series) -> float:
    """The top of a y axis: a little above the highest value drawn (bytes in, bytes out)."""
    top = values.max()
    return float(top) * 1.06 if isinstance(top, int | float) and top > 0 else 1.0
