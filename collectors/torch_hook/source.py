"""The sampler inside a PyTorch server: allocator statistics per device, and the OOM observer.

Records are canonical samples (``torch_allocated_bytes``, ``torch_reserved_bytes``, their
``*_peak_bytes`` since the previous written sample, ``torch_alloc_retries_total``,
``torch_ooms_total``) and, from the observer, canonical ``oom`` events written and flushed at
once: the process is usually about to die.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from collectors.format import Record
from collectors.retention import KeepMarker
from collectors.schedule import SegmentSink
from collectors.torch_hook.stats import IntervalPeak, TorchSnapshot, TorchStats

logger = logging.getLogger(__name__)

OOM_DETAIL = (
    "PyTorch OOM observer; total_bytes is the allowed maximum when a per-process memory "
    "fraction is set, else the device total"
)


class _DeviceState:
    def __init__(self) -> None:
        self.allocated = IntervalPeak()
        self.reserved = IntervalPeak()
        self.written: TorchSnapshot | None = None
        self.written_at: int | None = None


class TorchSource:
    """Polled by a :class:`collectors.schedule.SourceRunner` on the hook's thread."""

    def __init__(
        self,
        stats: TorchStats,
        sink: SegmentSink,
        *,
        keep: KeepMarker | None = None,
        flush: Callable[[], None] | None = None,
        heartbeat_s: float = 1.0,
        rescan_s: float = 5.0,
        name: str = "collector.torch",
        clock_ns: Callable[[], int] = time.time_ns,
        pid: int | None = None,
    ) -> None:
        # the server process the hook runs in (injectable for generated captures)
        self._pid = os.getpid() if pid is None else pid
        self.name, self.target = name, f"pid {self._pid}"
        self._stats, self._sink, self._keep, self._flush = stats, sink, keep, flush
        self._heartbeat_ns, self._rescan_ns = int(heartbeat_s * 1e9), int(rescan_s * 1e9)
        self._clock_ns = clock_ns
        self._attached = False
        self._devices: list[int] = []
        self._scanned_at: int | None = None
        self._state: dict[int, _DeviceState] = {}
        self._lock = threading.Lock()

    def poll(self, now_ns: int) -> None:
        if not self._stats.ready():
            return  # the server has not initialised CUDA yet: nothing to read, nothing to do
        if not self._attached:
            self._attached = True
            observed = self._stats.attach_oom_observer(self.on_oom)
            self._sink.set_sticky(f"info:{self.name}:{self._pid}", self._info(now_ns, observed))
        if self._scanned_at is None or now_ns - self._scanned_at >= self._rescan_ns:
            self._scanned_at = now_ns
            self._devices = [d for d in self._stats.devices() if self._in_use(d)]
        for device in self._devices:
            snap = self._stats.snapshot(device)
            if snap is not None:
                self._write(device, snap, now_ns, force=False)

    def _in_use(self, device: int) -> bool:
        snap = self._stats.snapshot(device)
        return snap is not None and snap.reserved_peak > 0

    def _info(self, now_ns: int, observed: bool) -> Record:
        devices = [
            {"local": d, "index": self._stats.physical_index(d)} for d in self._stats.devices()
        ]
        data = {
            "pid": self._pid,
            "oom_observer": observed,
            "devices": devices,
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "resets_peak_stats": False,
        }
        return {"k": "info", "ts": now_ns, "src": self.name, "data": data}

    def _write(self, device: int, snap: TorchSnapshot, now_ns: int, *, force: bool) -> None:
        with self._lock:
            state = self._state.setdefault(device, _DeviceState())
            state.allocated.observe(snap.allocated)
            state.reserved.observe(snap.reserved)
            heartbeat = state.written_at is None or now_ns - state.written_at >= self._heartbeat_ns
            if snap == state.written and not heartbeat and not force:
                return  # unchanged: the interval keeps accumulating its peak
            allocated = state.allocated.take(snap.allocated, snap.allocated_peak)
            reserved = state.reserved.take(snap.reserved, snap.reserved_peak)
            state.written, state.written_at = snap, now_ns
        record: Record = {
            "k": "s",
            "ts": now_ns,
            "src": self.name,
            "dev": self._stats.physical_index(device),
            "pid": self._pid,
            "m": {
                "torch_allocated_bytes": snap.allocated,
                "torch_reserved_bytes": snap.reserved,
                "torch_allocated_peak_bytes": allocated.value,
                "torch_reserved_peak_bytes": reserved.value,
                "torch_alloc_retries_total": snap.alloc_retries,
                "torch_ooms_total": snap.ooms,
            },
        }
        inexact = [
            metric
            for metric, peak in (
                ("torch_allocated_peak_bytes", allocated),
                ("torch_reserved_peak_bytes", reserved),
            )
            if not peak.exact
        ]
        if inexact:
            record["lb"] = inexact
        self._sink.append(record)

    def on_oom(self, device: int, requested: int, total: int, free: int) -> None:
        """PyTorch's out-of-memory observer: runs in the allocating thread, just before the
        exception is raised. Records the failing allocation and flushes it to disk now."""
        try:
            now_ns = self._clock_ns()
            snap = self._stats.snapshot(device)
            event: Record = {
                "k": "e",
                "ts": now_ns,
                "src": self.name,
                "kind": "oom",
                "dev": self._stats.physical_index(device),
                "pid": self._pid,
                "requested_bytes": int(requested),
                "total_bytes": int(total),
                "free_bytes": int(free),
                "detail": OOM_DETAIL,
            }
            if snap is not None:
                event["allocated_bytes"] = snap.allocated
                event["reserved_unallocated_bytes"] = max(0, snap.reserved - snap.allocated)
            self._sink.append(event)
            if snap is not None:
                self._write(device, snap, now_ns, force=True)
            if self._flush is not None:
                self._flush()
            if self._keep is not None:
                self._keep.mark(now_ns, "PyTorch OOM observer")
        except Exception as err:  # noqa: BLE001 - never raise into the allocator
            logger.warning("oomtrace torch hook could not record an OOM: %s", err)

    def close(self) -> None:
        """Nothing to release: the observer cannot be detached, and it is harmless once the
        writer is closed (appends are then dropped)."""
