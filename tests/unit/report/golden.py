"""Golden files: compared byte for byte, regenerated with ``OOMTRACE_UPDATE_GOLDEN=1`` and then
reviewed as a diff (``git diff tests/golden``)."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

GOLDEN = Path(__file__).resolve().parents[2] / "golden"
UPDATE_ENV = "OOMTRACE_UPDATE_GOLDEN"


def check_golden(relative: str, actual: str) -> None:
    path = GOLDEN / relative
    if os.environ.get(UPDATE_ENV) == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual, encoding="utf-8")
        return
    assert path.exists(), f"no golden file {relative}; run with {UPDATE_ENV}=1 and review it"
    expected = path.read_text(encoding="utf-8")
    if actual != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(keepends=True),
                actual.splitlines(keepends=True),
                f"golden/{relative}",
                "actual",
                n=2,
            )
        )
        raise AssertionError(
            f"{relative} differs from its golden file ({UPDATE_ENV}=1 regenerates it):\n"
            + diff[:6000]
        )
