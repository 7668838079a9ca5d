"""The compiled kernel's cache is named by the kernel's sources alone: two checkouts of the same
sources (at different paths) share one compiled kernel, and different sources never meet."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import oomtrace
from oomtrace.replay import compiled

# A tiny workload replayed compiled in its own process, from the checkout on its path.
REPLAY = """
from oomtrace.replay import ReplaySettings, replay, workload_from_arrays
w = workload_from_arrays([0.0, 0.5, 1.0], [40, 50, 60], [8, 9, 10])
print(replay(w, ReplaySettings(kv_blocks=6, block_size=16), series_points=0).summary.preemptions)
"""


def test_identical_sources_at_other_paths_have_one_name_and_other_sources_another() -> None:
    sources = {"pkg.kernel.loop": b"def f():\n    return 1\n"}
    same = compiled.source_digest(dict(sources))
    assert compiled.source_digest(sources) == same
    assert compiled.source_digest({"pkg.kernel.loop": b"def f():\n    return 2\n"}) != same
    assert compiled.source_digest({"pkg.kernel.heaps": sources["pkg.kernel.loop"]}) != same


def test_the_kernels_sources_are_copied_under_their_digest(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # GIVEN an empty cache
    monkeypatch.setenv("OOMTRACE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    # WHEN the compiled functions' files are made
    copies = compiled._source_copies()
    # THEN each module's source is copied, unchanged, into the folder named by the digest
    folder = tmp_path / "numba" / f"replay-kernel-{compiled._source_digest()}" / "sources"
    assert set(copies) == {m.__name__ for m in compiled.kernel.MODULES}
    for module in compiled.kernel.MODULES:
        copy = Path(copies[module.__name__])
        assert copy.parent == folder
        assert copy.read_bytes() == Path(module.__file__ or "").read_bytes()


def test_a_cache_that_cannot_be_written_leaves_the_checkouts_files(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where the cache folder would be
    monkeypatch.setenv("OOMTRACE_CACHE_DIR", str(blocked))
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    assert compiled._source_copies() == {}


def _checkout(root: Path) -> Path:
    """A copy of the installed package at ``root`` (another checkout of the same sources)."""
    package = Path(oomtrace.__file__).parent
    shutil.copytree(package, root / "oomtrace", ignore=shutil.ignore_patterns("__pycache__"))
    return root


def _replay_in(checkout: Path, cache: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env |= {"OOMTRACE_CACHE_DIR": str(cache), "OOMTRACE_REPLAY_ENGINE": "compiled"}
    env["PYTHONPATH"] = str(checkout)
    done = subprocess.run(
        [sys.executable, "-c", REPLAY],
        check=False,
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _compiled_files(cache: Path) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in cache.rglob("*.nb[ic]")}


@pytest.mark.slow
def test_two_checkouts_of_the_same_sources_share_the_compiled_kernel(tmp_path: Path) -> None:
    # GIVEN two checkouts of the same sources at different paths and one user's cache
    first, second = _checkout(tmp_path / "a"), _checkout(tmp_path / "b")
    cache = tmp_path / "cache"
    # WHEN the first compiles the kernel, then the second replays
    printed = _replay_in(first, cache)
    after_first = _compiled_files(cache)
    assert _replay_in(second, cache) == printed
    # THEN the second compiled nothing: it loaded the first's code, and rewrote none of it
    assert after_first
    assert _compiled_files(cache) == after_first
