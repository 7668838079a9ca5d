"""A leak that ate the headroom: vLLM 0.10 (V1) on an H100 80GB with Llama-3.1-8B-Instruct at
``--gpu-memory-utilization 0.93``. Every busy hour leaves 460 MiB on the device that the engine
never gives back (memory outside its KV pool: the pool is preallocated and never grows); after
eight hours 3.59 GiB of the 5.53 GiB the engine's budget left are gone, and the ninth hour's busy
period finds no room for a step's activations.

What the team had (``sample_logs/vllm-leak-headroom/``): ``vllm.log`` (``docker logs -t``,
request logging off, INFO level: the stats line while it works) and ``gpu.csv`` (``nvidia-smi
--query-gpu=timestamp,index,memory.used,memory.total --format=csv -l 30``).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

from oomtrace.replay import ReplaySettings
from tools.sample_incidents import telemetry as tel
from tools.sample_incidents.prefill_oom import size
from tools.sample_incidents.sim import Run, Spec
from tools.sample_incidents.text import Filler
from tools.sample_incidents.vllm_engine import Server, stats_lines
from tools.sample_incidents.vllm_lines import at
from tools.sample_incidents.vllm_startup import (
    Startup,
    access_line,
    core_death,
    docker_log,
    loading_mib,
    v1_startup,
)

NAME = "vllm-leak-headroom"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
GIB, MIB = 1 << 30, 1 << 20
START = datetime(2025, 10, 14, 5, 58, 20, 116_000, tzinfo=UTC)
T0 = datetime(2025, 10, 14, 6, 0, 0, tzinfo=UTC)
HOUR = 3600.0
BUSY = 2400.0  # busy the first 40 minutes of every hour, then quiet
HOURS = 9
OOM = T0 + timedelta(seconds=8 * HOUR + 1_512.737)
BLOCK, GPU_BLOCKS = 16, 28_176  # "GPU KV cache size: 450,816 tokens"
STARTUP = Startup(
    version="0.10.2",
    api="APIServer pid=1",
    core="EngineCore_DP0 pid=198",
    model=MODEL,
    args="'max_model_len': 16384, 'gpu_memory_utilization': 0.93",
    max_model_len=16_384,
    weights=16_093_911_040,
    kv_bytes=GPU_BLOCKS * 2 * MIB,  # "Available KV cache memory: 55.03 GiB"
    tokens=GPU_BLOCKS * BLOCK,
    graphs=549_453_824,
    utils_lines=(864, 868),
)
SERVER = Server(version=(0, 10), api=STARTUP.api, endpoint="/v1/chat/completions")
TOTAL_MIB = 81_559  # H100 80GB HBM3 as nvidia-smi sees it
TORCH_TOTAL = 85_024_112_640  # cudaMemGetInfo: 79.19 GiB (the driver keeps the rest)
IDLE_MIB = 75_900  # the engine's level when idle on the first hour
LEAK_MIB = 460  # left behind by every busy hour
REQUESTED = 1_258_291_200  # 1.17 GiB: a step's activations


def workload(filler: Filler) -> list[Spec]:
    specs: list[Spec] = []
    for hour in range(HOURS):
        t = hour * HOUR + 2.1
        stop = hour * HOUR + BUSY if hour < HOURS - 1 else (OOM - T0).total_seconds() - 0.4
        while t < stop:
            prompt = int(min(5_000, max(100, math.exp(filler.uniform(5.0, 7.8)))))
            output = int(min(1_800, max(12, math.exp(filler.uniform(4.6, 7.3)))))
            specs.append(
                Spec("chatcmpl-" + filler.hex_id(), round(t, 3), prompt, output, 2048,
                     0.02 + prompt / 9_000, filler.uniform(0.011, 0.015))
            )  # fmt: skip
            t += -math.log(1.0 - filler.uniform(0.0, 0.999)) / 0.45
    return specs


def settings() -> ReplaySettings:
    return ReplaySettings(
        kv_blocks=GPU_BLOCKS - 1, block_size=BLOCK, max_num_seqs=256, max_num_batched_tokens=8192
    )


def leaked_mib(seconds: float) -> int:
    """What the busy hours before ``seconds`` left behind (each one's at its end)."""
    return LEAK_MIB * min(max(int((seconds - BUSY) // HOUR) + 1, 0), HOURS - 1)


def engine_mib(ts: datetime, running: int) -> int:
    """The engine's level, its leak so far and the allocator's cache for the running batch's
    activations (it grows with the batch and is released when the server is quiet)."""
    seconds = (ts - T0).total_seconds()
    activations = 380 + 14 * running if running else 0
    return IDLE_MIB + leaked_mib(seconds) + activations


def gpu_csv(run: Run, filler: Filler) -> str:
    utc = ZoneInfo("UTC")
    stamps: list[datetime] = []
    ts = datetime(2025, 10, 14, 5, 58, 34, 870_000, tzinfo=UTC)
    while ts < OOM + timedelta(seconds=40):
        stamps.append(ts)
        ts += timedelta(microseconds=30_000_000 + filler.jitter_us(2_000, 12_000))
    serving = [t for t in stamps if run.ns(t) > 0]
    running = {p.ts_ns: p.running for p in run.pool([run.ns(t) for t in serving])}
    rows = [tel.GPU_HEADER]
    for ts in stamps:
        used = loading_mib((ts - START).total_seconds(), 17_620)
        if used is None and ts < OOM + timedelta(seconds=1):
            used = engine_mib(ts, running.get(run.ns(ts), 0)) + filler.jitter_us(0, 24)
        elif used is None:  # the engine core is gone
            used = 0
        rows.append(tel.gpu_row(ts, utc, 0, used, TOTAL_MIB))
    return "\n".join(rows) + "\n"


def oom_message(run: Run) -> str:
    running = run.pool([run.ns(OOM)])[0].running
    engine = engine_mib(OOM, running) * MIB + 612 * MIB  # and the step's own activations so far
    free = TORCH_TOTAL - engine
    return (
        f"CUDA out of memory. Tried to allocate {size(REQUESTED)}. GPU 0 has a total capacity of "
        f"{size(TORCH_TOTAL)} of which {size(free)} is free. Including non-PyTorch memory, this "
        f"process has {size(engine)} memory in use. Of the allocated memory "
        f"{size(engine - 3_940 * MIB)} is allocated by PyTorch, with {size(STARTUP.graphs)} "
        f"allocated in private pools (e.g., CUDA Graphs), and {size(318 * MIB)} is reserved by "
        "PyTorch but unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
        "documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )


def build(out: Path) -> Run:
    filler = Filler(20251014)
    run = Run(workload(filler), settings(), T0)
    log = docker_log(filler)
    v1_startup(log, START, STARTUP)
    stop = run.ns(OOM)
    for i in range(len(run.specs)):
        finished = run.finish_ns(i)
        if finished is not None and finished <= stop:
            access_line(log, run.at(finished), STARTUP.api, filler, "200 OK")
    stats_lines(
        log, run, SERVER, first=at(START, 52.0), last=OOM, gpu_blocks=GPU_BLOCKS,
        where="loggers.py:123",
    )  # fmt: skip
    core_death(log, OOM, STARTUP, oom_message(run))
    out.mkdir(parents=True, exist_ok=True)
    (out / "vllm.log").write_text(log.render(), encoding="utf-8")
    (out / "gpu.csv").write_text(gpu_csv(run, filler), encoding="utf-8")
    return run
