"""Foreign memory that only the OOM message shows: vLLM 0.11 (V1) on an L40S with
Qwen2.5-7B-Instruct at ``--gpu-memory-utilization 0.85``, request logging off; a colleague's
process on the same GPU (pid 58213 on the host) holds 6.87 GiB, more than the 6.66 GiB the
engine's budget leaves, and a prefill chunk's 592 MiB allocation finds 533 MiB free.

What the team had (``sample_logs/vllm-oom-names-process/``): ``vllm.log`` (``docker logs -t``),
nothing else: no nvidia-smi, no metrics. PyTorch's message lists every process on the device
("Process N has X memory in use", ``c10/cuda/CUDACachingAllocator.cpp`` from 2.1), the engine's
own under its host pid, which the container's log prefix does not use.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

from oomtrace.replay import ReplaySettings
from tools.sample_incidents.prefill_oom import size
from tools.sample_incidents.sim import Run, Spec
from tools.sample_incidents.text import Filler
from tools.sample_incidents.vllm_engine import Server, stats_lines
from tools.sample_incidents.vllm_lines import VllmLog, at
from tools.sample_incidents.vllm_startup import (
    Startup,
    access_line,
    core_death,
    docker_log,
    v1_startup,
)

NAME = "vllm-oom-names-process"
MODEL = "Qwen/Qwen2.5-7B-Instruct"
GIB, MIB = 1 << 30, 1 << 20
START = datetime(2025, 9, 23, 14, 2, 11, 934_000, tzinfo=UTC)
T0 = datetime(2025, 9, 23, 14, 3, 0, tzinfo=UTC)
OOM = datetime(2025, 9, 23, 14, 19, 47, 318_000, tzinfo=UTC)
BLOCK, BLOCK_BYTES = 16, 16 * 57_344  # Qwen2.5-7B: 28 layers x 4 KV heads x 128 x 2 x 2 B a token
GPU_BLOCKS = 25_160
STARTUP = Startup(
    version="0.11.0",
    api="APIServer pid=1",
    core="EngineCore_DP0 pid=211",
    model=MODEL,
    args="'max_model_len': 32768, 'gpu_memory_utilization': 0.85",
    max_model_len=32_768,
    weights=15_299_532_502,  # "Model loading took 14.2488 GiB"
    kv_bytes=GPU_BLOCKS * BLOCK_BYTES,  # "Available KV cache memory: 21.50 GiB"
    tokens=GPU_BLOCKS * BLOCK,
    graphs=499_122_176,
)
SERVER = Server(version=(0, 11), api=STARTUP.api, endpoint="/v1/chat/completions")
TORCH_TOTAL = 47_664_070_656  # L40S as cudaMemGetInfo sees it: 44.39 GiB
OTHER_PID, OTHER = 58_213, 7_376_730_112  # 6.87 GiB
ENGINE_HOST_PID, ENGINE = 41_077, 39_728_447_488  # 37.00 GiB with its context
# The MLP's gate and up projections of a full 8,192-token prefill chunk: 8,192 x 2 x 18,944 x 2 B
REQUESTED = 8_192 * 2 * 18_944 * 2
FREE = TORCH_TOTAL - ENGINE - OTHER  # 533.00 MiB


def workload(filler: Filler) -> list[Spec]:
    specs: list[Spec] = []
    t = 0.9
    while t < (OOM - T0).total_seconds() - 0.5:
        prompt = int(min(9_000, max(120, math.exp(filler.uniform(5.5, 8.8)))))
        output = int(min(900, max(8, math.exp(filler.uniform(3.5, 6.3)))))
        specs.append(
            Spec("chatcmpl-" + filler.hex_id(), round(t, 3), prompt, output, 1024,
                 0.02 + prompt / 7_000, filler.uniform(0.020, 0.026))
        )  # fmt: skip
        t += -1.6 * math.log(1.0 - filler.uniform(0.0, 0.999))
    return specs


def settings() -> ReplaySettings:
    return ReplaySettings(
        kv_blocks=GPU_BLOCKS - 1, block_size=BLOCK, max_num_seqs=256, max_num_batched_tokens=8192
    )


def oom_message() -> str:
    """PyTorch 2.8's message: the other process first, then the engine under its host pid."""
    allocated = ENGINE - 612 * MIB - 262 * MIB
    return (
        f"CUDA out of memory. Tried to allocate {size(REQUESTED)}. GPU 0 has a total capacity of "
        f"{size(TORCH_TOTAL)} of which {size(FREE)} is free. Process {OTHER_PID} has "
        f"{size(OTHER)} memory in use. Process {ENGINE_HOST_PID} has {size(ENGINE)} memory in "
        f"use. Including non-PyTorch memory, this process has {size(ENGINE)} memory in use. Of "
        f"the allocated memory {size(allocated)} is allocated by PyTorch, with "
        f"{size(STARTUP.graphs)} allocated in private pools (e.g., CUDA Graphs), and "
        f"{size(262 * MIB)} is reserved by PyTorch but unallocated. If reserved but unallocated "
        "memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
        "fragmentation.  See documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )


def served(log: VllmLog, run: Run, filler: Filler, until: datetime) -> None:
    """No request lines (logging is off): uvicorn's line for each response sent before the
    engine died, and a 500 for each request in flight then."""
    stop = run.ns(until)
    for i in range(len(run.specs)):
        finished = run.finish_ns(i)
        if finished is not None and finished <= stop:
            access_line(log, run.at(finished), STARTUP.api, filler, "200 OK")
        elif run.arrival_ns(i) <= stop:
            late = until + timedelta(milliseconds=840 + 3 * i % 50)
            access_line(log, late, STARTUP.api, filler, "500 Internal Server Error")


def build(out: Path) -> Run:
    filler = Filler(20250923)
    run = Run(workload(filler), settings(), T0)
    log = docker_log(filler)
    v1_startup(log, START, STARTUP)
    served(log, run, filler, OOM)
    stats_lines(
        log, run, SERVER, first=at(START, 51.0), last=OOM, gpu_blocks=GPU_BLOCKS,
        where="loggers.py:123",
    )  # fmt: skip
    core_death(log, OOM, STARTUP, oom_message())
    out.mkdir(parents=True, exist_ok=True)
    (out / "vllm.log").write_text(log.render(), encoding="utf-8")
    return run
