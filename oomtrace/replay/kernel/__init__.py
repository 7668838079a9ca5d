"""The fast simulator: no event per token. Plain Python and NumPy: the reference of the C kernel
(``oomtrace/replay/_kernel.c``, a line-for-line port that runs at every size where the package
was built with it; :mod:`oomtrace.replay.compiled` chooses), and what runs where it was not.

Events are arrivals, admissions, prefill ends, finishes, and block boundaries. A request's
block boundaries are computed in closed form (after its prefill it produces one token every
``dl`` nanoseconds, so it starts a new block every ``block_size * dl``), and only the next one of
each running request sits in a heap, so the pool level ``U`` is exact at every instant for
O(log running) work per block, 1/block_size of the work of a per-token simulation. An
exhaustion is found where it happens, at the boundary that takes the level over the pool; no
search is needed.

The semantics (which :mod:`oomtrace.replay.reference` implements token by token, and the tests
check all three agree: ``tests/unit/replay/test_c_kernel.py``, ``test_properties.py``) are in
:mod:`oomtrace.replay.settings`. Times are int64 nanoseconds from the first arrival, so the
simulators compute identical instants.

Arrays in, arrays out: int64 arrays made before the event loop and updated in place (heaps and
the event log have a fixed width), helpers that return numbers only; the C port keeps that shape,
so the two read side by side. (The code was written for numba, which compiled it until the C
kernel replaced it: some helpers still read every array they take before branching, which numba
needed and plain Python does not mind.) :mod:`oomtrace.replay.runner` wraps it.

The parts: :mod:`~oomtrace.replay.kernel.layout` (codes, state columns, one request's closed
forms), :mod:`~oomtrace.replay.kernel.heaps` (event heaps in preallocated arrays),
:mod:`~oomtrace.replay.kernel.level` (the pool's level, exact, bounded, or boundary by
boundary), :mod:`~oomtrace.replay.kernel.admission` (queue, admission, finish, preemption) and
:mod:`~oomtrace.replay.kernel.loop` (the event loop); beside them,
:mod:`~oomtrace.replay.kernel.grouping` groups a large trace's rows into requests.
"""

from __future__ import annotations

from oomtrace.replay.kernel import grouping, layout
from oomtrace.replay.kernel.layout import (
    LOG_ADMIT,
    LOG_FINISH,
    LOG_PREEMPT,
    LOG_REJECT,
    ON_DEMAND,
    RESERVE,
    S_ADMIT,
    S_FINISH,
    S_NPRE,
    S_REASON,
)
from oomtrace.replay.kernel.loop import simulate

__all__ = [
    "LOG_ADMIT",
    "LOG_FINISH",
    "LOG_PREEMPT",
    "LOG_REJECT",
    "ON_DEMAND",
    "RESERVE",
    "S_ADMIT",
    "S_FINISH",
    "S_NPRE",
    "S_REASON",
    "grouping",
    "layout",
    "simulate",
]
