"""Which processes are the engine: the allocator's pid and, in a container, its host-side twin."""

from __future__ import annotations

from typing import Any

from oomtrace.analysis.breakdown import engine_pids
from oomtrace.analysis.observed_series import BYTES_METRICS
from oomtrace.analysis.samples import SampleView, read_samples
from oomtrace.schema import empty
from oomtrace.trace import Manifest
from tests.factories import at, samples

GiB, MiB = 1 << 30, 1 << 20


def _rows(**series: tuple[int | None, str, int]) -> list[dict[str, Any]]:
    """Ten seconds of each ``name=(pid, metric, bytes)`` series (rising 1 MiB a second)."""
    return [
        {"ts": at(t), "pid": pid, "metric": metric, "value": float(value + t * MiB)}
        for pid, metric, value in series.values()
        for t in range(10)
    ]


def _view(rows: list[dict[str, Any]]) -> SampleView:
    """The samples as the analysis reads them (memory series split out)."""
    return read_samples(samples(*rows).lazy(), BYTES_METRICS, lambda: None)


def test_the_host_pid_of_a_containerised_engine_is_the_engine_too() -> None:
    # GIVEN the hook's samples under the container pid 391, and NVML's per-process samples under
    # host pids: the engine's twin (reserved + 640 MiB) and a small unrelated process
    rows = _rows(
        hook=(391, "torch_reserved_bytes", 40 * GiB),
        twin=(2_914_467, "process_used_bytes", 40 * GiB + 640 * MiB),
        other=(5_555, "process_used_bytes", 2 * GiB),
    )
    # WHEN the engine's processes are named
    pids = engine_pids(_view(rows), empty("events"), Manifest())
    # THEN the host pid whose memory tracks the allocator is the engine; the other is not
    assert pids == frozenset({391, 2_914_467})


def test_when_the_pids_agree_nothing_is_added() -> None:
    # GIVEN the hook and NVML naming the engine by the same pid, beside another big process
    rows = _rows(
        hook=(77, "torch_reserved_bytes", 30 * GiB),
        own=(77, "process_used_bytes", 30 * GiB + 500 * MiB),
        other=(88, "process_used_bytes", 31 * GiB),
    )
    # WHEN the engine's processes are named, THEN only the allocator's pid is the engine
    assert engine_pids(_view(rows), empty("events"), Manifest()) == frozenset({77})


def test_a_process_below_the_allocators_reserved_bytes_is_never_its_twin() -> None:
    # GIVEN a container engine whose own pid NVML does not list, and a foreign process smaller
    # than what the engine's allocator holds
    rows = _rows(
        hook=(391, "torch_reserved_bytes", 40 * GiB),
        other=(5_555, "process_used_bytes", 3 * GiB),
    )
    # WHEN the engine's processes are named, THEN the foreign process stays foreign
    assert engine_pids(_view(rows), empty("events"), Manifest()) == frozenset({391})
