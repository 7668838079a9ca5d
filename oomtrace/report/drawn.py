"""What the report read for its charts, shared by the sections that draw it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from oomtrace.report.span import Span, epoch_ns
from oomtrace.schema import TS


@dataclass(frozen=True)
class Drawn:
    """What the report read for its charts, shared by the sections that draw it.

    ``memory``, ``activity``: display series ``ts, series, value``; ``processes``: per-process
    memory ``ts, device, pid, value``; ``analysis``: the analysis' KV series ``ts, series,
    source, value``; ``lanes``: every resident interval of the incident window with
    ``culprit_rank``; ``marks``: point events ``ts, kind, label, detail``."""

    span: Span | None
    memory: pl.DataFrame
    activity: pl.DataFrame
    processes: pl.DataFrame
    analysis: pl.DataFrame
    lanes: pl.DataFrame | None
    marks: pl.DataFrame
    events: pl.DataFrame
    config: Mapping[str, Any]
    # requests the engine preempted, one row each (``ts, request_id``; the vLLM plugin names them)
    preempted: pl.DataFrame = field(
        default_factory=lambda: pl.DataFrame(schema={"ts": TS, "request_id": pl.String()})
    )

    def domain(self, span: Span | None = None) -> tuple[int, int] | None:
        """A span as the charts' time domain (epoch milliseconds)."""
        chosen = span or self.span
        if chosen is None:
            return None
        return epoch_ns(chosen.start) // 1_000_000, epoch_ns(chosen.end) // 1_000_000

    def marks_in(self, span: Span | None) -> pl.DataFrame:
        if span is None:
            return self.marks
        return self.marks.filter(pl.col("ts").is_between(span.start, span.end))
