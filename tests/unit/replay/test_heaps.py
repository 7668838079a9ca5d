"""The kernel's event heaps (fixed capacity, stale entries dropped lazily) against a plain model,
and the event log sized by its caller."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oomtrace.replay import ReplaySettings, Workload, runner
from oomtrace.replay.kernel import heaps, layout, simulate
from tests.unit.replay import strategies
from tests.unit.replay.test_scenarios import two_requests

# (operation, request, time): push a new entry for the request (its older ones go stale, as at
# an admission), retire the request (its entry goes stale, as at a finish or preemption), or pop
# the live top. Few requests and few times: the heap fills up and keys collide.
OPERATIONS = st.lists(
    st.tuples(st.sampled_from(["push", "retire", "pop"]), st.integers(0, 5), st.integers(0, 3)),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(OPERATIONS)
def test_heaps_pop_live_entries_in_time_then_request_order(
    operations: list[tuple[str, int, int]],
) -> None:
    # GIVEN a heap as wide as the workload (6 requests), so that stale entries fill it
    requests = 6
    h = np.empty((3, requests), dtype=np.int64)
    state = np.zeros((requests, layout.NCOL), dtype=np.int64)
    size = 0
    live: dict[int, int] = {}  # the model: request -> time of its live entry
    for operation, i, t in operations:
        # WHEN entries are pushed, go stale and are popped in any order
        if operation == "push":
            state[i, layout.S_VER] += 1
            size = heaps._heap_room(h, size, state)
            size = heaps._heap_push(h, size, t, i, int(state[i, layout.S_VER]))
            live[i] = t
        elif operation == "retire":
            state[i, layout.S_VER] += 1
            live.pop(i, None)
        size, top = heaps._heap_top(h, size, state)
        # THEN the top is the live entry of the earliest time, ties to the lowest request, or
        # none on an empty heap; a full heap always had room
        expected = min(((when, r) for r, when in live.items()), default=None)
        assert top == (layout.INF if expected is None else expected[0])
        assert size <= requests
        if expected is not None:
            assert h[1, 0] == expected[1]
        if operation == "pop" and expected is not None:
            size = heaps._heap_pop(h, size)
            del live[expected[1]]


@settings(max_examples=200, deadline=None)
@given(strategies.workloads(), strategies.settings())
def test_the_event_log_keeps_every_row_however_many_preemptions(
    workload: Workload, replay_settings: ReplaySettings
) -> None:
    # GIVEN a random small trace replayed with its event log kept
    arrays = runner.request_arrays(workload, replay_settings)
    kept = runner.simulate(workload, replay_settings, arrays=arrays, record=True, engine="python")
    # WHEN the kernel runs with room for far more rows than any run writes
    wide = runner.limits_array(replay_settings, log_rows=10_000)
    *_, log = simulate(
        arrays["arr"], arrays["p"], arrays["o"], arrays["pre"], arrays["dl"], arrays["res"],
        replay_settings.kv_blocks, wide, np.empty(0, dtype=np.int64),
        runner.state_matrix(workload.size),
    )  # fmt: skip
    # THEN the log the runner sized (rerun when preemptions outgrew it) is the same
    np.testing.assert_array_equal(kept.log, log)
    assert kept.log.shape[1] <= runner.log_rows(workload.size, int(kept.totals[2]))


def test_a_log_too_narrow_drops_rows_and_never_writes_past_its_width() -> None:
    # GIVEN two requests, replayed with room for a single row (they need several)
    one = ReplaySettings(kv_blocks=4, block_size=4)
    arrays = runner.request_arrays(two_requests(), one)
    # WHEN the kernel runs
    *_, log = simulate(
        arrays["arr"], arrays["p"], arrays["o"], arrays["pre"], arrays["dl"], arrays["res"],
        one.kv_blocks, runner.limits_array(one, log_rows=1), np.empty(0, dtype=np.int64),
        runner.state_matrix(2),
    )  # fmt: skip
    # THEN it returns only the row it had room for
    assert log.shape == (4, 1)


@pytest.mark.parametrize("requests", [1, 3])
def test_an_empty_heap_has_no_top(requests: int) -> None:
    h = np.empty((3, requests), dtype=np.int64)
    state = np.zeros((requests, layout.NCOL), dtype=np.int64)
    assert heaps._heap_top(h, 0, state) == (0, layout.INF)
