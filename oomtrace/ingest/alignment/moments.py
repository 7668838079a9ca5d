"""The moments of one input that another input of the incident may have seen too.

Two inputs can only be put on one clock by what both saw. Of one input's parse result this
module keeps:

* **points**, instants a second input sees as well: an ``oom`` (the OOM message, or the hook's
  event); an ``exit`` (the engine's death, a start-up refusal, after which the process leaves);
  a ``start`` (the engine starting); and, from device memory series (nvidia-smi, NVML, DCGM), a
  ``release`` (memory falls through a quarter of the most the series held, or drops by a quarter
  of it between two samples; a sampled process disappearing) and an ``acquire`` (memory rises
  through that level; a sampled process appearing). A release or acquire keeps the sample
  before it (``before``): the moment itself lies between the two samples;
* **series** both kinds of input state: KV usage, KV tokens or blocks in use, running and
  waiting requests (an engine log's stats lines and the engine's ``/metrics``, for instance
  vLLM's ``GPU KV cache usage`` and ``vllm:kv_cache_usage_perc`` / ``gpu_cache_usage_perc``).

Everything is computed with Polars over the input's rows, once per input.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final, cast

import polars as pl

from oomtrace.ingest.parser_api import ParseResult
from oomtrace.schema import TS

# Series that an engine's log and its metrics (or a capture) both state, in canonical names.
COMPARABLE: Final = (
    "kv_usage_ratio",
    "kv_tokens_used",
    "kv_blocks_used",
    "requests_running",
    "requests_waiting",
)
# Event kinds a second input can see, as point kinds, with the words for them.
EVENT_POINTS: Final = {
    "oom": ("oom", "the OOM"),
    "engine_dead": ("exit", "the engine's death"),
    "startup_kv_insufficient": ("exit", "the start-up refusal"),
    "startup_no_kv_memory": ("exit", "the start-up refusal"),
    "startup_memory_insufficient": ("exit", "the start-up refusal"),
    "engine_start": ("start", "the engine start"),
}
# A level crossing or a step counts when it is this share of the most the series held.
STEP_SHARE: Final = 0.25
# A process counts as appearing or leaving only in a process table sampled this often.
MIN_PROCESS_SAMPLES: Final = 3
# Points of one kind closer than this are one moment (an OOM printed by several ranks).
SAME_MOMENT_S: Final = 5

POINTS_SCHEMA: Final = pl.Schema(
    [("t", TS), ("before", TS), ("kind", pl.String), ("what", pl.String), ("source", pl.String)]
)
SERIES_SCHEMA: Final = pl.Schema(
    [("t", TS), ("metric", pl.String), ("value", pl.Float64), ("source", pl.String)]
)


@dataclass(frozen=True)
class Moments:
    """One input's points and series, and the span of all its timed rows."""

    points: pl.DataFrame
    series: pl.DataFrame
    first: datetime | None
    last: datetime | None

    @property
    def empty(self) -> bool:
        return self.points.height == 0 and self.series.height == 0


def moments_of(result: ParseResult, name: str) -> Moments:
    """The moments of one parse result; ``name`` labels its points (the input's file name)."""
    samples = _timed(result.samples)
    points = pl.concat(
        [
            _event_points(_timed(result.events)),
            _device_points(samples),
            _process_points(samples),
        ],
        how="vertical",
    )
    points = _one_per_moment(points).with_columns(source=pl.lit(name))
    series = _series(samples).with_columns(source=pl.lit(name))
    first, last = span(result)
    return Moments(points.select(POINTS_SCHEMA.names()), series, first, last)


def span(result: ParseResult) -> tuple[datetime | None, datetime | None]:
    """The first and last time of any row of ``result``."""
    stamps = [
        f.get_column("ts").drop_nulls()
        for f in (result.samples, result.requests, result.events)
        if f is not None and f.height
    ]
    if not stamps:
        return None, None
    merged = pl.concat(stamps)
    if merged.len() == 0:
        return None, None
    low, high = merged.min(), merged.max()
    return cast("datetime", low), cast("datetime", high)


def concat(moments: list[Moments]) -> Moments:
    """Several inputs' moments as one reference."""
    firsts = [m.first for m in moments if m.first is not None]
    lasts = [m.last for m in moments if m.last is not None]
    return Moments(
        pl.concat([m.points for m in moments], how="vertical").sort("t"),
        pl.concat([m.series for m in moments], how="vertical").sort("t"),
        min(firsts) if firsts else None,
        max(lasts) if lasts else None,
    )


def _timed(frame: pl.DataFrame | None) -> pl.DataFrame | None:
    if frame is None or frame.height == 0:
        return None
    return frame.filter(pl.col("ts").is_not_null())


def _event_points(events: pl.DataFrame | None) -> pl.DataFrame:
    if events is None or "kind" not in events.columns:
        return pl.DataFrame(schema=POINTS_SCHEMA).drop("source")
    kinds = pl.col("kind")
    return events.filter(kinds.is_in(list(EVENT_POINTS))).select(
        t=pl.col("ts").cast(TS),
        before=pl.col("ts").cast(TS),
        kind=kinds.replace_strict({k: v[0] for k, v in EVENT_POINTS.items()}),
        what=kinds.replace_strict({k: v[1] for k, v in EVENT_POINTS.items()}),
    )


