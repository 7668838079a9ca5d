"""The leak check compares the levels memory returns to while the engine serves."""

from __future__ import annotations

from oomtrace.analysis import analyze
from tests.factories import at, events
from tests.unit.analysis.test_anchoring import GiB, _device, _requests, _starting, _trace


def test_memory_loaded_at_start_up_is_not_a_leak() -> None:
    # GIVEN an engine that loaded its memory in its first 30 s, then served at a flat level with
    # idle stretches, and ran out of memory at t=290 s
    oom = events(
        {"ts": at(290), "kind": "oom", "requested_bytes": 4 * GiB, "total_bytes": 80 * GiB,
         "free_bytes": 2 * GiB},
    )  # fmt: skip
    trace = _trace(_device(_starting), _requests(60, 120, 180, 240, length=15), oom)
    # WHEN it is analysed
    findings = analyze(trace)
    # THEN the OOM is not blamed on a leak: the level at idle moments never rose while serving
    assert findings.primary is not None
    leak = next(c for c in findings.primary.checks if c.cls == "leak")
    assert not leak.matched, leak.reason
