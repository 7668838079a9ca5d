"""Reading the PyTorch caching allocator without disturbing the engine that owns it.

vLLM (and other engines) measure their own start-up peak: ``torch.cuda.reset_peak_memory_stats()``,
a profiling forward pass, then ``memory_stats()["allocated_bytes.all.peak"]``; the KV cache gets
what is left. A sampler that reset the peak counter in the middle of that would make the engine
under-measure its activations and over-allocate the cache, the very OOM this tool investigates.

So the hook **never resets anything**. It only reads, and derives the peak of each interval from
the allocator's own high-water mark:

* the high-water mark rose during the interval: the interval's peak *is* the new mark (exact);
* it stayed the same: the peak is the largest value polled in the interval; it is exact when that
  equals the mark, otherwise a lower bound (``q: lower_bound`` in the record);
* it fell: the engine reset it during the interval; the peak is the larger of the new mark and
  the polled values, a lower bound (what happened before the reset is unseen).

The hook also never imports ``torch`` and never initialises CUDA: it waits until the server has
done both (forking after CUDA initialisation breaks, and an API-server process should not pay for
``import torch``), and only then attaches the out-of-memory observer (attaching earlier is lost:
the allocator's per-device state does not exist yet).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

OomObserver = Callable[[int, int, int, int], None]


@dataclass(frozen=True)
class TorchSnapshot:
    allocated: int
    allocated_peak: int
    reserved: int
    reserved_peak: int
    alloc_retries: int
    ooms: int


class TorchStats(Protocol):
    """The allocator as the hook sees it (injectable: tests drive a model of it)."""

    def ready(self) -> bool: ...

    def devices(self) -> list[int]: ...

    def snapshot(self, device: int) -> TorchSnapshot | None: ...

    def attach_oom_observer(self, observer: OomObserver) -> bool: ...

    def physical_index(self, device: int) -> int: ...


def snapshot_from_stats(stats: Mapping[str, Any]) -> TorchSnapshot | None:
    """From ``torch.cuda.memory_stats`` (flat, dotted keys) or its nested form; None when empty
    (CUDA not initialised, or a device this process never used)."""
    if not stats:
        return None
    if "allocated_bytes.all.current" in stats:

        def get(key: str) -> int:
            return int(stats.get(key, 0))
    else:

        def get(key: str) -> int:
            node: Any = stats
            for part in key.split("."):
                node = node.get(part, 0) if isinstance(node, Mapping) else 0
            return int(node)

    return TorchSnapshot(
        allocated=get("allocated_bytes.all.current"),
        allocated_peak=get("allocated_bytes.all.peak"),
        reserved=get("reserved_bytes.all.current"),
        reserved_peak=get("reserved_bytes.all.peak"),
        alloc_retries=get("num_alloc_retries"),
        ooms=get("num_ooms"),
    )


class LiveTorchStats:
    """The real allocator, through the ``torch`` the server already imported."""

    def __init__(self) -> None:
        self._visible = _visible_devices(os.environ.get("CUDA_VISIBLE_DEVICES"))

    def _cuda(self) -> Any | None:
        torch = sys.modules.get("torch")
        cuda = getattr(torch, "cuda", None)
        try:
            # Never import or initialise anything: only look at what the server set up.
            if cuda is not None and cuda.is_initialized():
                return cuda
        except (AttributeError, RuntimeError):  # torch still importing in another thread
            return None
        return None

    def ready(self) -> bool:
        return self._cuda() is not None

    def devices(self) -> list[int]:
        cuda = self._cuda()
        return [] if cuda is None else list(range(int(cuda.device_count())))

    def snapshot(self, device: int) -> TorchSnapshot | None:
        cuda = self._cuda()
        if cuda is None:
            return None
        nested = getattr(cuda, "memory_stats_as_nested_dict", None)
        stats = nested(device) if nested is not None else cuda.memory_stats(device)
        return snapshot_from_stats(stats)

    def attach_oom_observer(self, observer: OomObserver) -> bool:
        torch = sys.modules.get("torch")
        attach = getattr(getattr(torch, "_C", None), "_cuda_attach_out_of_memory_observer", None)
        if attach is None:
            return False
        attach(observer)
        return True

    def physical_index(self, device: int) -> int:
        if self._visible is not None and device < len(self._visible):
            return self._visible[device]
        return device


def _visible_devices(value: str | None) -> list[int] | None:
    """``CUDA_VISIBLE_DEVICES=2,3`` maps local device 0 to NVML index 2; UUID lists cannot be
    mapped without NVML, so the local index is kept (the info record says so)."""
    if not value:
        return None
    try:
        return [int(part) for part in value.split(",") if part.strip()]
    except ValueError:
        return None


@dataclass(frozen=True)
class Peak:
    value: int
    exact: bool


class IntervalPeak:
    """Peak of one series (allocated or reserved) between written samples, from polled values
    and the allocator's high-water mark, without ever resetting the mark."""

    def __init__(self) -> None:
        self._mark_at_start: int | None = None
        self._window_max: int | None = None

    def observe(self, current: int) -> None:
        self._window_max = current if self._window_max is None else max(self._window_max, current)

    def take(self, current: int, mark: int) -> Peak:
        """The peak since the previous ``take``; the next interval starts at ``current``."""
        self.observe(current)
        window = self._window_max if self._window_max is not None else current
        start = self._mark_at_start
        if start is None:
            # First sample: a higher mark was set before sampling began (start-up profiling).
            peak = Peak(window, exact=window >= mark)
        elif mark > start:
            peak = Peak(max(mark, window), exact=True)
        elif mark < start:
            peak = Peak(max(mark, window), exact=False)
        else:
            peak = Peak(window, exact=window == mark)
        self._mark_at_start, self._window_max = mark, current
        return peak
