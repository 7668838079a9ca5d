"""The grouping of a trace's rows into requests by the kernel (in C, and its plain Python
reference) gives the workload exactly what Polars' grouping gives, in the same order; a hash
collision falls back to Polars."""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from oomtrace.replay import compiled, workload
from oomtrace.replay.kernel import grouping
from oomtrace.schema import REQUEST_EVENTS
from tests import factories
from tests.factories import at

counts = st.one_of(st.none(), st.integers(0, 5000))
needs_c = pytest.mark.skipif(
    not compiled.available(), reason="the C replay kernel (oomtrace.replay._kernel) is not built"
)


@st.composite
def request_rows(draw: st.DrawFn) -> pl.DataFrame:
    """Rows of a few requests in any order, every event kind, times with ties, counts stated on
    any row or none (the mess a log gives: no arrival, two ends, a rejection after admission)."""
    rows = [
        {
            "ts": at(draw(st.integers(0, 12)) / 4),
            "request_id": f"r{draw(st.integers(0, 6))}",
            "event": draw(st.sampled_from(REQUEST_EVENTS)),
            "prompt_tokens": draw(counts),
            "max_tokens": draw(counts),
            "output_tokens": draw(counts),
        }
        for _ in range(draw(st.integers(1, 30)))
    ]
    return factories.requests(*rows)


def _plain_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """The grouping chosen for every size, run as plain Python (the reference of the C code)."""
    plain = (grouping.group_ids, grouping.group_rows)
    monkeypatch.setattr(workload, "grouper", lambda rows, engine: plain)


@settings(max_examples=150, deadline=None)
@given(request_rows())
def test_the_kernels_grouping_and_polars_agree(frame: pl.DataFrame) -> None:
    # GIVEN any requests table; WHEN grouped by the kernel's functions and by Polars
    with pytest.MonkeyPatch.context() as patch:
        _plain_kernel(patch)
        kernel = workload._per_request(frame, "compiled")
    polars = workload._per_request(frame, "python")
    # THEN every request has the same arrival, counts, times and rejection, in the same order
    assert_frame_equal(kernel, polars)


@needs_c
@settings(max_examples=100, deadline=None)
@given(request_rows())
def test_the_c_grouping_and_polars_agree(frame: pl.DataFrame) -> None:
    assert_frame_equal(
        workload._per_request(frame, "compiled"), workload._per_request(frame, "python")
    )


# (numbering, rows of each request) as plain Python and in C
GROUPINGS = [
    pytest.param((grouping.group_ids, grouping.group_rows), id="python"),
    pytest.param((compiled.c_group_ids, compiled.c_group_rows), id="c", marks=needs_c),
]


@pytest.mark.parametrize("functions", GROUPINGS)
@pytest.mark.parametrize(
    "step",
    # keys differing in their upper bits (found again in the table of recent ids); keys alike
    # there, in one slot chain; keys that all take one slot of the recent ids (each evicts the
    # one before, so every key comes back through the large table)
    [2**40 + 7, 16, grouping.RECENT_SLOTS],
)
def test_ids_are_numbered_in_order_of_first_appearance_past_a_full_table(
    functions: Any, step: int
) -> None:
    # GIVEN more distinct keys than the first table holds, each seen twice
    keys = np.array([*range(40), *range(40)], dtype=np.uint64) * np.uint64(step)
    # WHEN numbered
    numbers, groups = functions[0](keys, keys, grouping.new_table(keys.size))
    # THEN each key keeps its number when it comes back, after the table has grown
    assert groups == 40
    np.testing.assert_array_equal(numbers, [*range(40), *range(40)])


@pytest.mark.parametrize("functions", GROUPINGS)
def test_two_ids_that_share_a_hash_are_found(functions: Any) -> None:
    # GIVEN two rows whose first hash is equal and whose second is not
    key = np.array([7, 7], dtype=np.uint64)
    check = np.array([1, 2], dtype=np.uint64)
    # THEN the numbering reports the collision
    assert functions[0](key, check, grouping.new_table(2))[1] == -1


@needs_c
@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.integers(0, 2**64 - 1), max_size=300),
    st.integers(0, 2**64 - 1),
    st.integers(1, 200),
    st.randoms(use_true_random=False),
)
def test_the_c_and_python_groupings_give_identical_arrays(
    distinct: list[int], multiplier: int, rows: int, rng: Any
) -> None:
    # GIVEN rows of ids drawn from a few keys (repeats, neighbours in the tables' slots, keys of
    # any bits), a second hash that collides now and then, any codes
    keys = distinct or [0]
    key = np.array([(rng.choice(keys) * multiplier) % 2**64 for _ in range(rows)], dtype=np.uint64)
    check = key ^ np.array([rng.random() < 0.01 for _ in range(rows)], dtype=np.uint64)
    code = np.array([rng.randrange(-128, 128) for _ in range(rows)], dtype=np.int8)
    # WHEN both number the rows and collect each request's rows
    python_ids, python_groups = grouping.group_ids(key, check, grouping.new_table(rows))
    c_ids, c_groups = compiled.c_group_ids(key, check, grouping.new_table(rows))
    # THEN the arrays are identical
    assert c_groups == python_groups
    np.testing.assert_array_equal(c_ids, python_ids)
    groups = int(python_ids.max()) + 1  # -1 where a hash collided: the rows still number
    np.testing.assert_array_equal(
        compiled.c_group_rows(c_ids, groups, code),
        grouping.group_rows(python_ids, groups, code),
    )


def test_a_collision_falls_back_to_polars(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a grouping whose every key collides
    def colliding(key: Any, check: Any, table: Any) -> Any:
        return np.zeros(len(key), dtype=np.int32), -1

    monkeypatch.setattr(workload, "grouper", lambda rows, engine: (colliding, None))
    frame = factories.requests(
        {"ts": at(0), "request_id": "a", "event": "arrived", "prompt_tokens": 5},
        {"ts": at(1), "request_id": "b", "event": "arrived", "prompt_tokens": 6},
        {"ts": at(2), "request_id": "a", "event": "finished", "output_tokens": 3},
    )
    # WHEN the requests are grouped: THEN they are Polars' requests, not one merged request
    per = workload._per_request(frame, "compiled")
    assert per["request_id"].to_list() == ["a", "b"]
    assert per["recorded_output"].to_list() == [3, None]


@needs_c
def test_a_table_is_grouped_in_c_where_its_workload_replays_in_c(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OOMTRACE_REPLAY_ENGINE", raising=False)
    rows = compiled.CROSSOVER_REQUESTS * compiled.ROWS_PER_REQUEST
    assert compiled.grouper(rows) == (compiled.c_group_ids, compiled.c_group_rows)
    assert compiled.grouper(rows, "python") is None


@needs_c
def test_bad_arrays_are_refused_with_the_argument_named() -> None:
    key = np.zeros(3, dtype=np.uint64)
    with pytest.raises(ValueError, match="table: expected a C-contiguous writable"):
        compiled.c_group_ids(key, key, np.zeros((4, 2), dtype=np.uint64)[::2])
    with pytest.raises(ValueError, match="power of two"):
        compiled.c_group_ids(key, key, np.zeros((3, 2), dtype=np.uint64))
    with pytest.raises(ValueError, match=r"each id in \[0, groups\)"):
        compiled.c_group_rows(np.array([0, 5], dtype=np.int32), 2, np.zeros(2, dtype=np.int8))
