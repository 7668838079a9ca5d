"""A collector capture, written the way the node agent and the PyTorch hook write it.

The real sources do the work: :class:`collectors.nvml.NvmlSource` polls a model of NVML,
:class:`collectors.prometheus.PrometheusSource` scrapes a model of the server's ``/metrics``,
:class:`collectors.torch_hook.source.TorchSource` reads a model of the caching allocator and
gets the OOM observer call, and :class:`collectors.writer.SegmentWriter` writes the segments.
Only the records whose source needs a real file or a real process (the log tail, health, gaps,
keep markers) are built here, field for field as ``collectors/FORMAT.md`` and the agent define
them. Every clock is the generator's, so the capture is the same bytes on every run.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collectors.format import KEEP_PREFIX, Record
from collectors.redact import redact_line
from collectors.torch_hook.stats import OomObserver, TorchSnapshot
from collectors.writer import SegmentWriter

MAX_LINE_CHARS = 64 << 10


class Clock:
    """The generator's wall clock (ns since the epoch), read by every writer and source."""

    def __init__(self, now_ns: int) -> None:
        self.now_ns = now_ns

    def __call__(self) -> int:
        return self.now_ns


@dataclass
class _Memory:
    used: int
    total: int
    free: int


@dataclass
class _Proc:
    pid: int
    usedGpuMemory: int  # noqa: N815 - NVML's field name


class ModelNvml:
    """``pynvml`` for one device whose state ``state(now_ns)`` gives: (used, total, processes
    as (host pid, bytes))."""

    def __init__(
        self,
        clock: Clock,
        state: Callable[[int], tuple[int, int, list[tuple[int, int]]]],
        *,
        uuid: str,
        name: str,
    ) -> None:
        self.clock, self.state, self.uuid, self.name = clock, state, uuid, name

    def nvmlInit(self) -> None:  # noqa: N802 - NVML's names
        return None

    def nvmlShutdown(self) -> None:  # noqa: N802 - NVML's names
        return None

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802 - NVML's names
        return 1

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:  # noqa: N802 - NVML's names
        return index

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> _Memory:  # noqa: N802 - NVML's names
        used, total, _ = self.state(self.clock())
        return _Memory(used, total, total - used)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[_Proc]:  # noqa: N802 - NVML's names
        return [_Proc(pid, size) for pid, size in self.state(self.clock())[2]]

    def nvmlDeviceGetUUID(self, handle: Any) -> str:  # noqa: N802 - NVML's names
        return self.uuid

    def nvmlDeviceGetName(self, handle: Any) -> str:  # noqa: N802 - NVML's names
        return self.name


class ModelFetcher:
    """The server's ``/metrics``: ``body(now_ns)`` is the exposition text, or None when nothing
    listens (connection refused)."""

    def __init__(self, url: str, clock: Clock, body: Callable[[int], str | None]) -> None:
        self.url, self.clock, self.body = url, clock, body

    def fetch(self) -> bytes:
        text = self.body(self.clock())
        if text is None:
            raise ConnectionRefusedError(111, "Connection refused")
        return text.encode("utf-8")

    def close(self) -> None:
        return None


class ModelAllocator:
    """The caching allocator of the engine process: ``snap(now_ns)`` gives its statistics from
    the moment CUDA is initialised (None before)."""

    def __init__(self, clock: Clock, snap: Callable[[int], TorchSnapshot | None]) -> None:
        self.clock, self.snap = clock, snap
        self.observers: list[OomObserver] = []

    def ready(self) -> bool:
        return self.snap(self.clock()) is not None

    def devices(self) -> list[int]:
        return [0]

    def snapshot(self, device: int) -> TorchSnapshot | None:
        return self.snap(self.clock())

    def attach_oom_observer(self, observer: OomObserver) -> bool:
        self.observers.append(observer)
        return True

    def physical_index(self, device: int) -> int:
        return device


