"""What a replay answers: its summary, how service times were obtained, and the per-request
outcomes and pool series (the settings it ran under are :mod:`oomtrace.replay.settings`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any, Final

import polars as pl

from oomtrace.isotime import iso_time
from oomtrace.replay.settings import ReplaySettings

OUTCOMES: Final = ("finished", "rejected_too_large", "rejected_queue_full")

OUTCOME_SCHEMA: Final = pl.Schema(
    {
        "request_id": pl.String(),
        "arrival": pl.Datetime("ns", "UTC"),
        "admitted": pl.Datetime("ns", "UTC"),
        "finished": pl.Datetime("ns", "UTC"),
        "queue_delay_s": pl.Float64(),
        "preemptions": pl.Int64(),
        "outcome": pl.String(),
        "prompt_tokens": pl.Int64(),
        "output_tokens": pl.Int64(),
        "output_source": pl.String(),
    }
)

SERIES_SCHEMA: Final = pl.Schema(
    {
        "ts": pl.Datetime("ns", "UTC"),
        "kv_blocks_used": pl.Int64(),
        "kv_blocks_peak": pl.Int64(),
        "kv_usage_ratio": pl.Float64(),
        "requests_running": pl.Int64(),
        "requests_waiting": pl.Int64(),
    }
)


@dataclass(frozen=True)
class ReplaySummary:
    """The headline numbers of one replay."""

    overflow: bool
    overflow_ts: datetime | None
    peak_blocks: int
    peak_bytes: int | None
    preemptions: int
    preempted_requests: int
    rejections: int
    rejected_too_large: int
    requests: int
    finished: int
    queue_delay_p50_s: float | None
    queue_delay_p99_s: float | None
    queue_delay_max_s: float | None
    end_ts: datetime | None
    max_running: int

    def to_json(self) -> dict[str, Any]:
        return {
            "overflow": self.overflow,
            "overflow_ts": iso_time(self.overflow_ts, 6),
            "peak_blocks": self.peak_blocks,
            "peak_bytes": self.peak_bytes,
            "preemptions": self.preemptions,
            "preempted_requests": self.preempted_requests,
            "rejections": self.rejections,
            "rejected_too_large": self.rejected_too_large,
            "requests": self.requests,
            "finished": self.finished,
            "queue_delay_p50_s": _round(self.queue_delay_p50_s),
            "queue_delay_p99_s": _round(self.queue_delay_p99_s),
            "queue_delay_max_s": _round(self.queue_delay_max_s),
            "end_ts": iso_time(self.end_ts, 6),
            "max_running": self.max_running,
        }

    @property
    def passes(self) -> bool:
        """What ``--search`` looks for: the pool never ran dry, nothing was preempted, and no
        request was turned away for being larger than the pool."""
        return not self.overflow and self.preemptions == 0 and self.rejected_too_large == 0


@dataclass(frozen=True)
class TimeModel:
    """How service times were obtained, counted per source, for the reader of a result."""

    output_sources: dict[str, int]
    prefill_sources: dict[str, int]
    decode_sources: dict[str, int]
    decode_fallback_tokens_per_s: float | None
    prefill_fallback_tokens_per_s: float | None

    def to_json(self) -> dict[str, Any]:
        return {
            "output_tokens": self.output_sources,
            "prefill": self.prefill_sources,
            "decode": self.decode_sources,
            "decode_fallback_tokens_per_s": _round(self.decode_fallback_tokens_per_s),
            "prefill_fallback_tokens_per_s": _round(self.prefill_fallback_tokens_per_s),
            "assumption": "service times are the recorded ones and do not change with load",
        }


@dataclass(frozen=True)
class ReplayResult:
    """One replay: its settings, summary, pool series (:data:`SERIES_SCHEMA`, empty when not
    asked for) and per-request :attr:`outcomes`, built from the run when first read."""

    settings: ReplaySettings
    summary: ReplaySummary
    series: pl.DataFrame
    time_model: TimeModel
    notes: tuple[str, ...] = field(default=())
    outcomes_of: Callable[[], pl.DataFrame] = field(
        default=lambda: pl.DataFrame(schema=OUTCOME_SCHEMA), repr=False, compare=False
    )

    @cached_property
    def outcomes(self) -> pl.DataFrame:
        """One row per request (:data:`OUTCOME_SCHEMA`): replayed admission, finish, queueing
        delay, preemptions and outcome."""
        return self.outcomes_of()

    def to_json(self) -> dict[str, Any]:
        return {
            **self.summary.to_json(),
            "settings": self.settings.to_json(),
            "time_model": self.time_model.to_json(),
            "notes": list(self.notes),
        }


def _round(value: float | None, digits: int = 6) -> float | None:
    return None if value is None else round(value, digits)
