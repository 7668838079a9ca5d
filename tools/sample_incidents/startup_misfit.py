"""Incident 3: vLLM 0.10.2 on one NVIDIA L4 with Llama-3.1-8B-Instruct and no
``--max-model-len``: the model's 131,072-token context needs 16 GiB of KV cache for one request,
the 24 GB card leaves 3.42 GiB after the weights, and the engine refuses to start; systemd
restarts it three times.

What the team had: ``vllm-journal.log`` (``journalctl -u vllm -a``: journald's short prefix,
year-less, then vLLM's colour-coded process prefixes, kept by ``-a``), ``gpu.csv``
(``nvidia-smi --query-gpu=... --format=csv -l 1``, started by the on-call during the restarts)
and the model's ``config.json``.
"""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

from tools.sample_incidents import telemetry as tel
from tools.sample_incidents.text import Filler
from tools.sample_incidents.vllm_lines import VllmLog, at, journald_prefix

NAME = "vllm-startup-misfit"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
HOST, UNIT = "inference-03", "vllm"
GIB, MIB = 1 << 30, 1 << 20
FIRST_START = datetime(2025, 4, 2, 9, 12, 3, 118_000, tzinfo=UTC)
TOTAL_MIB = 23_034  # NVIDIA L4 as nvidia-smi sees it
WEIGHTS = 16_093_911_040  # "Model loading took 14.9889 GiB"
KV_BYTES = 3_672_287_068  # "Available KV cache memory: 3.42 GiB"
KV_PER_TOKEN = 131_072  # 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes
MAX_MODEL_LEN = 131_072
ATTEMPTS = 3
RESTART_S = 10.0
CONFIG = Path(__file__).resolve().parents[2] / "sample_logs" / "models" / "llama-3.1-8b"


def estimated_max_len() -> int:
    """vLLM's estimate: the longest length (a multiple of the block size) whose KV fits."""
    return KV_BYTES // KV_PER_TOKEN // 16 * 16


