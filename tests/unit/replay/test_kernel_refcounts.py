"""The compiled kernel keeps numba's reference counting out of its event loop (the rule of
:mod:`oomtrace.replay.kernel`: helpers read every array they take on every path, last of all;
the "numpy" error model). Broken, ``perf`` once put 70 % of the kernel's time in the counting.

Read from the LLVM code numba makes, which it shows only for code it compiled in this process:
the test compiles the kernel into an empty cache (about ten CPU seconds), so it is marked slow.
Checked against breaking it: compiled with the "python" error model, ``_admit_pass`` counts 21
increfs and 49 decrefs, ``_sync`` 7 and 7, ``_preempt_until_fits`` 6 and 12, and the test fails.
Under numba 0.68 the helpers' own rule is not seen here: a row bound to a name in ``_sync`` and
``_level_at``, or an early return in ``_bound`` that leaves an array unread, compiled to the same
counts.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from oomtrace.replay import ReplaySettings, compiled, replay, workload_from_arrays

# Calls of NRT_incref and NRT_decref in each compiled function's own body (the Python wrapper
# and the functions it calls are counted apart), as the kernel compiles today: each count sits
# where a helper that is not inlined takes or returns its arrays, not in the loop. A change that
# leaves a count around an array on one path of a helper raises these.
# The admission pass runs after almost every event: it counted its 14 arrays on each pass while
# it called ``_sync`` and ``_heap_room`` compiled apart (both are inlined now, as is ``_heap_top``,
# which the loop calls three times an event).
CEILINGS = {
    "simulate": (11, 16),  # 11: the state matrix, an argument since 2026-12, is returned
    "_admit_pass": (0, 0),
    "_preempt_until_fits": (0, 0),
    "_cross": (0, 0),
}


def _bodies(llvm: str) -> dict[str, str]:
    """The module's function definitions by the name numba mangled (wrappers excluded)."""
    bodies = {}
    for block in re.split(r"^define ", llvm, flags=re.MULTILINE)[1:]:
        name = re.search(r'@"?([^"(]+)"?\(', block.split("\n", 1)[0])
        if name and name.group(1).startswith("_ZN8oomtrace"):
            bodies[name.group(1)] = block
    return bodies


@pytest.mark.slow
def test_the_event_loop_counts_no_references_beyond_its_ceiling(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # GIVEN the kernel compiled here, into an empty cache
    monkeypatch.setenv("OOMTRACE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setattr(compiled, "_compiled", {})
    monkeypatch.setattr(compiled, "dispatchers", {})
    workload = workload_from_arrays([0.0, 0.5, 1.0], [40, 50, 60], [8, 9, 10])
    settings = ReplaySettings(kv_blocks=6, block_size=16)
    monkeypatch.setenv("OOMTRACE_REPLAY_ENGINE", "compiled")
    replay(workload, settings, series_points=3)
    # WHEN the LLVM code of the event loop (with every helper it calls) is read
    (llvm,) = compiled.dispatchers["simulate"].inspect_llvm().values()
    bodies = _bodies(llvm)
    # THEN no function (each version of it) counts references more often than it does today
    over = {}
    for function, ceiling in CEILINGS.items():
        versions = [b for name, b in bodies.items() if re.search(rf"\d{function}B", name)]
        assert versions, f"{function} is not in the compiled event loop"
        for body in versions:
            counts = (body.count("@NRT_incref("), body.count("@NRT_decref("))
            if counts[0] > ceiling[0] or counts[1] > ceiling[1]:
                over[function] = counts
    assert not over, f"reference counts (incref, decref) above {CEILINGS}: {over}"
