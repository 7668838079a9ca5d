"""Which simulator a replay runs (plain Python or compiled) and where the compiled one is cached."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import pytest

from oomtrace.errors import UsageError
from oomtrace.replay import compiled, kernel


def _compiled_stand_in(*args: Any) -> Any:
    raise AssertionError("only compared, never called")


@pytest.fixture
def compiled_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    # the compiled kernel as if this process had loaded it (compiling costs half a minute)
    monkeypatch.setattr(compiled, "_compiled", {"simulate": _compiled_stand_in})


def test_the_cache_lives_in_the_users_cache_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("OOMTRACE_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert compiled.cache_dir() == tmp_path / "xdg" / "oomtrace" / "numba"
    monkeypatch.setenv("OOMTRACE_CACHE_DIR", str(tmp_path / "own"))
    assert compiled.cache_dir() == tmp_path / "own" / "numba"


@pytest.mark.usefixtures("compiled_loaded")
def test_small_workloads_run_as_python_and_large_ones_compiled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OOMTRACE_REPLAY_ENGINE", raising=False)
    assert compiled.simulator(compiled.CROSSOVER_REQUESTS - 1) is kernel.simulate
    assert compiled.simulator(compiled.CROSSOVER_REQUESTS) is _compiled_stand_in
    assert compiled.simulator(compiled.COLD_CROSSOVER_REQUESTS) is _compiled_stand_in


def test_while_nothing_is_compiled_python_runs_up_to_the_cold_crossover(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("OOMTRACE_REPLAY_ENGINE", raising=False)
    monkeypatch.setenv("OOMTRACE_CACHE_DIR", str(tmp_path))  # an empty cache
    monkeypatch.setattr(compiled, "_compiled", {})
    assert compiled.simulator(compiled.COLD_CROSSOVER_REQUESTS - 1) is kernel.simulate


@pytest.mark.usefixtures("compiled_loaded")
def test_the_environment_overrides_the_choice_by_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OOMTRACE_REPLAY_ENGINE", "python")
    assert compiled.simulator(10**7) is kernel.simulate
    monkeypatch.setenv("OOMTRACE_REPLAY_ENGINE", "compiled")
    assert compiled.simulator(1) is _compiled_stand_in
    # an explicit engine (the tests' and the benchmark's) wins over the environment
    assert compiled.simulator(1, "python") is kernel.simulate
    monkeypatch.setenv("OOMTRACE_REPLAY_ENGINE", "fast")
    with pytest.raises(UsageError, match="OOMTRACE_REPLAY_ENGINE='fast'"):
        compiled.simulator(1)


def test_loading_the_kernel_pauses_the_collector_and_freezes_what_it_made() -> None:
    # GIVEN the cyclic collector running
    assert gc.isenabled()
    frozen = gc.get_freeze_count()
    # WHEN objects are made while the kernel loads
    with compiled._collector_paused():
        assert not gc.isenabled()  # THEN no collection runs meanwhile
        made = [[index] for index in range(100)]
    # THEN it runs again afterwards, and leaves what was made (and all before) out of its passes
    assert gc.isenabled()
    assert gc.get_freeze_count() >= frozen + len(made)
    gc.unfreeze()


def test_a_collector_paused_by_the_caller_stays_paused() -> None:
    gc.disable()
    try:
        with compiled._collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
        gc.unfreeze()
