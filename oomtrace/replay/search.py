"""Find the admission setting that would have kept the pool from running dry, and its cost.

``max-num-seqs`` and ``max-num-batched-tokens``: the *largest* value that passes (the least
queueing). ``kv-blocks``: the *smallest* pool that passes (the least memory). "Passes" is
:attr:`ReplaySummary.passes`: no overflow, no preemption, nobody turned away as too large.

The search bisects, which assumes that passing is monotone in the setting. That is the usual
case but not a law: with first-come-first-served admission a larger pool can admit two long
requests together that a smaller pool would have run one after the other, and the pair can
then run the pool dry (a scheduling anomaly; the tests show one). The result therefore states
what was verified: the best value passes and its neighbour one step further fails (or the best
value is the end of the range, where the setting no longer binds). Every setting tried is kept.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Final, Literal

from oomtrace.errors import UsageError
from oomtrace.replay import runner
from oomtrace.replay.results import ReplayResult, ReplaySummary
from oomtrace.replay.settings import ReplaySettings
from oomtrace.replay.workload import Workload

SearchTarget = Literal["max-num-seqs", "max-num-batched-tokens", "kv-blocks"]
SEARCH_TARGETS: Final[tuple[SearchTarget, ...]] = (
    "max-num-seqs",
    "max-num-batched-tokens",
    "kv-blocks",
)
_UNBOUNDED: Final = 1 << 40  # a prefill budget or pool that can never bind


@dataclass(frozen=True)
class SearchResult:
    """The outcome of a search: the best value (None if even the most cautious end of the range
    fails), its full replay, and every (value, summary) tried in order."""

    target: SearchTarget
    goal: Literal["largest", "smallest"]
    low: int
    high: int
    best_value: int | None
    best: ReplayResult | None
    tried: tuple[tuple[int, ReplaySummary], ...]
    unbinding: bool  # the best value is where the setting stops binding at all

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "goal": self.goal,
            "range": [self.low, self.high],
            "best": None
            if self.best is None or self.best_value is None
            else {
                "setting": {self.target.replace("-", "_"): self.best_value},
                "setting_never_binds": self.unbinding,
                **self.best.to_json(),
            },
            "tried": [
                {"value": v, "passes": s.passes, **_short(s)}
                for v, s in sorted(self.tried, key=lambda item: item[0])
            ],
        }


def _short(summary: ReplaySummary) -> dict[str, Any]:
    full = summary.to_json()
    keys = ("overflow", "preemptions", "rejections", "queue_delay_p50_s", "queue_delay_p99_s")
    return {k: full[k] for k in keys}


def _with(settings: ReplaySettings, target: SearchTarget, value: int) -> ReplaySettings:
    if target == "max-num-seqs":
        return replace(settings, max_num_seqs=value)
    if target == "max-num-batched-tokens":
        return replace(settings, max_num_batched_tokens=value)
    return replace(settings, kv_blocks=value)


def _range(
    workload: Workload, settings: ReplaySettings, target: SearchTarget, arrays: dict[str, Any]
) -> tuple[int, int]:
    """The values worth trying: above ``high`` the setting no longer changes anything.
    ``arrays`` are the workload's simulator inputs (the same for every value of a target)."""
    if target == "max-num-seqs":
        raw = runner.simulate(workload, replace(settings, max_num_seqs=None), arrays=arrays)
        return 1, max(1, int(raw.totals[3]))
    if target == "max-num-batched-tokens":
        unbudgeted = replace(settings, max_num_batched_tokens=_UNBOUNDED)
        raw = runner.simulate(workload, unbudgeted, arrays=arrays)
        return 1, max(1, int(raw.totals[4]))
    raw = runner.simulate(workload, replace(settings, kv_blocks=_UNBOUNDED), arrays=arrays)
    largest_request = int(arrays["res"].max()) if workload.size else 1
    return largest_request, max(largest_request, int(raw.totals[0]))


def search(
    workload: Workload,
    settings: ReplaySettings,
    target: SearchTarget,
    *,
    low: int | None = None,
    high: int | None = None,
    series_points: int = runner.SERIES_POINTS,
) -> SearchResult:
    """Bisect ``target`` over ``[low, high]`` (by default the range where it binds)."""
    if target not in SEARCH_TARGETS:
        raise UsageError(f"--search {target!r}: choose one of {', '.join(SEARCH_TARGETS)}")
    arrays = runner.request_arrays(workload, settings)
    default_low, default_high = _range(workload, settings, target, arrays)
    low = default_low if low is None else low
    high = default_high if high is None else high
    if not 1 <= low <= high:
        raise UsageError(f"--search {target}: the range {low}..{high} is empty")
    tried: dict[int, ReplaySummary] = {}
    # the run of the last value that passed: the best one when the bisection ends (see bisect)
    passed: dict[int, runner.RawRun] = {}

    def passes(value: int) -> bool:
        if value not in tried:
            candidate = _with(settings, target, value)
            raw = runner.simulate(workload, candidate, arrays=arrays)
            tried[value] = runner.summarise(workload, candidate, raw)
            if tried[value].passes:
                passed.clear()
                passed[value] = raw
        return tried[value].passes

    goal: Literal["largest", "smallest"] = "smallest" if target == "kv-blocks" else "largest"
    best = bisect(passes, low, high, largest=goal == "largest")
    result = None
    if best is not None:
        chosen = _with(settings, target, best)
        if series_points > 0 or best not in passed:
            result = runner.replay(workload, chosen, series_points=series_points)
        else:  # without a series, the best value's run is the one the bisection made
            result = runner.result_from_raw(workload, chosen, passed[best], runner.empty_series())
    return SearchResult(
        target=target,
        goal=goal,
        low=low,
        high=high,
        best_value=best,
        best=result,
        tried=tuple(tried.items()),
        unbinding=best == default_high,
    )


def bisect(passes: Callable[[int], bool], low: int, high: int, *, largest: bool) -> int | None:
    """Largest (or smallest) value in ``[low, high]`` that passes, with the neighbour one step
    further failing; None when the cautious end (``low`` for largest, ``high`` for smallest)
    fails. The value returned is the last one that passed."""
    good, bad = (low, high) if largest else (high, low)
    if not passes(good):
        return None
    if passes(bad):
        return bad
    while abs(bad - good) > 1:
        mid = (good + bad) // 2
        if passes(mid):
            good = mid
        else:
            bad = mid
    return good
