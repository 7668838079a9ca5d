"""numba's compiled code is cached in the user's cache directory, never in the package."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import oomtrace


def test_numba_caches_in_the_users_cache_not_the_package(tmp_path: Path) -> None:
    # GIVEN a user whose cache directory is empty and who chose no numba folder, and a module
    # that imports oomtrace before it compiles (as the replay's kernel is compiled)
    env = {
        k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "OOMTRACE_CACHE_DIR")
    }
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    module = tmp_path / "tiny_kernel.py"
    module.write_text(
        "import oomtrace\nfrom numba import njit\n\n\n@njit(cache=True)\n"
        "def twice(x):\n    return 2 * x\n\n\nprint(twice(21))\n"
    )
    package = Path(oomtrace.__file__).parent
    before = set(package.rglob("__pycache__/*.nb[ic]"))  # an older checkout's may be there
    # WHEN it is compiled in a fresh process
    done = subprocess.run(
        [sys.executable, str(module)], env=env, capture_output=True, text=True, check=True
    )
    # THEN its code is in the user's cache, and nothing was written beside the package's modules
    assert done.stdout.strip() == "42"
    cached = list((tmp_path / "cache" / "oomtrace" / "numba").rglob("*.nbi"))
    assert any("tiny_kernel" in path.name for path in cached)
    assert set(package.rglob("__pycache__/*.nb[ic]")) == before
    assert not list(tmp_path.glob("__pycache__/*.nb[ic]"))


def test_a_folder_the_user_chose_is_kept(tmp_path: Path) -> None:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "mine")}
    code = "import oomtrace, os; print(os.environ['NUMBA_CACHE_DIR'])"
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == str(tmp_path / "mine")
