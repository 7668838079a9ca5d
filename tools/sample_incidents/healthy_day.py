"""No incident: forty busy minutes of vLLM 0.11 (V1) on an A100 80GB with Llama-3.1-8B-Instruct,
request logging off (vLLM's default since 0.11), the device at 90 % all along because the
engine preallocates its budget, the KV pool at most half full, no preemption, no OOM.

What the team had (``sample_logs/vllm-healthy-day/``): ``vllm.log`` (``docker logs -t vllm``:
docker's RFC 3339 time, vLLM's prefixes and year-less stamps, the stats line every 10 s,
uvicorn's access line for every request) and ``gpu.csv`` (``nvidia-smi
--query-gpu=timestamp,index,memory.used,memory.total --format=csv -l 10``).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

from oomtrace.replay import ReplaySettings
from tools.sample_incidents import telemetry as tel
from tools.sample_incidents.sim import Run, Spec
from tools.sample_incidents.text import Filler
from tools.sample_incidents.vllm_engine import Server, stats_lines
from tools.sample_incidents.vllm_lines import VllmLog, at
from tools.sample_incidents.vllm_startup import (
    Startup,
    access_line,
    docker_log,
    loading_mib,
    v1_startup,
)

NAME = "vllm-healthy-day"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
START = datetime(2025, 7, 8, 9, 18, 40, 211_000, tzinfo=UTC)
T0 = datetime(2025, 7, 8, 9, 20, 0, tzinfo=UTC)
END = datetime(2025, 7, 8, 10, 0, 0, tzinfo=UTC)
MIB = 1 << 20
BLOCK, GPU_BLOCKS = 16, 28_000  # "GPU KV cache size: 448,000 tokens"
STARTUP = Startup(
    version="0.11.0",
    api="APIServer pid=1",
    core="EngineCore_DP0 pid=183",
    model=MODEL,
    args="'max_model_len': 16384",
    max_model_len=16_384,
    weights=16_093_911_040,  # "Model loading took 14.9886 GiB"
    kv_bytes=GPU_BLOCKS * 2 * MIB,  # "Available KV cache memory: 54.69 GiB"
    tokens=GPU_BLOCKS * BLOCK,
    graphs=541_065_216,
)
SERVER = Server(version=(0, 11), api=STARTUP.api, endpoint="/v1/chat/completions")
TOTAL_MIB = 81_920  # A100-SXM4-80GB as nvidia-smi sees it
ENGINE_MIB = 73_522  # weights, pool, graphs, context and the allocator's cache: 89.7 %
RATE = 5.5  # requests a second


def workload(filler: Filler) -> list[Spec]:
    specs: list[Spec] = []
    t = 0.4
    while t < (END - T0).total_seconds() - 30:
        prompt = int(min(6_000, max(80, math.exp(filler.uniform(5.2, 7.9)))))
        output = int(min(2_000, max(10, math.exp(filler.uniform(4.4, 7.2)))))
        specs.append(
            Spec("chatcmpl-" + filler.hex_id(), round(t, 3), prompt, output, 2048,
                 0.02 + prompt / 9_000, filler.uniform(0.021, 0.027))
        )  # fmt: skip
        t += -math.log(1.0 - filler.uniform(0.0, 0.999)) / RATE
    return specs


def settings() -> ReplaySettings:
    return ReplaySettings(
        kv_blocks=GPU_BLOCKS - 1, block_size=BLOCK, max_num_seqs=256, max_num_batched_tokens=8192
    )


def access_lines(log: VllmLog, run: Run, filler: Filler) -> None:
    """No request lines (logging is off): only uvicorn's line when each response is sent."""
    for i in range(len(run.specs)):
        finished = run.finish_ns(i)
        if finished is not None:
            access_line(log, run.at(finished), STARTUP.api, filler, "200 OK")


def gpu_csv(filler: Filler) -> str:
    utc = ZoneInfo("UTC")
    rows = [tel.GPU_HEADER]
    ts = datetime(2025, 7, 8, 9, 18, 31, 402_000, tzinfo=UTC)
    while ts < END:
        used = loading_mib((ts - START).total_seconds(), 17_610)
        if used is None:  # preallocated: it stays; a few MiB come and go with the cache
            used = ENGINE_MIB + filler.jitter_us(0, 96)
        rows.append(tel.gpu_row(ts, utc, 0, used, TOTAL_MIB))
        ts += timedelta(microseconds=10_000_000 + filler.jitter_us(1_000, 9_000))
    return "\n".join(rows) + "\n"


def build(out: Path) -> Run:
    filler = Filler(20250708)
    run = Run(workload(filler), settings(), T0)
    log = docker_log(filler)
    v1_startup(log, START, STARTUP)
    access_lines(log, run, filler)
    stats_lines(
        log, run, SERVER, first=at(START, 53.0), last=END, gpu_blocks=GPU_BLOCKS,
        where="loggers.py:123",
    )  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    (out / "vllm.log").write_text(log.render(), encoding="utf-8")
    (out / "gpu.csv").write_text(gpu_csv(filler), encoding="utf-8")
    return run
