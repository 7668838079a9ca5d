"""Invariants of the replay, and the fast simulator agreeing with the per-token reference."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from oomtrace.replay import ReplaySettings, Workload, compiled, replay, runner, search
from oomtrace.replay.compiled import Engine
from oomtrace.replay.reference import simulate_reference
from tests.unit.replay import strategies

OUTCOME_COLUMNS = [5, 6, 7, 8]
# the kernel as plain Python, and in C ("compiled") where it was built
ENGINES = [
    "python",
    pytest.param(
        "compiled",
        marks=pytest.mark.skipif(not compiled.available(), reason="the C kernel is not built"),
    ),
]  # first admission, finish, preemptions, rejection reason


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
@settings(max_examples=300, deadline=None)
@given(strategies.workloads(), strategies.settings(), st.integers(1, 20))
def test_fast_and_per_token_simulators_agree_exactly(
    engine: Engine, workload: Workload, replay_settings: ReplaySettings, step_quarters: int
) -> None:
    # GIVEN a random small trace, random limits and probes every few quarter-seconds
    arrays = runner.request_arrays(workload, replay_settings)
    probes = np.arange(0, 60 * 10**9, step_quarters * 250_000_000, dtype=np.int64)
    # WHEN both simulators run (the fast one as plain Python, and in C)
    fast = runner.simulate(workload, replay_settings, probes, arrays=arrays, engine=engine)
    state, series, totals = simulate_reference(
        arrays, replay_settings.kv_blocks, runner.limits_array(replay_settings), probes
    )
    # THEN every request's outcome, every series point and every total is identical
    np.testing.assert_array_equal(fast.state[:, OUTCOME_COLUMNS], state[:, OUTCOME_COLUMNS])
    np.testing.assert_array_equal(fast.series, series)
    np.testing.assert_array_equal(fast.totals, totals)


@pytest.mark.slow
@pytest.mark.parametrize("engine", ENGINES)
@settings(max_examples=200, deadline=None)
@given(strategies.workloads(), strategies.settings(), st.integers(1, 20))
def test_probes_that_read_only_the_level_change_nothing_else(
    engine: Engine, workload: Workload, replay_settings: ReplaySettings, step_quarters: int
) -> None:
    # GIVEN a random small trace and probes every few quarter-seconds
    arrays = runner.request_arrays(workload, replay_settings)
    probes = np.arange(0, 60 * 10**9, step_quarters * 250_000_000, dtype=np.int64)
    # WHEN it runs with probes that read only the level, and with none
    level = runner.simulate(
        workload, replay_settings, probes, arrays=arrays, peaks=False, engine=engine
    )
    plain = runner.simulate(workload, replay_settings, arrays=arrays, engine=engine)
    _, series, totals = simulate_reference(
        arrays, replay_settings.kv_blocks, runner.limits_array(replay_settings), probes
    )
    # THEN outcomes and totals are those of the run without probes, and the level, running and
    # waiting counts those the per-token reference reads
    np.testing.assert_array_equal(level.state, plain.state)
    np.testing.assert_array_equal(level.totals, plain.totals)
    np.testing.assert_array_equal(level.totals, totals)
    np.testing.assert_array_equal(level.series[:, :3], series[:, :3])


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(strategies.workloads(), strategies.settings(policy="reserve"))
def test_reserve_never_holds_more_blocks_than_the_pool(
    workload: Workload, replay_settings: ReplaySettings
) -> None:
    # WHEN a trace is replayed reserving whole contracts
    result = replay(workload, replay_settings, series_points=50)
    # THEN the pool never runs dry, nothing is preempted and no reading exceeds the pool
    assert result.summary.overflow is False
    assert result.summary.preemptions == 0
    assert result.summary.peak_blocks <= replay_settings.kv_blocks
    assert (result.series["kv_blocks_peak"] <= replay_settings.kv_blocks).all()


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(strategies.workloads(), strategies.settings(policy="on-demand"))
def test_a_pool_as_large_as_the_unlimited_peak_never_preempts_and_changes_nothing(
    workload: Workload, replay_settings: ReplaySettings
) -> None:
    # GIVEN the peak the traffic reaches when the pool is effectively unlimited (and the queue
    # too: a request the queue turned away never ran, so the peak says nothing about its size)
    replay_settings = replace(replay_settings, max_waiting=None)
    unlimited = replace(replay_settings, kv_blocks=10**9)
    free = replay(workload, unlimited, series_points=0)
    assume(free.summary.peak_blocks > 0)
    # WHEN replayed in a pool of exactly that size
    sized_settings = replace(replay_settings, kv_blocks=free.summary.peak_blocks)
    sized = replay(workload, sized_settings, series_points=0)
    # THEN it never runs dry and every request fares exactly as in the unlimited pool
    assert sized.summary.preemptions == 0
    assert sized.summary.overflow is False
    assert_frame_equal(sized.outcomes, free.outcomes)


@settings(max_examples=60, deadline=None)
@given(strategies.workloads(max_requests=8), strategies.settings(policy="on-demand"))
def test_search_returns_a_passing_setting_whose_next_value_fails(
    workload: Workload, replay_settings: ReplaySettings
) -> None:
    # WHEN searching for the largest max_num_seqs with no overflow and no preemption
    found = search(workload, replay_settings, "max-num-seqs", series_points=0)
    verdicts = {}
    for value in range(found.low, found.high + 1):
        run = replay(workload, replace(replay_settings, max_num_seqs=value), series_points=0)
        verdicts[value] = run.summary.passes
    # THEN the best value passes and the next one fails (unless it is the end of the range)
    if found.best_value is None:
        assert verdicts[found.low] is False
        return
    assert verdicts[found.best_value] is True
    assert found.best_value == found.high or verdicts[found.best_value + 1] is False
    # AND where passing is monotone it is the largest passing value
    ordered = [verdicts[v] for v in sorted(verdicts)]
    if ordered == sorted(ordered, reverse=True):
        assert found.best_value == max(v for v, ok in verdicts.items() if ok)
