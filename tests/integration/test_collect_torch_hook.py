"""The PyTorch hook activated by environment in a real, unmodified Python process (and its forked
child), over a stand-in ``torch`` module: samples, the transient peak and the OOM event reach the
disk even though the process dies right after the OOM without any clean-up."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from collectors.segments import read_capture
from collectors.torch_hook import AUTOLOAD_DIR
from tests.waiting import HANG_S

MiB = 1 << 20

# A stand-in for torch: the caching allocator's counters, CUDA initialisation, and the private
# OOM observer hook, with the same names the hook looks up on the real module.
FAKE_TORCH = textwrap.dedent(
    """
    from types import SimpleNamespace

    _state = {"init": False, "allocated": 0, "peak": 0, "reserved": 0, "rpeak": 0, "ooms": 0}
    _observers = []

    def _stats(device=None):
        s = _state
        return {"allocated_bytes": {"all": {"current": s["allocated"], "peak": s["peak"]}},
                "reserved_bytes": {"all": {"current": s["reserved"], "peak": s["rpeak"]}},
                "num_alloc_retries": 0, "num_ooms": s["ooms"]}

    def alloc(n):
        s = _state
        s["allocated"] += n
        s["reserved"] = max(s["reserved"], s["allocated"])
        s["peak"], s["rpeak"] = max(s["peak"], s["allocated"]), max(s["rpeak"], s["reserved"])

    def free(n):
        _state["allocated"] -= n

    def oom(requested):
        _state["ooms"] += 1
        for observer in _observers:
            observer(0, requested, 80 << 30, 1 << 20)

    def _init():
        _state["init"] = True

    cuda = SimpleNamespace(is_initialized=lambda: _state["init"], init=_init,
                           device_count=lambda: 1, memory_stats_as_nested_dict=_stats)
    _C = SimpleNamespace(_cuda_attach_out_of_memory_observer=_observers.append)
    """
)

SERVER = textwrap.dedent(
    """
    import os, sys, time
    import torch
    from collectors.segments import read_capture

    def on_disk(metric, at_least):
        # waits for the hook to have sampled this process and flushed the sample: an event,
        # never an amount of time
        pid = os.getpid()
        deadline = time.monotonic() + HANG_S
        while time.monotonic() < deadline:
            s = read_capture(os.environ["OOMTRACE_TORCH_HOOK_DIR"]).samples
            if any(p == pid and m == metric and v >= at_least
                   for p, m, v in zip(s.pid, s.metric, s.value)):
                return
            time.sleep(0.05)
        sys.exit(f"no {metric} of at least {at_least} from {pid} on disk")

    torch.cuda.init()
    torch.alloc(512 << 20)
    on_disk("torch_allocated_bytes", 512 << 20)
    torch.alloc(1 << 30)        # a transient peak between two samples
    torch.free(1 << 30)
    on_disk("torch_allocated_peak_bytes", (512 << 20) + (1 << 30))
    child = os.fork()
    if child == 0:              # a forked worker samples into its own segment
        torch.alloc(64 << 20)
        on_disk("torch_allocated_bytes", (512 << 20) + (64 << 20))
        sys.exit(0)             # a clean exit: the hook closes its segment at exit
    os.waitpid(child, 0)
    torch.oom(8 << 30)
    os._exit(1)                 # the engine dies: no atexit, no flush, no close
    """
).replace("HANG_S", repr(HANG_S))


def test_an_unmodified_process_is_sampled_and_its_oom_survives_its_death(tmp_path: Path) -> None:
    # GIVEN a stand-in torch on the path and the hook enabled only through the environment
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "torch.py").write_text(FAKE_TORCH)
    capture = tmp_path / "capture"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(AUTOLOAD_DIR), str(tmp_path / "site")]),
        "OOMTRACE_TORCH_HOOK_DIR": str(capture),
        "OOMTRACE_TORCH_HOOK_INTERVAL": "100ms",
        "OOMTRACE_NODE": "gpu-node-1",
    }
    # WHEN the "server" runs, forks a worker, hits an OOM and dies at once
    result = subprocess.run(
        [sys.executable, "-c", SERVER], env=env, timeout=HANG_S, check=False, capture_output=True
    )
    assert result.returncode == 1, result.stderr
    # THEN both processes wrote segments; the parent's holds the peak and the OOM event
    read = read_capture(capture)
    writers = {s.header.pid: s.header for s in read.segments}
    assert len(writers) == 2
    assert {h.writer for h in writers.values()} == {"torch_hook"}
    assert {h.node for h in writers.values()} == {"gpu-node-1"}
    samples = read.samples
    peaks = [
        v
        for m, v in zip(samples.metric, samples.value, strict=True)
        if m == "torch_allocated_peak_bytes"
    ]
    assert max(peaks) >= (512 << 20) + (1 << 30)
    (oom,) = [i for i, kind in enumerate(read.events.kind) if kind == "oom"]
    assert read.events.requested_bytes[oom] == 8 << 30
    assert read.events.allocated_bytes[oom] == 512 << 20
    assert read.events.total_bytes[oom] == 80 << 30
    assert len(list(capture.glob("keep-*.json"))) == 1
    parent = read.events.pid[oom]
    (child,) = set(writers) - {parent}
    closed = {s.header.pid: s.closed_cleanly for s in read.segments}
    assert closed == {parent: False, child: True}
    sampled = {
        p for p, m in zip(samples.pid, samples.metric, strict=True) if m == "torch_allocated_bytes"
    }
    assert sampled == {parent, child}


def test_the_activation_directory_is_printed_for_pythonpath() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "collectors.torch_hook", "--pythonpath"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout == f"{AUTOLOAD_DIR}\n"
    assert (AUTOLOAD_DIR / "sitecustomize.py").is_file()