def _device_points(samples: pl.DataFrame | None) -> pl.DataFrame:
    """Releases and acquires of device memory, per device (and per source qualifier)."""
    if samples is None:
        return pl.DataFrame(schema=POINTS_SCHEMA).drop("source")
    keys = [c for c in ("device", "source") if c in samples.columns]
    used = samples.filter(pl.col("metric") == "device_used_bytes").sort([*keys, "ts"])
    if used.height < 2:
        return pl.DataFrame(schema=POINTS_SCHEMA).drop("source")
    over = keys or None
    value, prev = pl.col("value"), pl.col("value").shift(1).over(over)
    top = pl.col("value").max().over(over)
    level = top * STEP_SHARE
    step = value - prev
    flagged = used.with_columns(
        before=pl.col("ts").shift(1).over(over),
        _prev=prev,
        _kind=pl.when((prev >= level) & (value < level) | (step <= -level))
        .then(pl.lit("release"))
        .when((prev < level) & (value >= level) | (step >= level))
        .then(pl.lit("acquire")),
    ).filter(pl.col("_kind").is_not_null() & (top > 0))
    device = pl.col("device").cast(pl.String) if "device" in flagged.columns else pl.lit("?")
    gib = 2**30
    return flagged.select(
        t=pl.col("ts").cast(TS),
        before=pl.col("before").cast(TS),
        kind=pl.col("_kind"),
        what=pl.format(
            "{} on GPU {} ({} GiB to {} GiB)",
            pl.when(pl.col("_kind") == "release")
            .then(pl.lit("the memory drop"))
            .otherwise(pl.lit("the memory rise")),
            device,
            _two_decimals(pl.col("_prev") / gib),
            _two_decimals(pl.col("value") / gib),
        ),
    )


def _two_decimals(value: pl.Expr) -> pl.Expr:
    """``value`` as text with exactly two decimals (``0.00``, ``38.99``)."""
    cents = (value * 100).round(0).cast(pl.Int64)
    return pl.format("{}.{}", cents // 100, (cents % 100).cast(pl.String).str.zfill(2))


def _process_points(samples: pl.DataFrame | None) -> pl.DataFrame:
    """A process appearing in, or leaving, a sampled process table (not at the input's first or
    last sample: a process already there when sampling began did not appear then). The input's
    sampling times are those of all its samples: a query that finds no process prints no row."""
    if samples is None or "pid" not in samples.columns:
        return pl.DataFrame(schema=POINTS_SCHEMA).drop("source")
    procs = samples.filter((pl.col("metric") == "process_used_bytes") & pl.col("pid").is_not_null())
    if procs.get_column("ts").n_unique() < MIN_PROCESS_SAMPLES:
        return pl.DataFrame(schema=POINTS_SCHEMA).drop("source")
    times = samples.get_column("ts").unique().sort()
    table = pl.DataFrame({"ts": times}).with_columns(
        prev=pl.col("ts").shift(1), next=pl.col("ts").shift(-1)
    )
    seen = (
        procs.group_by("pid")
        .agg(first=pl.col("ts").min(), last=pl.col("ts").max(), n=pl.len())
        .filter(pl.col("n") >= MIN_PROCESS_SAMPLES)
    )
    first_t, last_t = times[0], times[-1]
    came = seen.filter(pl.col("first") > first_t).join(
        table, left_on="first", right_on="ts", how="left"
    )
    went = seen.filter(pl.col("last") < last_t).join(
        table, left_on="last", right_on="ts", how="left"
    )
    return pl.concat(
        [
            came.select(
                t=pl.col("first").cast(TS),
                before=pl.col("prev").cast(TS),
                kind=pl.lit("acquire"),
                what=pl.format("process {} appearing", pl.col("pid")),
            ),
            went.select(
                t=pl.col("next").cast(TS),
                before=pl.col("last").cast(TS),
                kind=pl.lit("release"),
                what=pl.format("process {} leaving", pl.col("pid")),
            ),
        ],
        how="vertical",
    )


def _one_per_moment(points: pl.DataFrame) -> pl.DataFrame:
    """Points of one kind within :data:`SAME_MOMENT_S` of the one before are one moment."""
    if points.height == 0:
        return points
    gap = (pl.col("t") - pl.col("t").shift(1).over("kind")).dt.total_seconds()
    return points.sort("kind", "t").filter(gap.is_null() | (gap > SAME_MOMENT_S)).sort("t", "kind")


def _series(samples: pl.DataFrame | None) -> pl.DataFrame:
    """The comparable series, one per metric (the qualifier with the most rows, and the first
    device, where an input holds several side by side)."""
    empty = pl.DataFrame(schema=SERIES_SCHEMA).drop("source")
    if samples is None:
        return empty
    rows = samples.filter(pl.col("metric").is_in(COMPARABLE))
    if rows.height == 0:
        return empty
    if "source" in rows.columns:
        counts = rows.group_by("metric", "source").len()
        main = counts.sort("len", descending=True).unique("metric", keep="first")
        rows = rows.join(main.select("metric", "source"), on=["metric", "source"], how="semi")
    if "device" in rows.columns:
        first = rows.group_by("metric").agg(pl.col("device").drop_nulls().min().alias("_d"))
        rows = rows.join(first, on="metric", how="left").filter(
            pl.col("_d").is_null() | (pl.col("device") == pl.col("_d"))
        )
    return rows.select(
        t=pl.col("ts").cast(TS), metric="metric", value=pl.col("value").cast(pl.Float64)
    ).sort("t")
