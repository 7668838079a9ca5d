"""The fast simulator: no event per token. Plain Python and NumPy, compiled with numba for large
workloads (:mod:`oomtrace.replay.compiled`); the same functions run uncompiled for small ones.

Events are arrivals, admissions, prefill ends, finishes, and block boundaries. A request's
block boundaries are computed in closed form (after its prefill it produces one token every
``dl`` nanoseconds, so it starts a new block every ``block_size * dl``), and only the next one of
each running request sits in a heap, so the pool level ``U`` is exact at every instant for
O(log running) work per block, 1/block_size of the work of a per-token simulation. An
exhaustion is found where it happens, at the boundary that takes the level over the pool; no
search is needed.

The semantics (which :mod:`oomtrace.replay.reference` implements token by token, and the tests
check both agree) are in :mod:`oomtrace.replay.settings`. Times are int64 nanoseconds from the first
arrival, so both simulators compute identical instants.

Arrays in, arrays out: everything here is numba-typed; :mod:`oomtrace.replay.runner` wraps it.

Compiled, an array costs atomic reference counting (numba's ``NRT_incref``/``NRT_decref``)
wherever a name is bound to it: a function's argument, an inlined helper's parameter, a new array
assigned to a name. numba's pruning pass removes a count and its release when the release follows
every path from the count, and not otherwise; ``perf`` once put 70 % of the kernel's time in the
counting that was left. So the event loop allocates every array before it starts and never binds
a name to another (heaps and the event log have a fixed width: see
:mod:`~oomtrace.replay.kernel.heaps`), helpers return numbers only, and each helper reads every
array it takes on every path, last of all: values read into names first, branches on the names,
no early ``return``, a flag in place of ``break``, a loop that runs zero times in place of an
``if`` around one. A function that calls another compiled apart keeps the counting of every
array it takes (numba 0.68): ``_admit_pass`` calling ``_sync`` and ``_heap_room`` counted its
14 arrays on each of a day's two million admission passes, about 40 % of the loop's time, so
both are inlined and the admission pass calls nothing compiled apart.
The parts: :mod:`~oomtrace.replay.kernel.layout` (codes, state columns, one request's closed
forms), :mod:`~oomtrace.replay.kernel.heaps` (event heaps in preallocated arrays),
:mod:`~oomtrace.replay.kernel.level` (the pool's level, exact, bounded, or boundary by
boundary), :mod:`~oomtrace.replay.kernel.admission` (queue, admission, finish, preemption) and
:mod:`~oomtrace.replay.kernel.loop` (the event loop); beside them,
:mod:`~oomtrace.replay.kernel.grouping` groups a large trace's rows into requests. Nothing here
imports numba: ``_jit`` and ``_inline`` only mark how :mod:`oomtrace.replay.compiled` compiles
each function, all of them in one namespace (so that they call one another compiled).
"""

from __future__ import annotations

from typing import Final

from oomtrace.replay.kernel import admission, grouping, heaps, layout, level, loop
from oomtrace.replay.kernel.layout import (
    COMPILE_AS,
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

# the modules whose marked functions compile together, in dependency order
MODULES: Final = (layout, heaps, level, admission, loop, grouping)

__all__ = [
    "COMPILE_AS",
    "LOG_ADMIT",
    "LOG_FINISH",
    "LOG_PREEMPT",
    "LOG_REJECT",
    "MODULES",
    "ON_DEMAND",
    "RESERVE",
    "S_ADMIT",
    "S_FINISH",
    "S_NPRE",
    "S_REASON",
    "simulate",
]
