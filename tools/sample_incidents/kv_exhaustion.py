"""Incident 1: vLLM 0.13 (V1) on one A10G, Llama-3.1-8B-Instruct: four long report requests
grow together until the KV pool is exhausted, then a preemption storm.

What the team had after the outage (all under ``sample_logs/vllm-kv-exhaustion/``):

* ``vllm.log``: ``docker compose logs -t vllm`` (service prefix, the daemon's RFC 3339 time,
  then vLLM's own ``(APIServer pid=1)`` / ``(EngineCore_DP0 pid=211)`` prefix and year-less
  time), served with ``--enable-log-requests --enable-log-outputs`` and
  ``VLLM_LOGGING_LEVEL=DEBUG`` (0.12+ prints prompt token ids only at DEBUG);
* ``prometheus.json``: ``/api/v1/query_range`` for the vLLM gauges and counters, 5 s steps;
* ``gpu.csv``: ``nvidia-smi --query-gpu=timestamp,index,memory.used,memory.total --format=csv
  -l 5``.
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
from tools.sample_incidents.vllm_engine import Server, request_lines, stats_lines
from tools.sample_incidents.vllm_lines import (
    VllmLog,
    at,
    compose_prefix,
    kv_cache_lines,
)

NAME = "vllm-kv-exhaustion"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
START = datetime(2025, 3, 14, 13, 58, 2, 417_000, tzinfo=UTC)
T0 = datetime(2025, 3, 14, 14, 0, 0, tzinfo=UTC)
END = datetime(2025, 3, 14, 14, 12, 0, tzinfo=UTC)
BLOCK = 16
GAP = 1.8
LONG_DECODE_S = 0.036
GPU_BLOCKS = 1971  # "GPU KV cache size: 31,536 tokens"; block 0 is vLLM's null block
KV_BYTES = 4_134_118_195  # 3.85 GiB printed: 1971 blocks of 2 MiB and a remainder
TOTAL_MIB = 23_028  # NVIDIA A10G
SERVING_MIB = 20_602
API, CORE = "APIServer pid=1", "EngineCore_DP0 pid=211"
SERVER = Server(version=(0, 13), api=API)
LONG = (  # the nightly report job: (arrival s, prompt, output)
    (130.4, 3_112, 7_790),
    (146.9, 2_388, 8_874),
    (161.2, 4_205, 6_512),
    (178.8, 2_901, 9_577),
)


def workload(filler: Filler) -> list[Spec]:
    specs: list[Spec] = []
    t = 0.7
    while t < 560:
        prompt = int(min(3_000, max(60, math.exp(filler.uniform(4.8, 6.9)))))
        output = int(min(900, max(8, math.exp(filler.uniform(3.3, 5.9)))))
        max_tokens = 1024 if output < 1000 else 2048
        specs.append(
            Spec(
                rid="cmpl-" + filler.hex_id() + "-0",
                arrival_s=round(t, 3),
                prompt=prompt,
                output=output,
                max_tokens=max_tokens,
                prefill_s=0.03 + prompt / 4_000,
                decode_s=filler.uniform(0.031, 0.039),
            )
        )
        t += -GAP * math.log(1.0 - filler.uniform(0.0, 0.999))
    for arrival, prompt, output in LONG:
        specs.append(
            Spec(
                rid="cmpl-" + filler.hex_id() + "-0",
                arrival_s=arrival,
                prompt=prompt,
                output=output,
                max_tokens=12_000,
                prefill_s=0.03 + prompt / 4_000,
                decode_s=LONG_DECODE_S,
            )
        )
    return sorted(specs, key=lambda s: s.arrival_s)


def settings() -> ReplaySettings:
    # vLLM keeps block 0 as its null block: 1,970 of the 1,971 blocks hold tokens
    return ReplaySettings(
        kv_blocks=GPU_BLOCKS - 1, block_size=BLOCK, max_num_seqs=64, max_num_batched_tokens=8192
    )


def startup(log: VllmLog) -> None:
    s = START
    log.record(at(s, 0), API, "INFO", "api_server.py:1351", "vLLM API server version 0.13.0")
    log.record(
        at(s, 0.01), API, "INFO", "utils.py:253",
        f"non-default args: {{'model_tag': '{MODEL}', 'host': '0.0.0.0', 'model': '{MODEL}', "
        "'max_model_len': 16384, 'gpu_memory_utilization': 0.9, 'max_num_seqs': 64, "
        "'enable_prefix_caching': False, 'enable_log_requests': True, "
        "'enable_log_outputs': True}",
    )  # fmt: skip
    log.record(at(s, 4.1), API, "INFO", "model.py:637", "Resolved architecture: LlamaForCausalLM")
    log.record(at(s, 4.1), API, "INFO", "model.py:1750", "Using max model len 16384")
    log.record(
        at(s, 4.2), API, "INFO", "scheduler.py:228",
        "Chunked prefill is enabled with max_num_batched_tokens=8192.",
    )  # fmt: skip
    log.record(
        at(s, 9.3), CORE, "INFO", "core.py:93",
        f"Initializing a V1 LLM engine (v0.13.0) with config: model='{MODEL}', "
        f"speculative_config=None, tokenizer='{MODEL}', skip_tokenizer_init=False, "
        "tokenizer_mode=auto, revision=None, tokenizer_revision=None, trust_remote_code=False, "
        "dtype=torch.bfloat16, max_seq_len=16384, download_dir=None, load_format=auto, "
        "tensor_parallel_size=1, pipeline_parallel_size=1, data_parallel_size=1, "
        "disable_custom_all_reduce=False, quantization=None, enforce_eager=False, "
        "kv_cache_dtype=auto, device_config=cuda, seed=0, "
        f"served_model_name={MODEL}, enable_prefix_caching=False, enable_chunked_prefill=True",
    )  # fmt: skip
    log.record(
        at(s, 11.0), CORE, "INFO", "parallel_state.py:1208",
        "rank 0 in world size 1 is assigned as DP rank 0, PP rank 0, TP rank 0, EP rank 0",
    )  # fmt: skip
    log.record(
        at(s, 11.4), CORE, "INFO", "gpu_model_runner.py:2854",
        f"Starting to load model {MODEL}...",
    )  # fmt: skip
    log.record(
        at(s, 17.9), CORE, "INFO", "default_loader.py:267", "Loading weights took 5.91 seconds"
    )
    log.record(
        at(s, 18.4), CORE, "INFO", "gpu_model_runner.py:2908",
        "Model loading took 14.9889 GiB memory and 6.874215 seconds",
    )  # fmt: skip
    log.record(
        at(s, 29.8), CORE, "DEBUG", "utils.py:2709",
        "Memory profiling takes 11.21 seconds. Total non KV cache memory: 16.39GiB; torch peak "
        "memory increase: 1.18GiB; non-torch forward increase memory: 0.22GiB; weights memory: "
        "14.99GiB.",
    )  # fmt: skip
    kv_cache_lines(
        log, at(s, 29.8), CORE, kv_bytes=KV_BYTES, tokens=GPU_BLOCKS * BLOCK,
        max_model_len=16_384, utils_lines=(1087, 1091),
    )  # fmt: skip
    log.record(
        at(s, 39.1), CORE, "INFO", "gpu_model_runner.py:3782",
        "Graph capturing finished in 9 secs, took 0.43 GiB",
    )  # fmt: skip
    log.record(
        at(s, 39.4), CORE, "INFO", "core.py:210",
        "init engine (profile, create kv cache, warmup model) took 30.08 seconds",
    )  # fmt: skip
    log.record(
        at(s, 41.0), API, "INFO", "api_server.py:1647",
        "Starting vLLM API server 0 on http://0.0.0.0:8000",
    )  # fmt: skip
    log.raw(at(s, 41.2), API, "INFO:     Started server process [1]")
    log.raw(at(s, 41.2), API, "INFO:     Waiting for application startup.")
    log.raw(at(s, 41.3), API, "INFO:     Application startup complete.")


def prometheus(run: Run) -> str:
    steps = [
        datetime(2025, 3, 14, 13, 59, 0, tzinfo=UTC) + timedelta(seconds=5 * k) for k in range(157)
    ]
    scrapes = [s - timedelta(milliseconds=1_312) for s in steps]
    serving = [s > at(START, 41.3) for s in scrapes]
    probes = [run.ns(s) for s in scrapes]
    points = run.pool([p for p in probes if p > 0])
    by = {p.ts_ns: p for p in points}
    labels = {"engine": "0", "instance": "10.0.3.5:8000", "job": "vllm", "model_name": MODEL}
    kv, running, waiting, preempted = [], [], [], []
    for step, probe, up in zip(steps, probes, serving, strict=True):
        if not up:
            continue
        t = tel.unix(step)
        point = by.get(probe)
        blocks = point.blocks if point else 0
        kv.append((t, blocks / GPU_BLOCKS))
        running.append((t, float(point.running if point else 0)))
        waiting.append((t, float(point.waiting if point else 0)))
        preempted.append((t, float(run.preemptions_between(-1, probe))))
    info = {
        "__name__": "vllm:cache_config_info", **labels, "block_size": "16",
        "cache_dtype": "auto", "enable_prefix_caching": "False",
        "gpu_memory_utilization": "0.9", "num_gpu_blocks": str(GPU_BLOCKS),
        "num_gpu_blocks_override": "None", "sliding_window": "None", "cpu_offload_gb": "0",
    }  # fmt: skip
    series = [
        tel.Series(info, [(t, 1.0) for t, _ in kv]),
        tel.Series({"__name__": "vllm:kv_cache_usage_perc", **labels}, kv),
        tel.Series({"__name__": "vllm:num_preemptions_total", **labels}, preempted),
        tel.Series({"__name__": "vllm:num_requests_running", **labels}, running),
        tel.Series({"__name__": "vllm:num_requests_waiting", **labels}, waiting),
    ]
    return tel.query_range_json(series)


def gpu_csv(filler: Filler) -> str:
    utc = ZoneInfo("UTC")
    rows = [tel.GPU_HEADER]
    ts = datetime(2025, 3, 14, 13, 57, 41, 208_000, tzinfo=UTC)
    while ts < END:
        seconds = (ts - START).total_seconds()
        if seconds < 9:
            used = 0
        elif seconds < 18.5:
            used = 480 + int((seconds - 9) / 9.5 * 15_350)
        elif seconds < 29.8:
            used = 17_062
        elif seconds < 39.4:
            used = 20_470
        else:
            used = SERVING_MIB
        rows.append(tel.gpu_row(ts, utc, 0, used, TOTAL_MIB))
        ts += timedelta(microseconds=5_000_000 + filler.jitter_us(900, 4_200))
    return "\n".join(rows) + "\n"


def build(out: Path) -> Run:
    filler = Filler(20250314)
    run = Run(workload(filler), settings(), T0)
    log = VllmLog(
        outer=compose_prefix("vllm-1", 6),
        delay=lambda: timedelta(microseconds=filler.jitter_us(40, 900)),
    )
    startup(log)
    request_lines(log, run, filler, SERVER)
    stats_lines(
        log, run, SERVER, first=at(START, 48.0), last=END, gpu_blocks=GPU_BLOCKS,
        where="loggers.py:236",
    )  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    (out / "vllm.log").write_text(log.render(), encoding="utf-8")
    (out / "prometheus.json").write_text(prometheus(run), encoding="utf-8")
    (out / "gpu.csv").write_text(gpu_csv(filler), encoding="utf-8")
    return run
