"""numba's compiled code is cached in the user's cache directory, never in the package."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import oomtrace


def test_numba_caches_in_the_users_cache_not_the_package(tmp_path: Path) -> None:
    # GIVEN a user whose cache directory is empty and who chose no numba folder
    env = {
        k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "OOMTRACE_CACHE_DIR")
    }
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    # WHEN the vLLM scanner is compiled in a fresh process
    code = "from oomtrace.ingest.vllm import scanned_chunk as s; s.warm(); print(s.cached())"
    package = Path(oomtrace.__file__).parent
    before = set(package.rglob("__pycache__/*.nb[ic]"))  # an older checkout's may be there
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    # THEN its code is in the user's cache, and nothing was written beside the package's modules
    assert done.stdout.strip() == "True"
    cached = list((tmp_path / "cache" / "oomtrace" / "numba").rglob("*.nbi"))
    assert any("line_scanner" in path.name for path in cached)
    assert set(package.rglob("__pycache__/*.nb[ic]")) == before


def test_a_folder_the_user_chose_is_kept(tmp_path: Path) -> None:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "mine")}
    code = "import oomtrace, os; print(os.environ['NUMBA_CACHE_DIR'])"
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == str(tmp_path / "mine")
