"""Incident 4: vLLM 0.10.2 on an A100 40GB shared with a colleague's embedding job. The job's
PyTorch process (pid 51377) grows from 1.2 GiB to 5.6 GiB on the same GPU; vLLM, started with
``--gpu-memory-utilization 0.85`` to leave room for it, needs 1.12 GiB more for a long prefill and
there is none left.

What the team had: ``vllm.log`` (``nohup vllm serve ... > vllm.log``: colour-coded process
prefixes, year-less times) and ``gpu.csv`` from a shell loop that appends both nvidia-smi queries
every two seconds (``--query-gpu=timestamp,index,uuid,memory.used,memory.total`` and
``--query-compute-apps=timestamp,gpu_uuid,pid,process_name,used_gpu_memory``, headers repeated).
The server ran on the host, so vLLM's pids and nvidia-smi's agree.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

from oomtrace.replay import ReplaySettings
from tools.sample_incidents import telemetry as tel
from tools.sample_incidents import vllm_engine as ve
from tools.sample_incidents.prefill_oom import size
from tools.sample_incidents.sim import Run, Spec
from tools.sample_incidents.text import Filler
from tools.sample_incidents.vllm_lines import VllmLog, at, kv_cache_lines

NAME = "vllm-foreign-process"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
GIB, MIB = 1 << 30, 1 << 20
START = datetime(2025, 5, 6, 10, 2, 41, 507_000, tzinfo=UTC)
T0 = datetime(2025, 5, 6, 10, 14, 0, tzinfo=UTC)
JOB_START = datetime(2025, 5, 6, 10, 15, 9, 330_000, tzinfo=UTC)
OOM = datetime(2025, 5, 6, 10, 18, 41, 912_000, tzinfo=UTC)
API_PID, CORE_PID, JOB_PID = 48_113, 48_291, 51_377
API, CORE = f"APIServer pid={API_PID}", f"EngineCore_DP0 pid={CORE_PID}"
UUID = "GPU-0a6f2c1d-93b8-4e57-b2a9-6d0c8e4f1b72"
NVML_TOTAL = 40_960 * MIB  # A100-SXM4-40GB as nvidia-smi sees it
TORCH_TOTAL = 40_336 * MIB  # cudaMemGetInfo: 39.39 GiB
BLOCK, BLOCK_BYTES = 16, 2 * MIB
WEIGHTS = 16_093_911_040  # "Model loading took 14.9886 GiB"
KV_BYTES = 17_824_989_184  # "Available KV cache memory: 16.60 GiB"
GPU_BLOCKS = KV_BYTES // BLOCK_BYTES
NON_TORCH = 598 * MIB
SLACK = 1_210 * MIB
GRAPHS = 486 * MIB
REQUESTED = 7_912 * 28_672 * 2  # gate and up projections of a 7,912-token prefill: 432.69 MiB
SERVER = ve.Server(version=(0, 10), api=API)


def workload(filler: Filler) -> list[Spec]:
    specs: list[Spec] = []
    t = 1.3
    end = (OOM - T0).total_seconds()
    while t < end:
        prompt = int(min(4_000, max(80, math.exp(filler.uniform(5.0, 7.0)))))
        output = int(min(800, max(10, math.exp(filler.uniform(3.6, 5.9)))))
        specs.append(
            Spec("cmpl-" + filler.hex_id() + "-0", round(t, 3), prompt, output, 1024,
                 0.02 + prompt / 6_000, filler.uniform(0.019, 0.024))
        )  # fmt: skip
        t += -2.0 * math.log(1.0 - filler.uniform(0.0, 0.999))
    late = (OOM - T0).total_seconds() - 0.41
    specs.append(Spec("cmpl-" + filler.hex_id() + "-0", late, 7_912, 300, 1024, 1.4, 0.021))
    return sorted(specs, key=lambda s: s.arrival_s)


def settings() -> ReplaySettings:
    return ReplaySettings(
        kv_blocks=GPU_BLOCKS - 1, block_size=BLOCK, max_num_seqs=256, max_num_batched_tokens=8192
    )


def job_bytes(now: datetime) -> int:
    """The embedding job: a CUDA context and a model, then batches that keep growing."""
    s = (now - JOB_START).total_seconds()
    if s < 0:
        return 0
    steps = min(int(s // 21), 9)
    return 1_268 * MIB + steps * 446 * MIB + (16 * MIB if s % 21 > 3 else 0)


def engine_bytes(now: datetime) -> int:
    """The engine core process (reserved + outside PyTorch) once it has started."""
    s = (now - START).total_seconds()
    if s < 20.8:
        return 0
    if s < 30.1:
        return NON_TORCH + int((s - 20.8) / 9.3 * WEIGHTS) // MIB * MIB
    if s < 37.6:
        return NON_TORCH + WEIGHTS + SLACK
    return NON_TORCH + WEIGHTS + KV_BYTES + GRAPHS + SLACK


def startup(log: VllmLog) -> None:
    s = START
    log.record(at(s, 0.0), API, "INFO", "api_server.py:1896", "vLLM API server version 0.10.2")
    log.record(
        at(s, 0.01), API, "INFO", "utils.py:328",
        f"non-default args: {{'model_tag': '{MODEL}', 'model': '{MODEL}', 'max_model_len': 16384, "
        "'gpu_memory_utilization': 0.85, 'enable_log_requests': True, 'enable_log_outputs': "
        "True}",
    )  # fmt: skip
    log.record(
        at(s, 6.2), API, "INFO", "__init__.py:742", "Resolved architecture: LlamaForCausalLM"
    )
    log.record(at(s, 6.2), API, "INFO", "__init__.py:1815", "Using max model len 16384")
    log.record(
        at(s, 6.3), API, "INFO", "scheduler.py:222",
        "Chunked prefill is enabled with max_num_batched_tokens=8192.",
    )  # fmt: skip
    log.record(
        at(s, 19.9), CORE, "INFO", "core.py:76",
        f"Initializing a V1 LLM engine (v0.10.2) with config: model='{MODEL}', "
        f"speculative_config=None, tokenizer='{MODEL}', skip_tokenizer_init=False, "
        "tokenizer_mode=auto, revision=None, tokenizer_revision=None, trust_remote_code=False, "
        "dtype=torch.bfloat16, max_seq_len=16384, download_dir=None, load_format=auto, "
        "tensor_parallel_size=1, pipeline_parallel_size=1, data_parallel_size=1, "
        "disable_custom_all_reduce=False, quantization=None, enforce_eager=False, "
        "kv_cache_dtype=auto, device_config=cuda, seed=0, "
        f"served_model_name={MODEL}, enable_prefix_caching=True, chunked_prefill_enabled=True",
    )  # fmt: skip
    log.record(
        at(s, 20.9), CORE, "INFO", "gpu_model_runner.py:2338", f"Starting to load model {MODEL}..."
    )  # fmt: skip
    log.record(
        at(s, 30.1), CORE, "INFO", "gpu_model_runner.py:2392",
        f"Model loading took {WEIGHTS / GIB:.4f} GiB and 9.112871 seconds",
    )  # fmt: skip
    kv_cache_lines(
        log, at(s, 37.5), CORE, kv_bytes=KV_BYTES, tokens=GPU_BLOCKS * BLOCK,
        max_model_len=16_384, utils_lines=(864, 868),
    )  # fmt: skip
    log.record(
        at(s, 47.9), CORE, "INFO", "gpu_model_runner.py:3118",
        f"Graph capturing finished in 10 secs, took {GRAPHS / GIB:.2f} GiB",
    )  # fmt: skip
    log.record(
        at(s, 48.0), CORE, "INFO", "core.py:218",
        "init engine (profile, create kv cache, warmup model) took 17.94 seconds",
    )  # fmt: skip
    log.record(
        at(s, 50.2), API, "INFO", "api_server.py:1971",
        "Starting vLLM API server 0 on http://0.0.0.0:8000",
    )  # fmt: skip
    for k, line in enumerate(
        ("Started server process [48113]", "Waiting for application startup.",
         "Application startup complete.")
    ):  # fmt: skip
        log.raw(at(s, 50.3 + 0.05 * k), API, f"INFO:     {line}")


def oom_message() -> str:
    engine = engine_bytes(OOM)
    job = job_bytes(OOM)
    free = TORCH_TOTAL - engine - job
    allocated = WEIGHTS + KV_BYTES + GRAPHS + SLACK - 208 * MIB
    reserved = engine - NON_TORCH
    return (
        f"CUDA out of memory. Tried to allocate {size(REQUESTED)}. GPU 0 has a total capacity of "
        f"{size(TORCH_TOTAL)} of which {size(free)} is free. Process {JOB_PID} has {size(job)} "
        f"memory in use. Including non-PyTorch memory, this process has {size(engine)} memory "
        f"in use. Of the allocated memory {size(allocated)} is allocated by PyTorch, with "
        f"{size(GRAPHS)} allocated in private pools (e.g., CUDA Graphs), and "
        f"{size(reserved - allocated)} is reserved by PyTorch but unallocated. If reserved but "
        "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
        "to avoid fragmentation.  See documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )


def death(log: VllmLog, run: Run, in_flight: list[int]) -> None:
    site = "/opt/vllm/.venv/lib/python3.12/site-packages"
    frames = (
        ("vllm/v1/engine/core.py", 701, "run_engine_core", "engine_core.run_busy_loop()"),
        ("vllm/v1/engine/core.py", 728, "run_busy_loop", "self._process_engine_step()"),
        (
            "vllm/v1/engine/core.py",
            284,
            "step",
            "model_output = self.execute_model_with_error_logging(",
        ),
        ("vllm/v1/worker/gpu_model_runner.py", 1931, "execute_model", "model_output = self.model("),
        (
            "vllm/model_executor/models/llama.py",
            394,
            "forward",
            "hidden_states, residual = layer(positions, hidden_states, residual)",
        ),
        ("vllm/model_executor/models/llama.py", 104, "forward", "x, _ = self.gate_up_proj(x)"),
        (
            "vllm/model_executor/layers/linear.py",
            565,
            "forward",
            "output_parallel = self.quant_method.apply(self, input_, bias)",
        ),
        (
            "vllm/model_executor/layers/utils.py",
            98,
            "default_unquantized_gemm",
            "return torch.nn.functional.linear(x, weight, bias)",
        ),
    )
    tb = "\n".join(f'  File "{site}/{f}", line {n}, in {fn}\n    {c}' for f, n, fn, c in frames)
    log.record(
        OOM + timedelta(milliseconds=6), CORE, "ERROR", "core.py:710",
        f"EngineCore encountered a fatal error.\nTraceback (most recent call last):\n{tb}\n"
        f"torch.OutOfMemoryError: {oom_message()}",
    )  # fmt: skip
    t = OOM + timedelta(milliseconds=28)
    log.record(t, API, "ERROR", "async_llm.py:480", "AsyncLLM output_handler failed.")
    for k, i in enumerate(in_flight):
        log.record(
            t + timedelta(microseconds=350 * (k + 1)), API, "INFO", "async_llm.py:406",
            f"Request {run.specs[i].rid} failed (engine dead).",
        )  # fmt: skip
    log.record(
        OOM + timedelta(milliseconds=790), API, "ERROR", "core_client.py:564",
        "Engine core proc EngineCore_DP0 died unexpectedly, shutting down client.",
    )  # fmt: skip


def gpu_csv(filler: Filler) -> str:
    """The on-call's loop: both queries every two seconds, appended with their headers."""
    utc = ZoneInfo("UTC")
    rows: list[str] = []
    ts = datetime(2025, 5, 6, 10, 13, 58, 204_000, tzinfo=utc)
    end = OOM + timedelta(seconds=20)
    while ts < end:
        dead = ts >= OOM + timedelta(seconds=1.1)
        engine = 0 if dead else engine_bytes(ts)
        job = job_bytes(ts)
        used = tel.mib(engine + job) + 3  # memory.used leaves out what the driver reserves
        rows += [
            "timestamp, index, uuid, memory.used [MiB], memory.total [MiB]",
            f"{tel.smi_stamp(ts, utc)}, 0, {UUID}, {used} MiB, {tel.mib(NVML_TOTAL)} MiB",
            tel.APPS_HEADER,
        ]
        apps = ts + timedelta(milliseconds=41)
        if engine:
            rows.append(tel.app_row(apps, utc, UUID, CORE_PID, "VLLM::EngineCore", tel.mib(engine)))
        if job:
            rows.append(
                tel.app_row(apps, utc, UUID, JOB_PID, "/home/mchen/.venv/bin/python", tel.mib(job))
            )
        ts += timedelta(microseconds=2_000_000 + 120_000 + filler.jitter_us(0, 90_000))
    return "\n".join(rows) + "\n"


def build(out: Path) -> Run:
    filler = Filler(20250506)
    run = Run(workload(filler), settings(), T0)
    log = VllmLog(colour=True)
    startup(log)
    oom_ns = run.ns(OOM)
    in_flight = ve.request_lines(log, run, filler, SERVER, until_ns=oom_ns)
    ve.stats_lines(
        log, run, SERVER, first=at(START, 60.0), last=OOM, gpu_blocks=GPU_BLOCKS,
        where="loggers.py:123",
    )  # fmt: skip
    death(log, run, in_flight)
    out.mkdir(parents=True, exist_ok=True)
    (out / "vllm.log").write_text(log.render(), encoding="utf-8")
    (out / "gpu.csv").write_text(gpu_csv(filler), encoding="utf-8")
    return run