@dataclass
class LogFile:
    """An engine log file as the tail sees it: (written at ns, line) in file order."""

    path: str
    dev: int
    ino: int
    lines: list[tuple[int, str]]
    _next: int = 0
    _offset: int = 0

    def read(self, now_ns: int, src: str) -> Record | None:
        """The ``log`` record of one poll at ``now_ns`` (None when nothing new)."""
        start = self._next
        while self._next < len(self.lines) and self.lines[self._next][0] <= now_ns:
            self._next += 1
        if self._next == start:
            return None
        raw = [line for _, line in self.lines[start : self._next]]
        size = sum(len(line.encode("utf-8")) + 1 for line in raw)
        record: Record = {
            "k": "log",
            "ts": now_ns,
            "src": src,
            "path": self.path,
            "dev": self.dev,
            "ino": self.ino,
            "gen": 0,
            "off": self._offset,
            "end": self._offset + size,
            "lines": [_clean(line) for line in raw],
        }
        self._offset += size
        return record


def _clean(line: str) -> str:
    text = redact_line(line)
    if len(text) > MAX_LINE_CHARS:
        text = f"{text[:MAX_LINE_CHARS]}…[{len(text) - MAX_LINE_CHARS} chars cut]"
    return text


@dataclass
class Health:
    """A source runner's counters, as its ``health`` records state them."""

    src: str
    target: str
    samples: int = 0
    errors: int = 0
    up: bool = False
    gap_start: int | None = None
    gap_reason: str = ""
    failures: int = 0

    def record(self, now_ns: int) -> Record:
        return {
            "k": "health", "ts": now_ns, "src": self.src, "target": self.target,
            "up": 1 if self.up else 0, "samples": self.samples, "errors": self.errors,
            "misses": 0,
        }  # fmt: skip

    def gap(self, end_ns: int | None) -> Record:
        return {
            "k": "gap", "ts": self.gap_start, "end": end_ns, "src": self.src,
            "target": self.target, "reason": self.gap_reason, "attempts": self.failures,
        }  # fmt: skip


def polled(writer: SegmentWriter, health: Health, poll: Callable[[], None], now_ns: int) -> None:
    """One tick of a source runner: poll, count, open or close a gap (as
    :class:`collectors.schedule.SourceRunner` does)."""
    try:
        poll()
    except OSError as err:
        health.errors += 1
        health.failures += 1
        health.up = False
        reason = f"{type(err).__name__}: {err}"
        if health.gap_start is None:
            health.gap_start, health.gap_reason = now_ns, reason
            writer.append(health.gap(None))
        return
    health.samples += 1
    health.up = True
    if health.gap_start is not None:
        writer.append(health.gap(now_ns))
        health.gap_start = None
    health.failures = 0


@dataclass(order=True)
class Tick:
    at_ns: int
    order: int
    action: Callable[[], None] = field(compare=False)


class Timeline:
    """Runs scheduled actions in time order on the shared clock."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._heap: list[Tick] = []
        self._order = 0

    def every(self, start_ns: int, end_ns: int, step_ns: int, action: Callable[[], None]) -> None:
        t = start_ns
        while t <= end_ns:
            self.at(t, action)
            t += step_ns

    def at(self, at_ns: int, action: Callable[[], None]) -> None:
        self._order += 1
        heapq.heappush(self._heap, Tick(at_ns, self._order, action))

    def run(self) -> None:
        while self._heap:
            tick = heapq.heappop(self._heap)
            self.clock.now_ns = tick.at_ns
            tick.action()


def keep_marker(directory: Path, ts_ns: int, pid: int, why: str) -> None:
    """A keep marker as :class:`collectors.retention.KeepMarker` writes it."""
    name = f"{KEEP_PREFIX}{ts_ns}-{pid}.json"
    (directory / name).write_text(json.dumps({"ts_ns": ts_ns, "why": why}), encoding="utf-8")