def attempt(log: VllmLog, start: datetime, main_pid: int) -> datetime:
    """One start of the unit, from systemd's start to its failure; returns when it exited."""
    api, core = f"APIServer pid={main_pid}", f"EngineCore_DP0 pid={main_pid + 157}"
    s = start
    log.record(at(s, 6.3), None, "INFO", "__init__.py:216", "Automatically detected platform cuda.")
    log.record(at(s, 9.1), api, "INFO", "api_server.py:1896", "vLLM API server version 0.10.2")
    log.record(
        at(s, 9.1), api, "INFO", "utils.py:328",
        f"non-default args: {{'model_tag': '{MODEL}', 'model': '{MODEL}', "
        "'gpu_memory_utilization': 0.9}",
    )  # fmt: skip
    log.record(
        at(s, 15.8), api, "INFO", "__init__.py:742", "Resolved architecture: LlamaForCausalLM"
    )
    log.record(at(s, 15.8), api, "INFO", "__init__.py:1815", f"Using max model len {MAX_MODEL_LEN}")
    log.record(
        at(s, 16.0), api, "INFO", "scheduler.py:222",
        "Chunked prefill is enabled with max_num_batched_tokens=2048.",
    )  # fmt: skip
    log.record(at(s, 22.4), core, "INFO", "core.py:654", "Waiting for init message from front-end.")
    log.record(
        at(s, 22.5), core, "INFO", "core.py:76",
        f"Initializing a V1 LLM engine (v0.10.2) with config: model='{MODEL}', "
        f"speculative_config=None, tokenizer='{MODEL}', skip_tokenizer_init=False, "
        "tokenizer_mode=auto, revision=None, tokenizer_revision=None, trust_remote_code=False, "
        f"dtype=torch.bfloat16, max_seq_len={MAX_MODEL_LEN}, download_dir=None, "
        "load_format=auto, tensor_parallel_size=1, pipeline_parallel_size=1, "
        "data_parallel_size=1, disable_custom_all_reduce=False, quantization=None, "
        "enforce_eager=False, kv_cache_dtype=auto, device_config=cuda, seed=0, "
        f"served_model_name={MODEL}, enable_prefix_caching=True, chunked_prefill_enabled=True",
    )  # fmt: skip
    log.record(
        at(s, 23.9), core, "INFO", "parallel_state.py:1165",
        "rank 0 in world size 1 is assigned as DP rank 0, PP rank 0, TP rank 0, EP rank 0",
    )  # fmt: skip
    log.record(
        at(s, 24.2), core, "INFO", "gpu_model_runner.py:2338",
        f"Starting to load model {MODEL}...",
    )  # fmt: skip
    log.record(
        at(s, 34.1), core, "INFO", "default_loader.py:268", "Loading weights took 9.71 seconds"
    )
    log.record(
        at(s, 34.6), core, "INFO", "gpu_model_runner.py:2392",
        f"Model loading took {WEIGHTS / GIB:.4f} GiB and 10.402358 seconds",
    )  # fmt: skip
    log.record(
        at(s, 42.3), core, "INFO", "monitor.py:34", "torch.compile takes 6.71 s in total"
    )  # fmt: skip
    log.record(
        at(s, 45.9), core, "INFO", "gpu_worker.py:298",
        f"Available KV cache memory: {KV_BYTES / GIB:.2f} GiB",
    )  # fmt: skip
    needed = MAX_MODEL_LEN * KV_PER_TOKEN
    refusal = (
        f"To serve at least one request with the models's max seq len ({MAX_MODEL_LEN}), "
        f"({needed / GIB:.2f} GiB KV cache is needed, which is larger than the available KV "
        f"cache memory ({KV_BYTES / GIB:.2f} GiB). Based on the available memory, the estimated "
        f"maximum model length is {estimated_max_len()}. Try increasing "
        "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
    )
    site = "/opt/vllm/lib/python3.12/site-packages/vllm"
    frames = (
        (
            "v1/engine/core.py",
            709,
            "run_engine_core",
            "engine_core = EngineCoreProc(*args, **kwargs)",
        ),
        (
            "v1/engine/core.py",
            505,
            "__init__",
            "super().__init__(vllm_config, executor_class, log_stats,",
        ),
        ("v1/engine/core.py", 91, "__init__", "self._initialize_kv_caches(vllm_config)"),
        (
            "v1/engine/core.py",
            192,
            "_initialize_kv_caches",
            "get_kv_cache_config(vllm_config, kv_cache_spec_one_worker,",
        ),
        (
            "v1/core/kv_cache_utils.py",
            1110,
            "get_kv_cache_config",
            "check_enough_kv_cache_memory(vllm_config, kv_cache_spec, available_memory)",
        ),
        ("v1/core/kv_cache_utils.py", 699, "check_enough_kv_cache_memory", "raise ValueError("),
    )
    trace = "\n".join(
        f'  File "{site}/{f}", line {n}, in {fn}\n    {code}' for f, n, fn, code in frames
    )
    log.record(
        at(s, 45.9), core, "ERROR", "core.py:718",
        f"EngineCore failed to start.\nTraceback (most recent call last):\n{trace}\n"
        f"ValueError: {refusal}",
    )  # fmt: skip
    log.raw(
        at(s, 46.0), core,
        "Process EngineCore_DP0:\nTraceback (most recent call last):\n"
        '  File "/usr/lib/python3.12/multiprocessing/process.py", line 314, in _bootstrap\n'
        "    self.run()\n"
        '  File "/usr/lib/python3.12/multiprocessing/process.py", line 108, in run\n'
        "    self._target(*self._args, **self._kwargs)\n"
        f'  File "{site}/v1/engine/core.py", line 722, in run_engine_core\n    raise e\n'
        f"ValueError: {refusal}",
    )  # fmt: skip
    api_frames = (
        ("/opt/vllm/bin/vllm", 8, "<module>", "sys.exit(main())"),
        (f"{site}/entrypoints/cli/main.py", 54, "main", "args.dispatch_function(args)"),
        (f"{site}/entrypoints/cli/serve.py", 57, "cmd", "uvloop.run(run_server(args))"),
        (
            f"{site}/v1/engine/utils.py",
            783,
            "wait_for_engine_startup",
            'raise RuntimeError("Engine core initialization failed. "',
        ),
    )
    tb = "\n".join(f'  File "{f}", line {n}, in {fn}\n    {code}' for f, n, fn, code in api_frames)
    log.raw(
        at(s, 47.2), api,
        f"Traceback (most recent call last):\n{tb}\nRuntimeError: Engine core initialization "
        "failed. See root cause above. Failed core proc(s): {}",
    )  # fmt: skip
    return at(s, 48.4)


