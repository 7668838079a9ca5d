"""Options of an analysis, and the duration syntax the CLI accepts (``60s``, ``2m``, ``500ms``)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

from oomtrace.analysis.kvmodel import SequenceBytes
from oomtrace.analysis.limits import LimitSearch
from oomtrace.analysis.step_bytes import ModelDims
from oomtrace.errors import UsageError
from oomtrace.units import MiB

_DURATION = re.compile(r"^\s*(?P<number>\d+(?:\.\d*)?|\.\d+)\s*(?P<unit>ms|s|m|min|h)\s*$")
_SECONDS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def parse_duration(text: str, *, what: str = "duration") -> float:
    """Seconds in ``"60s"``, ``"2m"``, ``"1.5h"``, ``"500ms"``. A bare number is refused: a
    window of ``60`` could be seconds or minutes, and the two differ by 60 times."""
    match = _DURATION.match(text)
    if match is None:
        raise UsageError(f"{what} {text!r} is not a duration; write e.g. '60s', '2m' or '500ms'")
    seconds = float(match.group("number")) * _SECONDS[match.group("unit")]
    if seconds <= 0:
        raise UsageError(f"{what} {text!r} must be longer than zero")
    return seconds


@dataclass(frozen=True)
class AnalyzeOptions:
    """What :func:`oomtrace.analysis.analyze` may be told.

    ``window_s`` is the look-back before each peak: requests resident or admitted in it are
    materialised one by one, growth is measured over it, and a rise counts as a spike when it
    happens within it. ``kv_spec`` is the architecture's KV rule (``oomtrace.budget.kv_spec``);
    without it, bytes per token come from the engine's own startup statements.
    ``limit_search`` replays a KV exhaustion's traffic to size its remedy
    (:mod:`oomtrace.analysis.limits`); ``model_dims`` are the model's vocabulary, hidden and
    MLP widths (:mod:`oomtrace.analysis.step_bytes`), which size the memory of one step.
    """

    window_s: float = 60.0
    top_culprits: int = 10
    max_incidents: int = 5
    node: str | None = None
    kv_spec: SequenceBytes | None = None
    kv_spec_label: str = "architecture"
    limit_search: LimitSearch | None = None
    model_dims: ModelDims | None = None
    # A rise counts as a spike when it is at least this many bytes and this share of capacity.
    min_rise_bytes: int = 256 * MiB
    min_rise_fraction: float = 0.05
    # A KV pool at or above this share of its blocks is full (vLLM preempts near 100 %).
    kv_full_ratio: float = 0.95
    # Series in the findings: full resolution inside incident windows, elsewhere the minimum and
    # maximum of each of this many time buckets (peaks survive). The JSON document keeps fewer.
    series_buckets: int = 5000
    json_series_buckets: int = 1000
    # A trace of more sample and request rows than this is analysed in windows
    # (:mod:`oomtrace.analysis.windowed`): its memory bounded by the incident windows.
    windowed_above_rows: int = 4_000_000

    def __post_init__(self) -> None:
        if self.window_s <= 0:
            raise UsageError(f"--window must be longer than zero, not {self.window_s} s")
        if self.top_culprits < 1:
            raise UsageError(f"--top must be at least 1, not {self.top_culprits}")
        if not 0 < self.kv_full_ratio <= 1:
            raise UsageError(f"kv_full_ratio must be in (0, 1], not {self.kv_full_ratio}")

    def to_json(self) -> dict[str, Any]:
        """The options the findings document records (those that shape its figures)."""
        return {
            "window_s": self.window_s,
            "top_culprits": self.top_culprits,
            "max_incidents": self.max_incidents,
            "min_rise_bytes": self.min_rise_bytes,
            "min_rise_fraction": self.min_rise_fraction,
            "kv_full_ratio": self.kv_full_ratio,
            "series_buckets": self.series_buckets,
            "json_series_buckets": self.json_series_buckets,
            "node": self.node,
        }
