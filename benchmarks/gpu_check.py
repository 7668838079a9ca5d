"""On a GPU machine: run the NVML source and the PyTorch hook on a real workload that grows until
it runs out of memory, then show what the capture holds.

    python benchmarks/gpu_check.py [--fraction 0.25] [--step 1GiB] [--out DIR]

The workload (in this process, like an engine): a base allocation, one transient spike shorter
than NVML's write interval (a short activation peak), then steps until ``torch.OutOfMemoryError``
under ``torch.cuda.set_per_process_memory_fraction(--fraction)`` so the run stays small and fast.
The agent samples NVML at 50 Hz (written every 100 ms with the peak in between) and the hook
samples the allocator every 20 ms and attaches the OOM observer. Printed: the spike as NVML and
the hook saw it, the largest peaks, and the OOM event beside PyTorch's own error text.

Without a GPU, PyTorch or NVML it says so and exits 0 without doing anything.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from collectors.config import ConfigError, parse_size  # noqa: E402

GiB = 1 << 30


def gib(n: float | None) -> str:
    return "n/a" if n is None else f"{n / GiB:.3f} GiB"


def why_not_runnable() -> str | None:
    """None when torch with CUDA and NVML are usable here, else the reason."""
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed"
    if not torch.cuda.is_available():
        return "torch.cuda.is_available() is False (no CUDA GPU or driver)"
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
    except Exception as err:  # noqa: BLE001 - any NVML failure means: cannot check here
        return f"NVML is not usable ({type(err).__name__}: {err})"
    return None


def workload(torch: Any, fraction: float, step: int) -> tuple[float, int, str]:
    """Returns (spike wall time, spike bytes, the OOM message)."""
    device = torch.device("cuda", 0)
    torch.cuda.set_per_process_memory_fraction(fraction, device)
    held = [torch.empty(step, dtype=torch.uint8, device=device)]
    torch.cuda.synchronize()
    time.sleep(0.5)
    spike_bytes = 4 * step
    spike_at = time.time()
    spike = torch.empty(spike_bytes, dtype=torch.uint8, device=device)
    spike.fill_(1)
    torch.cuda.synchronize()
    time.sleep(0.03)  # longer than a 20 ms poll, shorter than the 100 ms write interval
    del spike
    torch.cuda.empty_cache()
    time.sleep(0.5)
    try:
        while True:
            held.append(torch.empty(step, dtype=torch.uint8, device=device))
            torch.cuda.synchronize()
            time.sleep(0.05)
    except getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError) as err:
        message = str(err).splitlines()[0]
    del held
    torch.cuda.empty_cache()
    return spike_at, spike_bytes, message


def report(out: Path, spike_at: float, spike_bytes: int, message: str) -> bool:
    from collectors.segments import read_capture

    capture = read_capture(out)
    s = capture.samples
    rows = list(zip(s.ts_ns, s.source, s.device, s.pid, s.metric, s.value, strict=True))

    def series(source: str, metric: str, pid: int | None = None) -> list[tuple[int, float]]:
        return [
            (t, v)
            for t, src, _, p, m, v in rows
            if src == source and m == metric and (pid is None or p == pid)
        ]

    start, end = int((spike_at - 0.05) * 1e9), int((spike_at + 0.4) * 1e9)

    def in_window(points: list[tuple[int, float]]) -> list[float]:
        return [v for t, v in points if start <= t <= end]

    nvml_points = in_window(series("collector.nvml", "device_used_bytes"))
    nvml_peaks = in_window(series("collector.nvml", "device_used_peak_bytes"))
    torch_peaks = in_window(series("collector.torch", "torch_allocated_peak_bytes"))
    print(f"capture: {out} ({len(capture.segments)} segments, {len(s)} samples)")
    print(f"transient spike of {gib(spike_bytes)} for ~30 ms:")
    print(f"  NVML device_used_bytes (point values) max {gib(max(nvml_points, default=None))}")
    print(f"  NVML device_used_peak_bytes            max {gib(max(nvml_peaks, default=None))}")
    print(f"  torch_allocated_peak_bytes             max {gib(max(torch_peaks, default=None))}")
    for source, metric in [
        ("collector.nvml", "device_used_peak_bytes"),
        ("collector.nvml", "process_used_peak_bytes"),
        ("collector.torch", "torch_reserved_peak_bytes"),
    ]:
        values = [
            v for _, v in series(source, metric, os.getpid() if "process" in metric else None)
        ]
        print(f"largest {metric}: {gib(max(values, default=None))}")
    events = capture.events
    ooms = [i for i, kind in enumerate(events.kind) if kind == "oom"]
    print(f"OOM events captured: {len(ooms)}")
    for i in ooms[:3]:
        print(
            f"  requested {gib(events.requested_bytes[i])}, allowed/total "
            f"{gib(events.total_bytes[i])}, free {gib(events.free_bytes[i])}, allocated "
            f"{gib(events.allocated_bytes[i])}, reserved unallocated "
            f"{gib(events.reserved_unallocated_bytes[i])}"
        )
    print(f"PyTorch said: {message}")
    print(f"diagnostics: {[d.kind for d in capture.diagnostics] or 'none'}")
    nvml_saw_it = max(nvml_peaks, default=0) > max(nvml_points, default=0)
    torch_saw_it = max(torch_peaks, default=0) >= spike_bytes
    return bool(ooms) and (nvml_saw_it or torch_saw_it)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fraction", type=float, default=0.25, help="of device memory allowed")
    parser.add_argument("--step", default="1GiB", help="allocation step")
    parser.add_argument("--out", type=Path, default=None, help="capture directory (kept)")
    args = parser.parse_args()
    reason = why_not_runnable()
    if reason is not None:
        print(
            f"gpu_check: skipped: {reason}; run it on a machine with an NVIDIA GPU, "
            "PyTorch and nvidia-ml-py"
        )
        return 0
    try:
        step = parse_size(args.step, what="--step")
    except ConfigError as err:
        print(f"gpu_check: error: {err}", file=sys.stderr)
        return 2
    import torch

    from collectors.agent import Agent
    from collectors.config import build_config
    from collectors.torch_hook import install, uninstall

    out = args.out or Path(tempfile.mkdtemp(prefix="oomtrace-gpu-check-"))
    agent = Agent(
        build_config(
            out=str(out),
            nvml=True,
            nvml_interval="20ms",
            nvml_write_interval="100ms",
            flush_interval="100ms",
        )
    )
    agent.start()
    install(out, interval_s=0.02, node=agent.config.node)
    try:
        spike_at, spike_bytes, message = workload(torch, args.fraction, step)
        time.sleep(0.5)
    finally:
        uninstall()
        agent.stop()
    ok = report(out, spike_at, spike_bytes, message)
    print("gpu_check: OK" if ok else "gpu_check: FAILED: spike or OOM event missing")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
