"""Waiting in tests: for an event, never for an amount of time.

A test that sleeps, or asserts that something happened within so many milliseconds, fails on a
loaded machine while the code is right. Tests wait for what they can observe (a file on disk, a
request served, a thread's count), bounded only by :data:`HANG_S`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

# Only keeps a broken run from hanging the suite: far beyond what any load makes a healthy run
# take (a loaded two-core machine can take seconds to start a Python process).
HANG_S: Final = 120.0


def wait_until(predicate: Callable[[], bool], *, poll_s: float = 0.01) -> bool:
    """Poll ``predicate`` until true (bounded by :data:`HANG_S`); the result, so a test can
    assert it."""
    deadline = time.monotonic() + HANG_S
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(poll_s)
    return predicate()
