"""The replay kernel in C (``oomtrace/replay/_kernel.c``) gives, array for array, what its plain
Python reference (:mod:`oomtrace.replay.kernel`) gives, shares its codes, and refuses bad input
with a clear error. (Both against the per-token reference: ``test_properties.py``, run with the
engine "compiled", which is the C kernel.)"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oomtrace.replay import ReplaySettings, compiled, kernel, runner
from oomtrace.replay.kernel import grouping, layout

_kernel = pytest.importorskip("oomtrace.replay._kernel")

# what the C module exports and the Python kernel names the same way
SHARED = [
    name
    for name in dir(_kernel)
    if name.isupper()
    and name not in {"NLIMITS", "RECENT_SLOTS"}
    and not name.startswith(("E_", "G_"))
]


def test_the_c_kernel_shares_the_python_kernels_codes_and_columns() -> None:
    assert len(SHARED) > 40  # every column, slot, code and INF
    for name in SHARED:
        assert getattr(_kernel, name) == getattr(layout, name), name
    for name in dir(_kernel):
        if name.startswith(("E_", "G_")) or name == "RECENT_SLOTS":
            assert getattr(_kernel, name) == getattr(grouping, name), name
    # the limits runner.limits_array fills
    assert len(runner.limits_array(ReplaySettings(kv_blocks=1))) == _kernel.NLIMITS


@st.composite
def raw_workloads(draw: st.DrawFn) -> tuple[Any, ...]:
    """The kernel's own inputs, drawn directly: up to 40 requests with ties, both policies, every
    limit, pools from one block (everything rejected or preempted) up, probes anywhere, every
    width of event log (none, one row, fewer rows than events, room to spare) and both kinds of
    probe."""
    n = draw(st.integers(0, 40))
    ints = lambda lo, hi: st.lists(st.integers(lo, hi), min_size=n, max_size=n)  # noqa: E731
    arr = np.array(sorted(draw(ints(0, 400))), dtype=np.int64)
    p, o = np.array(draw(ints(0, 120)), np.int64), np.array(draw(ints(1, 60)), np.int64)
    pre, dl = np.array(draw(ints(1, 40)), np.int64), np.array(draw(ints(1, 12)), np.int64)
    block = draw(st.sampled_from([1, 2, 3, 16]))
    policy = draw(st.sampled_from([kernel.ON_DEMAND, kernel.RESERVE]))
    if policy == kernel.RESERVE:
        res = (p + np.maximum(o, np.array(draw(ints(1, 90)), np.int64)) + block - 1) // block
    else:
        res = (p + o - 1 + block - 1) // block
    limits = np.array(
        [
            block,
            policy,
            draw(st.sampled_from([0, 1, 2, 5])),  # max_num_seqs
            draw(st.sampled_from([0, 8, 64, 500])),  # prefill token budget
            draw(st.sampled_from([-1, 0, 1, 3])),  # max waiting
            draw(st.sampled_from([0, 1, 5, 400])),  # event log rows
            draw(st.sampled_from([0, 1])),  # peaks between probes
        ],
        dtype=np.int64,
    )
    probes = np.array(sorted(draw(st.lists(st.integers(0, 3000), max_size=25))), np.int64)
    pool = draw(st.integers(1, 150))
    return arr, p, o, pre, dl, res, pool, limits, probes


def _state(n: int) -> Any:
    return np.zeros((n, layout.NCOL), dtype=np.int64)


@settings(max_examples=400, deadline=None)
@given(raw_workloads())
def test_c_and_python_kernels_give_identical_arrays(workload: tuple[Any, ...]) -> None:
    # GIVEN any workload, policy, limits, pool, probes and event log width
    n = workload[0].shape[0]
    # WHEN both kernels run it
    python = kernel.simulate(*workload, _state(n))
    c = compiled.c_simulate(*workload, _state(n))
    # THEN the state, series, totals and event log are identical, shape and value
    for name, want, got in zip(("state", "series", "totals", "log"), python, c, strict=True):
        assert got.dtype == want.dtype, name
        np.testing.assert_array_equal(got, want, err_msg=name, strict=True)


def test_a_preempting_workload_is_logged_alike_past_the_logs_width() -> None:
    # GIVEN a tight pool that preempts, and an event log narrower than the events
    n = 30
    arr = np.arange(n, dtype=np.int64) * 3
    p, o = np.full(n, 40, np.int64), np.full(n, 50, np.int64)
    pre, dl = np.full(n, 5, np.int64), np.full(n, 2, np.int64)
    res = (p + o - 1 + 15) // 16
    limits = np.array([16, kernel.ON_DEMAND, 0, 0, -1, 7, 1], dtype=np.int64)
    probes = np.arange(0, 400, 10, dtype=np.int64)
    workload = (arr, p, o, pre, dl, res, 20, limits, probes)
    python = kernel.simulate(*workload, _state(n))
    c = compiled.c_simulate(*workload, _state(n))
    assert c[2][2] > 0  # preemptions happened
    assert c[3].shape == (4, 7)
    for want, got in zip(python, c, strict=True):
        np.testing.assert_array_equal(got, want, strict=True)


def _inputs(n: int = 3) -> list[Any]:
    one = np.ones(n, dtype=np.int64)
    limits = np.array([16, 0, 0, 0, -1, 0, 1], dtype=np.int64)
    return [one - 1, one, one, one, one, one, 10, limits, np.zeros(0, np.int64), _state(n)]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda a: a.__setitem__(4, np.array([1, 0, 1])), "request 1 has dl < 1"),
        (lambda a: a.__setitem__(2, np.array([1, 1, 0])), "request 2 has o < 1"),
        (lambda a: a.__setitem__(1, np.ones(2, np.int64)), "p has 2 rows, arr 3"),
        (lambda a: a.__setitem__(7, a[7][:5]), "limits must hold 7 values"),
        (lambda a: a[7].__setitem__(0, 0), "block size >= 1"),
        (lambda a: a.__setitem__(9, _state(2)), "st must be"),
        (lambda a: a.__setitem__(9, _state(3).astype(np.int32)), "st: expected"),
        (lambda a: a.__setitem__(9, np.asfortranarray(_state(3))), "st: expected a C-contig"),
    ],
)
def test_bad_input_is_a_value_error_naming_it(change: Any, message: str) -> None:
    args = _inputs()
    change(args)
    with pytest.raises(ValueError, match=message):
        compiled.c_simulate(*args)


def test_the_state_is_written_in_place_and_read_only_inputs_are_taken() -> None:
    args = _inputs()
    for array in args[:6]:
        array.flags.writeable = False  # as Polars hands its columns over
    state = args[-1]
    out = compiled.c_simulate(*args)
    assert out[0] is state
    assert (state[:, layout.S_FINISH] >= 0).all()
