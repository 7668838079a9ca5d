"""The analysis of a long trace, in windows: memory bounded by the incident windows, not by the
trace's length.

A day at 100 Hz is tens of millions of samples and millions of requests; held whole (the memory
series, the timeline's knots, the pool's breakpoints) they cost gigabytes that grow with every
hour. Above :attr:`AnalyzeOptions.windowed_above_rows` rows the analysis runs in two passes:

1. **Scan.** One streaming pass over the samples keeps each memory series' buckets' extremes
   (:mod:`oomtrace.analysis.sample_buckets`: the first minimum and maximum of each bucket, so
   that no peak is lost) and every other sample row (about one a second); one over the requests
   keeps the table's totals and each request's first and last event
   (:mod:`oomtrace.analysis.request_scan`). Spikes are looked for on those points, and the
   incidents anchored on them and on the events, as the single pass anchors them.
2. **Windows.** Around every incident and spike found (its look-back, and a window more on each
   side), the memory series are read again at full resolution, through a filter the Parquet scan
   applies to its row groups, and the timeline and the pool's sweep are built of the requests
   resident at some moment of a window. The spikes and incidents are then found again on the
   full-resolution rows, and the incidents assembled as the single pass assembles them.

What differs from the single pass, and why it is the same where it matters: inside the windows
every figure (peaks, residents, culprits, class, breakdown) comes from the same rows. Outside
them the memory series are the buckets' extremes (what the findings keep of them anyway); the
modelled KV, its reconciliation with the observed KV, the memory reconciliations and the decode
rate are of the windows only (a request not resident in any window is not modelled), and the
residencies the request gaps count are those of the windows' requests. The trace's totals
(samples, requests, events, span) are of the whole trace. A trace whose memory series are not in
time order in the table, or that holds no observed memory or KV (spikes would come from the model
of every request), is analysed in one pass.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Final

import polars as pl

from oomtrace.analysis.conclude import Detail, findings_of
from oomtrace.analysis.findings import Findings
from oomtrace.analysis.incidents import Anchoring, anchor_incidents
from oomtrace.analysis.index import SeriesIndex
from oomtrace.analysis.observed_series import BYTES_METRICS
from oomtrace.analysis.options import AnalyzeOptions
from oomtrace.analysis.prepare import first_served, prepare
from oomtrace.analysis.request_scan import Window, in_windows, scan_requests
from oomtrace.analysis.sample_buckets import OutOfOrder, bucketed_samples
from oomtrace.analysis.samples import memory_index, split_series
from oomtrace.analysis.spikes import FILL_LOOKBACK, Spike
from oomtrace.analysis.trace_scan import Tables

__all__ = ["BUCKETS_PER_WINDOW", "analyze_windowed"]

BUCKETS_PER_WINDOW: Final = 8


def analyze_windowed(tables: Tables, options: AnalyzeOptions) -> Findings | None:
    """The findings of the module docstring's two passes; None where the trace is to be read in
    one pass."""
    # buckets an eighth of a window wide: a rise within a window spans several of them
    width_ns = max(int(options.window_s * 1e9) // BUCKETS_PER_WINDOW, 1)
    try:
        bucketed = bucketed_samples(tables.samples, BYTES_METRICS, tables.strict, width_ns=width_ns)
    except OutOfOrder:
        return None
    scan = scan_requests(tables)
    view = bucketed.view
    first, _, spikes, facts = prepare(tables, options, view, (scan, []))
    if first.memory.empty and first.kv_index.empty:
        return None
    anchors = anchor_incidents(
        tables.events,
        spikes,
        options,
        first_served(facts, first.serving),
        first.preemptions,
        kv_observed=frozenset(first.kv_index.catalog["node"].drop_nulls().to_list()),
    )
    evicted = first.preemptions
    del first
    pad = timedelta(seconds=options.window_s) + timedelta(microseconds=2 * width_ns / 1000)
    windows = _windows(anchors, spikes, pad)
    full = memory_index(
        split_series(tables.samples.filter(in_windows(windows)), BYTES_METRICS),
        unit="bytes",
        by_node=view.several_nodes,  # labelled as the buckets are, whatever the windows hold
    )
    merged = _merged(view.memory, full, windows)
    prep, modelled, spikes, facts = prepare(
        tables, options, replace(view, memory=merged), (scan, windows), evicted
    )
    return findings_of(
        tables, prep, modelled, spikes, facts, options, Detail(windows, full, bucketed.holes)
    )


def _windows(anchors: list[Anchoring], spikes: list[Spike], pad: timedelta) -> list[Window]:
    """Per node, the merged spans read at full resolution: each incident's look-back (a pool's
    fill from where its rise began) and each spike's rise, a window and two buckets more on
    each side."""
    spans: list[Window] = []
    for anchor in anchors:
        start = anchor.peak_ts - max(pad, FILL_LOOKBACK)
        if anchor.spike is not None:
            start = min(start, anchor.spike.start)
        spans.append((anchor.node, start - pad, anchor.peak_ts + pad))
    spans += [(s.node, s.start - pad, s.peak_ts + pad) for s in spikes]
    merged: list[Window] = []
    for node, start, end in sorted(spans, key=lambda w: (w[0], w[1])):
        if merged and merged[-1][0] == node and start <= merged[-1][2]:
            merged[-1] = (node, merged[-1][1], max(end, merged[-1][2]))
        else:
            merged.append((node, start, end))
    return merged


def _merged(buckets: SeriesIndex, full: SeriesIndex, windows: list[Window]) -> SeriesIndex:
    """Each memory series: its full-resolution rows inside the windows on its node, its buckets'
    extremes outside them."""
    parts: dict[str, pl.DataFrame] = {}
    meta = {}
    for name in buckets.names():
        description = buckets.meta(name)
        node = description["node"]
        mine = [(n, s, e) for n, s, e in windows if n == node]
        outside = buckets.rows(name).with_columns(node=pl.lit(node, pl.String))
        outside = outside.filter(~in_windows(mine)).drop("node")
        inside = [full.rows(name).select(outside.columns)] if name in full.names() else []
        joined = pl.concat([outside, *inside]).sort("ts")
        parts[name] = joined.with_columns(pl.col("ts").set_sorted())
        meta[name] = {k: v for k, v in description.items() if k != "series"}
    return SeriesIndex(parts, meta)
