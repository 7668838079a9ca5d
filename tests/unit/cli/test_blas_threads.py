"""The command line starts no BLAS thread pool: numpy's OpenBLAS threads would only spin."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# Threads of the process once the CLI and then numpy are imported (Linux lists them in /proc).
_THREADS = (
    "import os, sys, oomtrace.cli; loaded = 'numpy' in sys.modules; import numpy; "
    "print(loaded, len(os.listdir('/proc/self/task')), os.environ['OPENBLAS_NUM_THREADS'])"
)


def _run(env: dict[str, str]) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", _THREADS], capture_output=True, text=True, check=True, env=env
    )
    return out.stdout.split()


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="Linux lists threads in /proc")
def test_cli_starts_no_blas_threads() -> None:
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    loaded, threads, setting = _run(env)
    assert loaded == "False"  # the setting is made before numpy is imported
    assert (threads, setting) == ("1", "1")
    # A user's own setting wins: OpenBLAS then starts its thread (one per core, up to the setting).
    expected = "2" if (os.cpu_count() or 1) >= 2 else "1"
    assert _run({**env, "OPENBLAS_NUM_THREADS": "2"})[1:] == [expected, "2"]