def gpu_csv(starts: list[datetime], filler: Filler) -> str:
    """One row a second while the on-call watched the restarts."""
    utc = ZoneInfo("UTC")
    rows = [tel.GPU_HEADER]
    ts = starts[1] - timedelta(seconds=3.4)
    end = starts[-1] + timedelta(seconds=62)

    def used(now: datetime) -> int:
        for start in starts:
            s = (now - start).total_seconds()
            if 22.6 <= s < 47.6:
                if s < 24.2:
                    return 416
                if s < 34.6:
                    return 416 + int((s - 24.2) / 10.4 * (WEIGHTS // MIB))
                if s < 45.9:
                    return 416 + WEIGHTS // MIB + 1_480
                return 416 + WEIGHTS // MIB + 1_480 + KV_BYTES // MIB // 3
        return 0

    while ts < end:
        rows.append(tel.gpu_row(ts, utc, 0, used(ts), TOTAL_MIB))
        ts += timedelta(microseconds=1_000_000 + filler.jitter_us(300, 1_900))
    return "\n".join(rows) + "\n"


def build(out: Path) -> None:
    filler = Filler(20250402)
    utc = ZoneInfo("UTC")
    starts: list[datetime] = []
    start, pid = FIRST_START, 2_211
    lines: list[tuple[datetime, str]] = []
    for k in range(ATTEMPTS):
        starts.append(start)
        attempt_log = VllmLog(colour=True, outer=journald_prefix(HOST, UNIT, pid, utc))
        exited = attempt(attempt_log, start, pid)
        lines += [(start, f"{_systemd(start)}Started vllm.service - vLLM OpenAI server.")]
        lines += [(start, line) for line in attempt_log.render().splitlines()]
        lines += [
            (exited, (f"{_systemd(exited)}vllm.service: Main process exited, code=exited, "
                      "status=1/FAILURE")),
            (exited, f"{_systemd(exited)}vllm.service: Failed with result 'exit-code'."),
            (exited, f"{_systemd(exited)}vllm.service: Consumed 58.214s CPU time."),
        ]  # fmt: skip
        start = exited + timedelta(seconds=RESTART_S)
        if k + 1 < ATTEMPTS:
            lines.append(
                (start, (f"{_systemd(start)}vllm.service: Scheduled restart job, restart "
                         f"counter is at {k + 1}."))
            )  # fmt: skip
        pid += 1_877
    out.mkdir(parents=True, exist_ok=True)
    (out / "vllm-journal.log").write_text(
        "\n".join(line for _, line in lines) + "\n", encoding="utf-8"
    )
    (out / "gpu.csv").write_text(gpu_csv(starts, filler), encoding="utf-8")
    shutil.copyfile(CONFIG / "config.json", out / "config.json")


def _systemd(ts: datetime) -> str:
    local = ts.astimezone(UTC)
    return f"{local:%b} {local.day:2d} {local:%H:%M:%S} {HOST} systemd[1]: "
