"""Incidents: anchored on an OOM (or a startup refusal), else on the worst spikes.

OOM events on a node within one window of each other are one incident (every tensor-parallel
worker prints its own; an engine restarted by its supervisor fails again and again): a chain of
such events, each within a window of the previous one, is one incident, anchored on the first.
Spikes that peak within a window of an anchor's events belong to it; the rest become incidents of
their own, worst first, up to ``max_incidents`` in all. The primary incident is the first OOM (or
startup refusal) in time, else the worst spike.

A spike becomes an incident of its own only under pressure, so that a busy, healthy day (no OOM,
no preemption, a pool below full) reports none:

* an observed KV pool at or above the full level (``kv_full_ratio``) of its capacity;
* a modelled KV pool (nothing observed it) at the full level *and* a preemption stated around it:
  a model that counts more than the pool holds is not evidence of pressure by itself;
* device or allocator memory with at most 1 % of the device left (:data:`NO_ROOM`): a
  preallocating engine holds 90 % or more of its device all day, so that is its normal level;
  memory whose capacity is unknown is never pressure.

A KV pool rising to half full, or device memory rising by a few GiB well below the device's size,
is traffic, not an incident; it stays in the findings' spikes. A spike that peaks before the
node's first sign of serving is the engine taking its memory at start-up (weights, the
preallocated KV pool, CUDA graphs): never an incident of its own either. A failed start is an
incident through its OOM or refusal event.

Preemptions (vLLM's preemption warnings, SGLang's "Decode out of memory happened.
#retracted_reqs: N") are the engine saying its KV pool ran full: on a node whose KV usage no
source observed, a chain of them that no OOM or spike explains is an incident of its own (the
log still shows the pressure), anchored on its last preemption within a window of its first, so
that the incident's window holds the moment the pool ran out. So is one on a node whose pool a
source observed below full but that has no other incident: the pool ran full between two of the
engine's stats lines, which come every few seconds (vllm#546: 86.1 % two seconds before the
preemption). They come deduplicated across tensor-parallel ranks from ingest: each counts once.

The driver's Xid reports (a GPU fault: the kernel log read beside the engine's, DCGM's gauge) on
a node are an incident of their own, a chain of them within a window of each other one incident
on its first (told by its gravest report: a GPU fallen off the bus before the faults it
causes), unless an OOM or a refusal's incident on that node holds them: the fault is told
as a fault, not as a lack of memory, and spikes around it belong to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import polars as pl

from oomtrace.analysis.check_gpu_fault import severity
from oomtrace.analysis.findings import Anchor
from oomtrace.analysis.options import AnalyzeOptions
from oomtrace.analysis.spikes import Spike
from oomtrace.analysis.timeline import lit_ts

# A refusal this soon after an OOM reports that OOM (no engine restarts that fast: loading
# the weights takes longer).
SAME_FAILURE = timedelta(seconds=5)
STARTUP_KINDS = ("startup_kv_insufficient", "startup_no_kv_memory", "startup_memory_insufficient")
WORKSPACE = "workspace_overflow"  # oomtrace/analysis/workspace.py
NO_ROOM = 0.99  # device memory this full leaves nothing for a step: pressure
_POOLS = ("kv_used", "modelled_kv_bytes", "modelled_stored_tokens")


@dataclass
class Anchoring:
    """Where an incident is anchored, and the spikes that belong to it."""

    kind: Anchor
    node: str
    device: int | None
    peak_ts: datetime
    event: dict[str, Any] | None = None
    spike: Spike | None = None
    spikes: list[Spike] = field(default_factory=list)
    last_event_ts: datetime | None = None

    def start(self, window: timedelta) -> datetime:
        """When the rise began: the earliest start of its spikes that peaked in the window
        before the peak, else one window before the peak."""
        starts = [
            s.start for s in self.spikes if self.peak_ts - window <= s.peak_ts <= self.peak_ts
        ]
        return min(starts) if starts else self.peak_ts - window

    @property
    def series(self) -> str | None:
        if self.spike is not None:
            return self.spike.series
        return f"events:{self.event['kind']}" if self.event is not None else None


def under_pressure(
    spike: Spike, options: AnalyzeOptions, preemptions: pl.DataFrame | None = None
) -> bool:
    """Whether a spike is pressure enough to be an incident of its own (module docstring);
    ``preemptions`` holds ``node, ts`` of every preemption stated."""
    share = spike.utilisation
    if share is None:
        return False
    if spike.metric not in _POOLS:
        return share >= NO_ROOM
    if share < options.kv_full_ratio:
        return False
    if spike.kind == "observed":
        return True
    if preemptions is None:
        return False
    window = timedelta(seconds=options.window_s)
    near = preemptions.filter(
        (pl.col("node") == spike.node)
        & pl.col("ts").is_between(
            pl.lit(spike.start - window, dtype=pl.Datetime("ns", "UTC")),
            pl.lit(spike.peak_ts + window, dtype=pl.Datetime("ns", "UTC")),
        )
    )
    return near.height > 0


def anchor_incidents(
    events: pl.DataFrame,
    spikes: list[Spike],
    options: AnalyzeOptions,
    served_from: dict[str, datetime] | None = None,
    preemptions: pl.DataFrame | None = None,
    kv_observed: frozenset[str] = frozenset(),
) -> list[Anchoring]:
    """Anchors in order: OOMs and startup refusals by time, then spikes by severity, then
    preemption chains on nodes whose KV usage no source observed (``kv_observed``: where it is,
    the pool's own fill is the incident, unless the node has none). ``served_from`` is each
    node's first sign of serving (spikes before it are start-up); ``preemptions`` (``node, ts``)
    corroborate a modelled pool's spike."""
    served = served_from or {}
    window = timedelta(seconds=options.window_s)
    anchors: list[Anchoring] = []
    # Events come in time order, so only the latest chain of a node and kind can still grow: an
    # event that starts a new chain is more than a window after every earlier one's last event.
    latest: dict[tuple[str, Anchor], Anchoring] = {}
    for row in (
        events.filter(pl.col("kind").is_in(["oom", WORKSPACE, *STARTUP_KINDS]))
        .sort("ts")
        .iter_rows(named=True)
    ):
        # FlashInfer's workspace overflowing fails a step as an OOM does (its own class)
        kind: Anchor = "oom" if row["kind"] in ("oom", WORKSPACE) else "startup"
        chain = latest.get((row["node"], kind))
        oom = latest.get((row["node"], "oom"))
        if (
            kind == "startup"
            and oom is not None
            and row["ts"] - (oom.last_event_ts or oom.peak_ts) <= SAME_FAILURE
        ):
            # a refusal right after an OOM is that OOM's end (TGI's router reports its warm-up
            # OOM as a refusal 85 ms later): one incident, anchored on the OOM
            chain = oom
        if chain is not None and row["ts"] - (chain.last_event_ts or chain.peak_ts) <= window:
            chain.last_event_ts = row["ts"]
            continue
        chain = Anchoring(kind, row["node"], row["device"], row["ts"], event=row)
        anchors.append(chain)
        latest[(row["node"], kind)] = chain
    anchors += _fault_anchors(events, anchors, window)
    for spike in spikes:  # worst first
        owner = next(
            (
                a
                for a in anchors
                if a.node == spike.node
                and a.peak_ts - window <= spike.peak_ts <= (a.last_event_ts or a.peak_ts) + window
            ),
            None,
        )
        if owner is not None:
            owner.spikes.append(spike)
            if owner.device is None and owner.kind == "oom":
                owner.device = spike.device
            continue
        starting = spike.node in served and spike.peak_ts < served[spike.node]
        pressure = under_pressure(spike, options, preemptions)
        if len(anchors) < options.max_incidents and pressure and not starting:
            anchors.append(
                Anchoring(
                    "spike", spike.node, spike.device, spike.peak_ts, spike=spike, spikes=[spike]
                )
            )
    if preemptions is not None:
        # where a source observed the pool, its own fill is the incident; a node with no other
        # incident still has its preemptions' (the pool ran full between two stats lines: vLLM
        # logs its usage every few seconds, the preemption the moment it happens; vllm#546)
        anchored = {a.node for a in anchors}
        unseen = preemptions.filter(
            ~pl.col("node").is_in(list(kv_observed)) | ~pl.col("node").is_in(list(anchored))
        )
        anchors += _preemption_anchors(unseen, anchors, window)
    return anchors[: options.max_incidents]


def _fault_anchors(
    events: pl.DataFrame, anchors: list[Anchoring], window: timedelta
) -> list[Anchoring]:
    """One anchor per chain of the driver's Xid reports on a node (each within a window of the
    one before) that no failure's incident holds, on the chain's first report: a GPU fault is
    an incident of its own (:mod:`oomtrace.analysis.check_gpu_fault`), with or without a death."""
    found: list[Anchoring] = []
    if "kind" not in events.columns:
        return found
    rows = events.filter((pl.col("kind") == "xid") & pl.col("ts").is_not_null()).sort("ts")
    for row in rows.iter_rows(named=True):  # Xid reports are few: a handful per fault
        node, ts = row["node"], row["ts"]
        held = next(
            (
                a
                for a in [*anchors, *found]
                if a.node == node
                and a.peak_ts - window <= ts <= (a.last_event_ts or a.peak_ts) + window
            ),
            None,
        )
        if held is not None:
            if held.kind == "xid":  # the chain grows; a failure's incident keeps its own end
                held.last_event_ts = ts
                if severity(row) > severity(held.event):
                    held.event = row  # the gravest report of the chain tells the fault
            continue
        found.append(Anchoring("xid", node, row["device"], ts, event=row))
    return found


def _preemption_anchors(
    preemptions: pl.DataFrame, anchors: list[Anchoring], window: timedelta
) -> list[Anchoring]:
    """One anchor per chain of preemptions (each within a window of the one before) that no
    other anchor holds, at the chain's last preemption within a window of its first: the moment
    the pool ran out, with the window holding the chain's start (see the module docstring)."""
    ts = pl.col("ts")
    # one row per moment and node: a stats line's count and its warnings say the same
    frame = preemptions.unique().sort("node", "ts")
    for a in anchors:  # anchors are few (failures and the worst spikes); preemptions may be many
        start, end = a.peak_ts - window, (a.last_event_ts or a.peak_ts) + window
        frame = frame.filter(
            (pl.col("node") != a.node) | ~ts.is_between(lit_ts(start), lit_ts(end))
        )
    chains = (
        frame.with_columns(
            chain=(ts.diff().over("node") > window).fill_null(value=True).cum_sum().over("node")
        )
        .group_by("node", "chain", maintain_order=True)
        .agg(peak=ts.filter(ts <= ts.min() + window).max())
    )
    return [
        Anchoring("preemption", node, None, peak)
        for node, peak in chains.select("node", "peak").rows()
    ]
