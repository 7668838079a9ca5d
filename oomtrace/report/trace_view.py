"""The trace as the report reads it: lazily, only what it draws.

A report takes a trace in memory (raw files ingested on the fly) or a trace directory opened
with :func:`oomtrace.analysis.open_trace`, the same lazy scan ``oomtrace analyze`` reads: the
samples and the request lifecycle stay Parquet scans, filtered to the charts' span before
anything is read, so a day-long trace costs what its incident's minutes cost.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import polars as pl

from oomtrace.analysis.trace_scan import TraceScan
from oomtrace.report.records import parse_time
from oomtrace.trace import Manifest, Trace, in_time


@dataclass(frozen=True)
class TraceView:
    """The tables of one trace: samples and requests as lazy frames, events and the manifest
    in memory (they are small)."""

    samples: pl.LazyFrame
    requests: pl.LazyFrame
    events: pl.DataFrame
    manifest: Manifest


def view_of(trace: Trace | TraceScan | TraceView) -> TraceView:
    """The tables as the charts read them: only the rows on one clock (inputs that could not be
    aligned are set aside, and the report's alerts name them)."""
    if isinstance(trace, TraceView):
        return trace
    manifest = trace.manifest
    if isinstance(trace, Trace):
        samples, requests = trace.samples.lazy(), trace.requests.lazy()
    else:
        samples, requests = trace.scan("samples"), trace.scan("requests")
    return TraceView(
        in_time(samples, manifest),
        in_time(requests, manifest),
        in_time(trace.events, manifest),
        manifest,
    )


def extent(view: TraceView, summary: Any = None) -> tuple[datetime, datetime] | None:
    """The first and last moment of the trace: from the findings' trace summary when it states
    them (``trace.start``, ``trace.end``), else from the tables (a scan reads the time column,
    or only Parquet statistics)."""
    if isinstance(summary, dict):
        start, end = parse_time(summary.get("start")), parse_time(summary.get("end"))
        if start is not None and end is not None:
            return start, end
    bounds = [
        frame.select(pl.col("ts").min().alias("lo"), pl.col("ts").max().alias("hi"))
        for frame in (view.samples, view.requests, view.events.lazy())
    ]
    both = pl.concat(bounds).select(pl.col("lo").min(), pl.col("hi").max()).collect().row(0)
    low, high = both
    if isinstance(low, datetime) and isinstance(high, datetime):
        return low, high
    return None
