"""The files one incident leaves behind, written in the engines' and tools' real formats from one
truth, so that an alignment test knows exactly where every line belongs.

The line shapes are those of public issue threads (rewritten, not copied): vLLM 0.10 V1 logs
with coloured ``(APIServer pid=N)`` / ``(EngineCore_DP0 pid=N)`` prefixes, uvicorn access lines
and an engine core's OOM traceback (vllm-project/vllm#23230, #29049); vLLM 0.6 V0 ``metrics.py``
stats lines (#12314); SGLang 0.4/0.5 ``Decode batch.`` lines and its ``/metrics`` gauges
(sgl-project/sglang#4444, #22331); llama.cpp's default log, no time on any line, with ggml's
``cudaMalloc failed`` (ggml-org/llama.cpp#7366, ollama/ollama#6860); nvidia-smi CSV from a loop
that appends ``--query-gpu`` and ``--query-compute-apps`` with their headers; Prometheus
``query_range`` JSON; ``date -u -Is; curl /metrics`` scrape loops. The workload is a seeded
random walk, so KV usage and queue lengths have the irregular shape of real traffic (a periodic
curve would agree with itself an hour later).
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

CYAN, RESET = "\x1b[1;36m", "\x1b[0;0m"
API, CORE = 48113, 48291
# What a checkout gives every file: a modification time long after the incident.
CHECKOUT = datetime(2026, 12, 2, 0, 13, 9, tzinfo=UTC)


@dataclass
class Truth:
    """One engine's life in UTC: started at ``start``, serving ``seconds`` seconds, then (if
    ``oom``) dying of an OOM; KV usage, running and waiting requests every second."""

    start: datetime
    seconds: int
    seed: int = 7
    oom: bool = True
    kv: list[float] = field(default_factory=list)
    running: list[int] = field(default_factory=list)
    waiting: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        rng = random.Random(self.seed)
        kv, queue = 0.05, 0.0
        for _ in range(self.seconds + 1):
            kv = min(0.99, max(0.0, kv + rng.gauss(0.002, 0.03)))
            queue = max(0.0, queue + rng.gauss(0.0, 1.5) + (3 if kv > 0.9 else -0.5))
            self.kv.append(kv)
            self.running.append(int(2 + kv * 40))
            self.waiting.append(int(queue))

    @property
    def serving(self) -> datetime:
        """The first moment requests are served (the engine took 40 s to start)."""
        return self.start + timedelta(seconds=40)

    @property
    def end(self) -> datetime:
        return self.serving + timedelta(seconds=self.seconds)

    def at(self, when: datetime) -> int:
        """The workload's second at ``when`` (clamped)."""
        return max(0, min(self.seconds, int((when - self.serving).total_seconds())))


def local(when: datetime, zone: str) -> datetime:
    return when.astimezone(ZoneInfo(zone))


def checked_out(*paths: Path) -> None:
    for path in paths:
        os.utime(path, (CHECKOUT.timestamp(), CHECKOUT.timestamp()))


def vllm_v1_log(path: Path, truth: Truth, zone: str) -> Path:
    """``nohup vllm serve ... > vllm.log 2>&1`` of vLLM 0.10.2, times printed in ``zone``."""

    def line(who: str, pid: int, level: str, when: datetime, src: str, text: str) -> str:
        stamp = local(when, zone).strftime("%m-%d %H:%M:%S")
        return f"{CYAN}({who} pid={pid}){RESET} {level} {stamp} [{src}] {text}"

    start, core, api = truth.start, ("EngineCore_DP0", CORE), ("APIServer", API)
    out = [
        line(*api, "INFO", start - timedelta(seconds=20), "api_server.py:1896",
             "vLLM API server version 0.10.2"),
        line(*core, "INFO", start, "core.py:76",
             "Initializing a V1 LLM engine (v0.10.2) with config: "
             "model='meta-llama/Llama-3.1-8B-Instruct', dtype=torch.bfloat16, max_seq_len=16384"),
        line(*core, "INFO", start + timedelta(seconds=12), "gpu_model_runner.py:2392",
             "Model loading took 14.9886 GiB and 10.402358 seconds"),
    ]  # fmt: skip
    for second in range(0, truth.seconds + 1, 10):
        when = truth.serving + timedelta(seconds=second)
        if second % 30 == 5:
            out.append('INFO:     10.2.180.46:43706 - "POST /v1/completions HTTP/1.1" 200 OK')
        running, waiting, kv = truth.running[second], truth.waiting[second], truth.kv[second]
        stats = (
            f"Engine 000: Avg prompt throughput: {running * 31.7:.1f} tokens/s, Avg generation "
            f"throughput: {running * 8.9:.1f} tokens/s, Running: {running} reqs, Waiting: "
            f"{waiting} reqs, GPU KV cache usage: {kv * 100:.1f}%, Prefix cache hit rate: 0.0%"
        )
        out.append(line(*api, "INFO", when, "loggers.py:123", stats))
    if truth.oom:
        end, err = truth.end, "core.py:710"
        oom = (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.47 GiB. GPU 0 has a "
            "total capacity of 39.39 GiB of which 1.25 GiB is free. Including non-PyTorch memory, "
            "this process has 38.12 GiB memory in use. Of the allocated memory 36.03 GiB is "
            "allocated by PyTorch, and 22.16 MiB is reserved by PyTorch but unallocated."
        )
        frame = (
            '  File "/opt/vllm/.venv/lib/python3.12/site-packages/vllm/v1/engine/core.py", '
            "line 701, in run_engine_core"
        )
        died = "Engine core proc EngineCore_DP0 died unexpectedly, shutting down client."
        out += [
            line(*core, "ERROR", end, err, "EngineCore encountered a fatal error."),
            line(*core, "ERROR", end, err, "Traceback (most recent call last):"),
            line(*core, "ERROR", end, err, frame),
            line(*core, "ERROR", end, err, oom),
            line(*api, "ERROR", end, "async_llm.py:480", "AsyncLLM output_handler failed."),
            line(*api, "ERROR", end + timedelta(seconds=1), "core_client.py:564", died),
        ]
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return path


