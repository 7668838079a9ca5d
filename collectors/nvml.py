"""Per-device and per-process GPU memory through NVML (``nvidia-ml-py``, imported lazily).

Polled at a high rate; a record is written at most every ``write_interval`` and only when it
changed (or a heartbeat is due), with the peak since the previous written record
(:class:`collectors.peaks.PeakTracker`). Records are canonical samples: ``device_used_bytes``,
``device_used_peak_bytes``, ``device_total_bytes`` per device; ``process_used_bytes`` and
``process_used_peak_bytes`` per (device, pid). pids are host-namespace pids (as NVML reports
them). A process that leaves a device gets a last record of 0 bytes, the truth at that time.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any, Protocol

from collectors.format import Record
from collectors.peaks import PeakTracker
from collectors.schedule import SegmentSink

logger = logging.getLogger(__name__)


class NvmlApi(Protocol):
    """The part of the ``pynvml`` module the source uses (injectable for tests)."""

    def nvmlInit(self) -> None: ...  # noqa: N802 - NVML's own names

    def nvmlShutdown(self) -> None: ...  # noqa: N802

    def nvmlDeviceGetCount(self) -> int: ...  # noqa: N802

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...  # noqa: N802

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any: ...  # noqa: N802

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]: ...  # noqa: N802

    def nvmlDeviceGetUUID(self, handle: Any) -> str: ...  # noqa: N802

    def nvmlDeviceGetName(self, handle: Any) -> str: ...  # noqa: N802


def load_pynvml() -> NvmlApi:
    """Import ``pynvml`` on first use; ImportError names the extra to install."""
    try:
        module: NvmlApi = importlib.import_module("pynvml")
    except ImportError as err:
        raise ImportError("NVML sampling needs nvidia-ml-py: pip install 'oomtrace[nvml]'") from err
    return module


class _Device:
    def __init__(self, index: int, handle: Any, write_interval_ns: int) -> None:
        self.index, self.handle = index, handle
        self.used = PeakTracker(write_interval_ns)
        self.total: int | None = None
        self.written_total: int | None = None
        self.processes: dict[int, PeakTracker] = {}
        self.processes_supported = True


class NvmlSource:
    def __init__(
        self,
        sink: SegmentSink,
        *,
        write_interval_s: float,
        processes: bool = True,
        nvml: NvmlApi | None = None,
        name: str = "collector.nvml",
    ) -> None:
        self.name, self.target = name, "nvml"
        self._sink, self._processes = sink, processes
        self._write_interval_ns = int(write_interval_s * 1e9)
        self._nvml = nvml
        self._api: NvmlApi | None = None
        self._devices: list[_Device] = []

    def _ensure(self, now_ns: int) -> NvmlApi:
        if self._api is not None:
            return self._api
        api = self._nvml if self._nvml is not None else load_pynvml()
        api.nvmlInit()
        try:
            devices = [
                _Device(i, api.nvmlDeviceGetHandleByIndex(i), self._write_interval_ns)
                for i in range(api.nvmlDeviceGetCount())
            ]
            inventory = [
                {
                    "index": d.index,
                    "uuid": _text(api.nvmlDeviceGetUUID(d.handle)),
                    "name": _text(api.nvmlDeviceGetName(d.handle)),
                }
                for d in devices
            ]
        except Exception:
            api.nvmlShutdown()
            raise
        self._api, self._devices = api, devices
        info = {"k": "info", "ts": now_ns, "src": self.name, "data": {"devices": inventory}}
        self._sink.set_sticky(f"info:{self.name}", info)
        return api

    def poll(self, now_ns: int) -> None:
        api = self._ensure(now_ns)
        try:
            for device in self._devices:
                self._poll_device(api, device, now_ns)
        except Exception:
            # The driver may be restarting: start from nvmlInit again on the next attempt.
            self.close()
            raise

    def _poll_device(self, api: NvmlApi, device: _Device, now_ns: int) -> None:
        memory = api.nvmlDeviceGetMemoryInfo(device.handle)
        device.used.observe(int(memory.used))
        device.total = int(memory.total)
        seen: set[int] = set()
        for proc in self._processes_of(api, device):
            if proc.usedGpuMemory is None:  # "not available" (e.g. Windows WDDM)
                continue
            pid = int(proc.pid)
            seen.add(pid)
            tracker = device.processes.setdefault(pid, PeakTracker(self._write_interval_ns))
            tracker.observe(int(proc.usedGpuMemory))
        due = device.used.due(now_ns, extra_changed=device.total != device.written_total)
        if due is not None:
            device.written_total = device.total
            self._sink.append(
                self._record(
                    now_ns,
                    device.index,
                    None,
                    {
                        "device_used_bytes": due.value,
                        "device_used_peak_bytes": due.peak,
                        "device_total_bytes": device.total,
                    },
                )
            )
        for pid in [p for p in device.processes if p not in seen]:
            device.processes[pid].observe(0)
            self._write_process(device, pid, now_ns, final=True)
            del device.processes[pid]
        for pid in seen:
            self._write_process(device, pid, now_ns, final=False)

    def _processes_of(self, api: NvmlApi, device: _Device) -> list[Any]:
        if not self._processes or not device.processes_supported:
            return []
        try:
            return api.nvmlDeviceGetComputeRunningProcesses(device.handle)
        except Exception as err:  # noqa: BLE001 - e.g. NotSupported (MIG): keep device memory
            device.processes_supported = False
            logger.warning(
                "NVML cannot list processes on GPU %d (%s): device totals only", device.index, err
            )
            return []

    def _write_process(self, device: _Device, pid: int, now_ns: int, *, final: bool) -> None:
        tracker = device.processes[pid]
        due = tracker.due(now_ns, force=final)
        if due is not None:
            metrics = {"process_used_bytes": due.value, "process_used_peak_bytes": due.peak}
            self._sink.append(self._record(now_ns, device.index, pid, metrics))

    def _record(self, ts: int, device: int, pid: int | None, metrics: dict[str, int]) -> Record:
        record: Record = {"k": "s", "ts": ts, "src": self.name, "dev": device, "m": metrics}
        if pid is not None:
            record["pid"] = pid
        return record

    def close(self) -> None:
        if self._api is None:
            return
        api, self._api, self._devices = self._api, None, []
        try:
            api.nvmlShutdown()
        except Exception as err:  # noqa: BLE001 - a failed shutdown leaves nothing to undo
            logger.debug("nvmlShutdown failed: %s", err)


def _text(value: str | bytes) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
