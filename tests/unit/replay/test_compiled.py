"""Which simulator a replay runs: the C kernel, or plain Python where it was not built or asked
for."""

from __future__ import annotations

import logging
import os

import pytest

from oomtrace.errors import UsageError
from oomtrace.replay import compiled, kernel

needs_c = pytest.mark.skipif(
    not compiled.available(), reason="the C replay kernel (oomtrace.replay._kernel) is not built"
)


def test_the_c_kernel_is_built_where_ci_runs() -> None:
    # The kernel is optional (a machine without a C compiler replays with the Python functions),
    # so its tests skip where it is missing: CI must never test the fallback alone.
    if os.environ.get("CI", "").lower() not in ("1", "true", "yes"):
        pytest.skip("outside CI the C kernel may be missing (no C compiler)")
    assert compiled.available(), "oomtrace.replay._kernel was not built"


@needs_c
def test_every_workload_runs_in_c_where_it_was_built(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OOMTRACE_REPLAY_ENGINE", raising=False)
    for size in (0, 1, 10**7):
        assert compiled.simulator(size) is compiled.c_simulate
    assert compiled.grouper(4) == (compiled.c_group_ids, compiled.c_group_rows)


@needs_c
def test_the_environment_overrides_the_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OOMTRACE_REPLAY_ENGINE", "python")
    assert compiled.simulator(10**7) is kernel.simulate
    assert compiled.grouper(4 * 10**7) is None  # Polars groups for the Python kernel
    monkeypatch.setenv("OOMTRACE_REPLAY_ENGINE", "compiled")
    assert compiled.simulator(1) is compiled.c_simulate
    # an explicit engine (the tests' and the benchmark's) wins over the environment
    assert compiled.simulator(1, "python") is kernel.simulate
    monkeypatch.setenv("OOMTRACE_REPLAY_ENGINE", "fast")
    with pytest.raises(UsageError, match="OOMTRACE_REPLAY_ENGINE='fast'"):
        compiled.simulator(1)


def test_without_the_extension_python_runs_and_large_workloads_warn_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # GIVEN a build without a C compiler
    monkeypatch.setattr(compiled, "_ckernel", None)
    monkeypatch.setattr(compiled, "_warned", [])
    monkeypatch.delenv("OOMTRACE_REPLAY_ENGINE", raising=False)
    with caplog.at_level(logging.WARNING, logger=compiled.__name__):
        # THEN small workloads run as Python silently
        assert compiled.simulator(compiled.SLOW_REQUESTS - 1) is kernel.simulate
        assert not caplog.records
        # and large ones too, with one line saying why it is slow and what to do
        assert compiled.simulator(compiled.SLOW_REQUESTS) is kernel.simulate
        assert compiled.grouper(compiled.SLOW_REQUESTS * compiled.ROWS_PER_REQUEST) is None
    assert len(caplog.records) == 1
    assert "C kernel was not built" in caplog.records[0].getMessage()
    assert "reinstall" in caplog.records[0].getMessage()


def test_asking_for_the_c_kernel_where_it_was_not_built_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(compiled, "_ckernel", None)
    monkeypatch.setenv("OOMTRACE_REPLAY_ENGINE", "compiled")
    with pytest.raises(UsageError, match=r"not built.*C compiler"):
        compiled.simulator(1)