def vllm_v0_log(path: Path, truth: Truth, zone: str) -> Path:
    """A vLLM 0.6 V0 log (no process prefix; ``metrics.py`` stats every 5 s), in ``zone``."""
    config = "model='Qwen/Qwen2.5-7B-Instruct', dtype=torch.bfloat16"
    started = f"{local(truth.start, zone):%m-%d %H:%M:%S}"
    engine = "Initializing an LLM engine (v0.6.4.post1) with config"
    out = [f"INFO {started} llm_engine.py:237] {engine}: {config}"]
    for second in range(0, truth.seconds + 1, 5):
        when = local(truth.serving + timedelta(seconds=second), zone)
        running, waiting, kv = truth.running[second], truth.waiting[second], truth.kv[second]
        out.append(
            f"INFO {when:%m-%d %H:%M:%S} metrics.py:449] Avg prompt throughput: 0.0 tokens/s, "
            f"Avg generation throughput: {running * 9.1:.1f} tokens/s, Running: {running} reqs, "
            f"Swapped: 0 reqs, Pending: {waiting} reqs, GPU KV cache usage: {kv * 100:.1f}%, "
            "CPU KV cache usage: 0.0%."
        )
    path.write_text("\r\n".join(out) + "\r\n", encoding="utf-8")
    return path


def sglang_log(path: Path, truth: Truth, zone: str, pool: int = 31_864) -> Path:
    """SGLang 0.4/0.5 (``[YYYY-MM-DD HH:MM:SS]`` in ``zone``): the server_args line, memory lines
    and a ``Decode batch.`` line every 2 s (40 decode steps)."""

    def stamp(when: datetime) -> str:
        return f"[{local(when, zone):%Y-%m-%d %H:%M:%S}]"

    args = (
        "server_args=ServerArgs(model_path='meta-llama/Llama-3.1-8B-Instruct', tp_size=1, "
        "mem_fraction_static=0.88, enable_metrics=True)"
    )
    allocated = f"KV Cache is allocated. #tokens: {pool}, K size: 1.94 GB, V size: 1.94 GB"
    out = [
        f"{stamp(truth.start)} {args}",
        f"{stamp(truth.start + timedelta(seconds=20))} {allocated}",
    ]
    for second in range(0, truth.seconds + 1, 2):
        when = truth.serving + timedelta(seconds=second)
        tokens = int(truth.kv[second] * pool)
        out.append(
            f"{stamp(when)} Decode batch. #running-req: {truth.running[second]}, #token: {tokens}, "
            f"token usage: {tokens / pool:.2f}, cuda graph: True, gen throughput (token/s): "
            f"{truth.running[second] * 30.7:.2f}, #queue-req: {truth.waiting[second]}, "
        )
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return path


def sglang_scrapes(path: Path, truth: Truth, pool: int = 31_864, every: int = 5) -> Path:
    """``while sleep 5; do date -u -Is; curl -s :30000/metrics; done >> metrics.prom``."""
    labels = '{engine_type="unified",model_name="meta-llama/Llama-3.1-8B-Instruct",tp_rank="0"}'
    out: list[str] = []
    for second in range(1, truth.seconds + 1, every):
        when = truth.serving + timedelta(seconds=second, milliseconds=310)
        tokens = int(truth.kv[second] * pool)
        out.append(when.replace(microsecond=0).isoformat())
        for name, kind, value in (
            ("num_running_reqs", "The number of running requests.", truth.running[second]),
            ("num_used_tokens", "The number of used tokens.", tokens),
            ("token_usage", "The token usage.", round(tokens / pool, 4)),
            ("num_queue_reqs", "The number of requests in the queue.", truth.waiting[second]),
        ):
            out += [f"# HELP sglang:{name} {kind}", f"# TYPE sglang:{name} gauge",
                    f"sglang:{name}{labels} {float(value)}"]  # fmt: skip
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return path


