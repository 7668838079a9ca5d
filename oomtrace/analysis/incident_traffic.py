"""The traffic around an incident: the requests a replay of it needs, and only those.

A KV exhaustion's remedy replays the requests that filled the pool (:mod:`oomtrace.analysis.
limits`). The replay starts from an empty pool, so it needs every request resident when the
rise began as well as those that arrived while it rose and while the pool stayed full: the
requests whose residency overlaps ``[start - LOOKBACK, peak + AFTER_WINDOWS x window]`` or that
arrived in it, each with all its lifecycle rows (its arrival may be long before). On a day's
trace this is a few thousand requests, never the day.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Final

import polars as pl

from oomtrace.analysis.timeline import Timeline, lit_ts

LOOKBACK: Final = timedelta(minutes=15)
AFTER_WINDOWS: Final = 5


def incident_requests(
    timeline: Timeline,
    requests: pl.LazyFrame,
    *,
    node: str,
    start: datetime,
    peak: datetime,
    window: timedelta,
) -> pl.DataFrame:
    """Every lifecycle row (canonical columns) of the requests around an incident on ``node``
    (see the module docstring), in time order."""
    begin, end = lit_ts(start - LOOKBACK), lit_ts(peak + window * AFTER_WINDOWS)
    segments = timeline.segments.filter(
        (pl.col("node") == node) & (pl.col("start_ts") <= end) & (pl.col("end_ts") >= begin)
    )
    arrived = timeline.requests.filter(
        (pl.col("node") == node) & pl.col("arrived_ts").is_between(begin, end)
    )
    ids = pl.concat([segments.select("request_id"), arrived.select("request_id")]).unique()
    if ids.is_empty():
        return requests.filter(pl.lit(value=False)).collect()
    wanted = ids["request_id"].implode()
    return (
        requests.filter((pl.col("node") == node) & pl.col("request_id").is_in(wanted))
        .collect()
        .sort("ts", maintain_order=True)
    )
