"""NVML sampling against an injected NVML: peaks survive a slower write rate, processes are
followed, a failing driver is re-initialised."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collectors.nvml import NvmlSource
from collectors.peaks import PeakTracker
from tests.unit.collectors.factories import MemorySink

MS = 1_000_000
GiB = 1 << 30


class NVMLError(Exception):
    pass


@dataclass
class Memory:
    total: int
    free: int
    used: int


@dataclass
class Proc:
    pid: int
    usedGpuMemory: int | None  # noqa: N815 - NVML's field name


@dataclass
class FakeNvml:
    """One or more devices whose used memory and processes the test sets between polls."""

    used: list[int] = field(default_factory=lambda: [0])
    total: int = 80 * GiB
    processes: list[list[Proc]] = field(default_factory=lambda: [[]])
    fail: bool = False
    inits: int = 0

    def nvmlInit(self) -> None:
        self.inits += 1

    def nvmlShutdown(self) -> None:
        return

    def nvmlDeviceGetCount(self) -> int:
        return len(self.used)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        return index

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Memory:
        if self.fail:
            raise NVMLError("GPU is lost")
        used = self.used[handle]
        return Memory(self.total, self.total - used, used)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Proc]:
        return self.processes[handle] if handle < len(self.processes) else []

    def nvmlDeviceGetUUID(self, handle: Any) -> bytes:
        return f"GPU-{handle}".encode()

    def nvmlDeviceGetName(self, handle: Any) -> str:
        return "NVIDIA H100 80GB HBM3"


def device_records(sink: MemorySink) -> list[dict[str, Any]]:
    return [r for r in sink.kind("s") if "pid" not in r]


def test_a_spike_between_two_writes_is_kept_as_the_peak() -> None:
    # GIVEN polls every 20 ms, writes at most every 100 ms
    nvml = FakeNvml(used=[10 * GiB])
    sink = MemorySink()
    source = NvmlSource(sink, write_interval_s=0.1, nvml=nvml)
    source.poll(0)
    # WHEN memory spikes for one 20 ms poll, then falls back, all within one write interval
    for t, used in [(20, 10), (40, 70), (60, 10), (80, 10), (100, 10)]:
        nvml.used[0] = used * GiB
        source.poll(t * MS)
    # THEN the record at 100 ms carries the spike as its peak and the current value as value
    first, second = device_records(sink)
    assert first["ts"] == 0
    assert second["ts"] == 100 * MS
    assert second["m"]["device_used_peak_bytes"] == 70 * GiB
    assert second["m"]["device_used_bytes"] == 10 * GiB
    assert second["m"]["device_total_bytes"] == 80 * GiB


def test_an_unchanged_device_is_written_only_as_a_heartbeat() -> None:
    nvml = FakeNvml(used=[5 * GiB])
    sink = MemorySink()
    source = NvmlSource(sink, write_interval_s=0.1, nvml=nvml)
    for t in range(0, 2500, 20):  # 2.5 s of polls at 50 Hz, memory never changes
        source.poll(t * MS)
    assert [r["ts"] // MS for r in device_records(sink)] == [0, 1000, 2000]


def test_processes_are_sampled_with_their_peaks_and_a_last_zero_when_they_leave() -> None:
    nvml = FakeNvml(used=[20 * GiB], processes=[[Proc(4242, 6 * GiB), Proc(7, None)]])
    sink = MemorySink()
    source = NvmlSource(sink, write_interval_s=0.1, nvml=nvml)
    source.poll(0)
    nvml.processes[0] = []
    source.poll(20 * MS)
    per_process = [(r["ts"] // MS, r["pid"], r["m"]) for r in sink.kind("s") if "pid" in r]
    assert per_process == [
        (0, 4242, {"process_used_bytes": 6 * GiB, "process_used_peak_bytes": 6 * GiB}),
        (20, 4242, {"process_used_bytes": 0, "process_used_peak_bytes": 6 * GiB}),
    ]


def test_the_device_inventory_is_a_sticky_info_record() -> None:
    sink = MemorySink()
    NvmlSource(sink, write_interval_s=0.1, nvml=FakeNvml(used=[0, 0])).poll(0)
    (info,) = sink.sticky.values()
    assert info["data"]["devices"] == [
        {"index": 0, "uuid": "GPU-0", "name": "NVIDIA H100 80GB HBM3"},
        {"index": 1, "uuid": "GPU-1", "name": "NVIDIA H100 80GB HBM3"},
    ]


def test_a_failing_driver_raises_and_is_initialised_again_on_the_next_poll() -> None:
    nvml = FakeNvml(used=[1])
    source = NvmlSource(MemorySink(), write_interval_s=0.1, nvml=nvml)
    source.poll(0)
    nvml.fail = True
    with pytest.raises(NVMLError, match="GPU is lost"):
        source.poll(20 * MS)
    nvml.fail = False
    source.poll(40 * MS)
    assert nvml.inits == 2


@given(
    st.lists(
        st.tuples(st.integers(min_value=1, max_value=50), st.integers(min_value=0, max_value=100)),
        min_size=1,
        max_size=60,
    )
)
def test_no_observed_value_is_ever_above_every_written_peak(steps: list[tuple[int, int]]) -> None:
    # GIVEN any sequence of (time step in ms, value) polled through a tracker writing every 100 ms
    tracker = PeakTracker(write_interval_ns=100 * MS)
    now, written = 0, []
    for step, value in steps:
        now += step * MS
        tracker.observe(value)
        due = tracker.due(now)
        if due is not None:
            written.append(due)
    last = tracker.due(now, force=True)
    if last is not None:
        written.append(last)
    # THEN the largest value ever seen reaches the disk as a peak, and no peak is invented
    assert max(d.peak for d in written) == max(v for _, v in steps)
    assert all(d.peak >= d.value for d in written)


def test_a_device_that_cannot_list_processes_still_reports_its_memory() -> None:
    # GIVEN a device (MIG, say) whose process query is not supported
    class NoProcesses(FakeNvml):
        def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Proc]:
            raise NVMLError("Not Supported")

    sink = MemorySink()
    source = NvmlSource(sink, write_interval_s=0.1, nvml=NoProcesses(used=[3 * GiB]))
    # WHEN polled THEN device memory is recorded and the poll does not fail
    source.poll(0)
    source.poll(2000 * MS)
    assert [r["m"]["device_used_bytes"] for r in device_records(sink)] == [3 * GiB, 3 * GiB]