def vllm_v0_query_json(path: Path, truth: Truth, step: int = 15) -> Path:
    """``/api/v1/query_range`` of vLLM 0.6's gauges (V0 names), ``step`` seconds, epoch times."""
    labels = {"instance": "10.0.3.5:8000", "job": "vllm", "model_name": "Qwen/Qwen2.5-7B-Instruct"}
    seconds = range(3, truth.seconds + 1, step)
    stamp = [(truth.serving + timedelta(seconds=s)).timestamp() for s in seconds]

    def series(name: str, values: list[float]) -> dict[str, object]:
        return {
            "metric": {"__name__": name, **labels},
            "values": [[t, repr(float(values[s]))] for t, s in zip(stamp, seconds, strict=True)],
        }

    doc = {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [
                series("vllm:gpu_cache_usage_perc", truth.kv),
                series("vllm:num_requests_running", [float(r) for r in truth.running]),
                series("vllm:num_requests_waiting", [float(w) for w in truth.waiting]),
            ],
        },
    }
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


@dataclass(frozen=True)
class Life:
    """One process's life on the GPU as nvidia-smi saw it (UTC): it appears ``up`` (``MiB``
    used) and is gone at ``down``."""

    pid: int
    name: str
    up: datetime
    down: datetime | None
    mib: int


def ticks(first: datetime, last: datetime, every: int = 2) -> list[datetime]:
    """When a ``sleep every`` loop runs nvidia-smi: a few milliseconds late each time."""
    out, when = [], first
    while when <= last:
        out.append(when)
        when += timedelta(seconds=every, milliseconds=3)
    return out


def nvidia_smi_csv(
    path: Path, lives: list[Life], first: datetime, last: datetime, zone: str, every: int = 2
) -> Path:
    """A loop appending ``--query-gpu=timestamp,index,uuid,memory.used,memory.total`` and
    ``--query-compute-apps=timestamp,gpu_uuid,pid,process_name,used_gpu_memory`` (CSV, headers
    repeated) every ``every`` seconds, times in ``zone`` as nvidia-smi prints them."""
    uuid = "GPU-0a6f2c1d-93b8-4e57-b2a9-6d0c8e4f1b72"
    out: list[str] = []
    for when in ticks(first, last, every):
        alive = [p for p in lives if p.up <= when and (p.down is None or when < p.down)]
        stamp = local(when, zone).strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
        used = sum(p.mib for p in alive) + (6 if alive else 0)
        out += [
            "timestamp, index, uuid, memory.used [MiB], memory.total [MiB]",
            f"{stamp}, 0, {uuid}, {used} MiB, 40960 MiB",
            "timestamp, gpu_uuid, pid, process_name, used_gpu_memory [MiB]",
            *(f"{stamp}, {uuid}, {p.pid}, {p.name}, {p.mib} MiB" for p in alive),
        ]
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return path


def dcgm_query_json(path: Path, lives: list[Life], first: datetime, last: datetime) -> Path:
    """``/api/v1/query_range`` of DCGM's ``DCGM_FI_DEV_FB_USED`` (MiB), 5 s step, epoch times."""
    values = []
    when = first
    while when <= last:
        alive = [p for p in lives if p.up <= when and (p.down is None or when < p.down)]
        values.append([when.timestamp(), str(sum(p.mib for p in alive))])
        when += timedelta(seconds=5)
    labels = {"gpu": "0", "UUID": "GPU-34319582-d595-d1c7-d1d2-179bcfa61660",
              "device": "nvidia0", "Hostname": "ub20-a100-k8s"}  # fmt: skip
    doc = {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [{"metric": {"__name__": "DCGM_FI_DEV_FB_USED", **labels}, "values": values}],
        },
    }
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def llama_cpp_log(path: Path, failures: int = 1) -> Path:
    """llama-server's default output (no time on any line), failing to allocate its compute
    buffer ``failures`` times (a restart loop appends to the same file)."""
    model = "models/Meta-Llama-3.1-70B-Instruct-Q4_K_M.gguf"
    loaded = f"loaded meta data with 29 key-value pairs and 291 tensors from {model}"
    failed = "allocating 1104.00 MiB on device 0: cudaMalloc failed: out of memory"
    attempt = [
        "build: 4240 (2e4c8fd4) with cc (Ubuntu 11.4.0) 11.4.0 for x86_64-linux-gnu",
        f"llama_model_loader: {loaded}",
        "llm_load_tensors: offloaded 81/81 layers to GPU",
        "llm_load_tensors:        CUDA0 model buffer size = 36543.11 MiB",
        "llama_new_context_with_model: n_ctx      = 8192",
        "llama_kv_cache_init:      CUDA0 KV buffer size =  2560.00 MiB",
        f"ggml_backend_cuda_buffer_type_alloc_buffer: {failed}",
        "ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 1157627904",
        "llama_new_context_with_model: failed to allocate compute buffers",
        f"srv    load_model: failed to load model, '{model}'",
        "main: exiting due to model loading error",
    ]
    filler = [f"llm_load_print_meta: n_head_kv        = {i}" for i in range(60)]
    lines: list[str] = []
    for _ in range(failures):
        lines += filler + attempt
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
