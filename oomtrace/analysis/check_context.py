"""What the class checks read about one incident (:mod:`oomtrace.analysis.classify`), and the
figures several of them share: the rise threshold, the headroom the engine left, and how much the
failed allocation was short of.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import polars as pl

from oomtrace.analysis.findings import ProcessUse
from oomtrace.analysis.index import SeriesIndex
from oomtrace.analysis.kvmodel import KVModel
from oomtrace.analysis.options import AnalyzeOptions
from oomtrace.analysis.spikes import Spike
from oomtrace.analysis.step_bytes import StepEstimate


@dataclass(frozen=True)
class Context:
    """What the checks read about one incident.

    ``event`` is the anchor's event (an OOM or a start-up refusal), ``oom`` the same when it is
    an OOM; ``serving`` holds the samples that show the engine serving (a running request, tokens
    produced, KV in use: ``ts, source, metric, value``), so that "nothing was served" is judged
    from every source, not from request lines alone."""

    node: str
    device: int | None
    peak_ts: datetime
    window_start: datetime
    window: timedelta
    anchor: str
    spike: Spike | None
    event: dict[str, Any] | None
    oom: dict[str, Any] | None
    events: pl.DataFrame
    requests: pl.LazyFrame  # the node's lifecycle rows: each check collects only what it reads
    residents: pl.DataFrame
    memory: SeriesIndex
    kv_index: SeriesIndex
    engine: SeriesIndex  # scheduler series: running, waiting, preemptions
    kv: KVModel
    config: dict[str, Any]
    capacity: int | None
    options: AnalyzeOptions
    engine_pids: frozenset[int]
    idle: pl.DataFrame  # node, start, end of stretches with no request running
    serving: pl.DataFrame
    modelled_kv_bytes: int | None
    processes: list[ProcessUse] = field(default_factory=list)
    steps: tuple[StepEstimate, ...] = ()

    @property
    def threshold(self) -> float:
        share = self.capacity * self.options.min_rise_fraction if self.capacity else 0.0
        return max(float(self.options.min_rise_bytes), share)

    @property
    def utilisation(self) -> float | None:
        value = self.config.get("gpu_memory_utilization", self.config.get("mem_fraction_static"))
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
            return None
        return float(value)

    @property
    def left_for_others(self) -> int | None:
        """What the engine's own budget left of the device for everything else: ``(1 -
        gpu_memory_utilization) x capacity`` (vLLM's utilisation covers the engine's whole
        process; SGLang's ``mem_fraction_static`` its static pools)."""
        share = self.utilisation
        if share is None or not self.capacity:
            return None
        return round((1 - share) * self.capacity)

    @property
    def shortfall(self) -> int | None:
        """By how much the failed allocation (or start-up) fell short: at an OOM, the bytes it
        asked for less what was free; at a start-up refusal, what it needed less what it had."""
        event = self.event or {}
        wanted, free = event.get("requested_bytes"), event.get("free_bytes")
        if wanted is None or free is None:
            return None
        return max(int(wanted) - int(free), 0)
