"""Incident 2: vLLM 0.11 (V1) on one L40S, Qwen2.5-7B-Instruct, ``--gpu-memory-utilization
0.95``: a document-scoring request with a 14,210-token prompt and ``prompt_logprobs=5`` needs
the logits of a whole 8,192-token prefill chunk in float32 (4.64 GiB) while the KV pool is 7 %
full; the allocation fails and the engine dies.

The team had deployed the collector after two unexplained crashes, so what they have is its
capture (``capture/``): the node agent (NVML every 20 ms, ``/metrics`` every second, the vLLM log
followed and redacted) and the PyTorch hook inside the engine core process (allocator every
100 ms, the OOM observer). The server ran in a container: vLLM's own pids (``pid=1``, ``pid=391``)
are the container's, NVML's are the host's.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from oomtrace.replay import ReplaySettings
from tools.sample_incidents import vllm_engine as ve
from tools.sample_incidents.sim import Run, Spec
from tools.sample_incidents.text import Filler
from tools.sample_incidents.vllm_lines import VllmLog, at, kv_cache_lines, sampling_params

NAME = "vllm-prefill-oom"
MODEL = "Qwen/Qwen2.5-7B-Instruct"
NODE = "gpu-node-12"
GIB, MIB = 1 << 30, 1 << 20
AGENT_START = datetime(2025, 3, 21, 16, 38, 1, 250_000, tzinfo=UTC)
START = datetime(2025, 3, 21, 16, 38, 2, 811_000, tzinfo=UTC)
T0 = datetime(2025, 3, 21, 16, 39, 10, tzinfo=UTC)
AGENT_STOP = datetime(2025, 3, 21, 16, 47, 31, 604_000, tzinfo=UTC)
API, CORE = "APIServer pid=1", "EngineCore_DP0 pid=391"
ENGINE_HOST_PID, ENGINE_PID, AGENT_PID = 2_914_467, 391, 7
NVML_TOTAL = 46_068 * MIB  # NVIDIA L40S as NVML sees it
TORCH_TOTAL = 45_456 * MIB  # cudaMemGetInfo: 44.39 GiB
BLOCK, BLOCK_BYTES = 16, 917_504  # 28 layers x 4 KV heads x 128 x 2 (K, V) x 2 bytes x 16
WEIGHTS = 15_299_533_824  # "Model loading took 14.2487 GiB"
KV_BYTES = 27_742_634_393  # "Available KV cache memory: 25.84 GiB"
GPU_BLOCKS = KV_BYTES // BLOCK_BYTES
GRAPHS = 476 * MIB
NON_TORCH = 640 * MIB  # CUDA context, cuBLAS workspaces
SLACK = 1_566 * MIB  # activation blocks the allocator keeps cached after profiling
CHUNK = 8_192
LOGITS_BF16 = CHUNK * 152_064 * 2
LOGITS_FP32 = CHUNK * 152_064 * 4
CULPRIT_ARRIVAL_S = 256.518  # 16:43:26.518
OOM_AFTER_S = 0.624  # the first chunk's forward, then the logits


def workload(filler: Filler) -> list[Spec]:
    specs: list[Spec] = []
    t = 0.4
    while t < 262:
        prompt = int(min(7_000, max(600, math.exp(filler.uniform(7.2, 8.7)))))
        output = int(min(700, max(12, math.exp(filler.uniform(4.6, 6.4)))))
        specs.append(
            Spec(
                rid="cmpl-" + filler.hex_id() + "-0",
                arrival_s=round(t, 3),
                prompt=prompt,
                output=output,
                max_tokens=1024,
                prefill_s=0.02 + prompt / 9_000,
                decode_s=filler.uniform(0.021, 0.026),
            )
        )
        t += -1.3 * math.log(1.0 - filler.uniform(0.0, 0.999))
    specs.append(
        Spec(
            rid="cmpl-" + filler.hex_id() + "-0",
            arrival_s=CULPRIT_ARRIVAL_S,
            prompt=14_210,
            output=1,
            max_tokens=1,
            prefill_s=1.9,
            decode_s=0.024,
        )
    )
    return sorted(specs, key=lambda s: s.arrival_s)


SERVER = ve.Server(version=(0, 11), api=API, prompt_text=True, temperature=0.2)


def settings() -> ReplaySettings:
    return ReplaySettings(
        kv_blocks=GPU_BLOCKS - 1, block_size=BLOCK, max_num_seqs=256, max_num_batched_tokens=CHUNK
    )


class Memory:
    """The engine process's GPU memory over time (bytes), the truth every collector reads."""

    def __init__(self, oom_ns: int, start_ns: int) -> None:
        self.oom_ns, self.start_ns = oom_ns, start_ns
        self.exit_ns = oom_ns + 780_000_000

    def stage(self, now_ns: int) -> tuple[int, int, int] | None:
        """(allocated, reserved, non-torch) of the engine process, None when it does not exist."""
        s = (now_ns - self.start_ns) / 1e9
        if s < 11.4 or now_ns >= self.exit_ns:
            return None
        if s < 12.0:
            return 0, 0, NON_TORCH
        if s < 18.9:  # weights stream in
            loaded = round(WEIGHTS * (s - 12.0) / 6.9) // MIB * MIB
            return loaded, loaded + 2 * MIB, NON_TORCH
        if s < 26.6:  # profiling run: activations of a full 8,192-token batch
            return WEIGHTS + 1_420 * MIB, WEIGHTS + SLACK, NON_TORCH
        if s < 27.1:
            return WEIGHTS, WEIGHTS + SLACK, NON_TORCH
        if s < 38.3:  # KV cache, then CUDA graphs
            graphs = GRAPHS if s >= 31.0 else 0
            base = WEIGHTS + KV_BYTES + graphs
            return base, base + SLACK, NON_TORCH
        base = WEIGHTS + KV_BYTES + GRAPHS
        if now_ns < self.oom_ns - 40_000_000:
            # activations come and go between polls: what a sampler sees at rest
            wobble = ((now_ns // 500_000_000) * 2_654_435_761 % 97) * MIB
            return base + 56 * MIB + wobble, base + SLACK, NON_TORCH
        return self.at_oom()

    def at_oom(self) -> tuple[int, int, int]:
        """Just after the bf16 logits were allocated (the allocator released its cached blocks to
        make room): the float32 copy is the allocation that fails."""
        hidden = CHUNK * 3_584 * 2
        allocated = WEIGHTS + KV_BYTES + GRAPHS + hidden + LOGITS_BF16
        return allocated, allocated + 62 * MIB, NON_TORCH

    def process_bytes(self, now_ns: int) -> int:
        stage = self.stage(now_ns)
        return 0 if stage is None else stage[1] + stage[2]

    def free_at_oom(self) -> int:
        _, reserved, non_torch = self.at_oom()
        return TORCH_TOTAL - reserved - non_torch


def startup(log: VllmLog) -> None:
    s = START
    log.record(at(s, 0.0), API, "INFO", "api_server.py:1839", "vLLM API server version 0.11.0")
    log.record(
        at(s, 0.01), API, "INFO", "utils.py:233",
        f"non-default args: {{'model_tag': '{MODEL}', 'host': '0.0.0.0', 'model': '{MODEL}', "
        "'max_model_len': 32768, 'gpu_memory_utilization': 0.95, 'enable_prefix_caching': "
        "False, 'enable_log_requests': True, 'enable_log_outputs': True}",
    )  # fmt: skip
    log.record(at(s, 5.2), API, "INFO", "model.py:547", "Resolved architecture: Qwen2ForCausalLM")
    log.record(at(s, 5.2), API, "INFO", "model.py:1510", "Using max model len 32768")
    log.record(
        at(s, 5.3), API, "INFO", "scheduler.py:205",
        f"Chunked prefill is enabled with max_num_batched_tokens={CHUNK}.",
    )  # fmt: skip
    log.record(
        at(s, 11.2), CORE, "INFO", "core.py:644", "Waiting for init message from front-end."
    )  # fmt: skip
    log.record(
        at(s, 11.3), CORE, "INFO", "core.py:77",
        f"Initializing a V1 LLM engine (v0.11.0) with config: model='{MODEL}', "
        f"speculative_config=None, tokenizer='{MODEL}', skip_tokenizer_init=False, "
        "tokenizer_mode=auto, revision=None, tokenizer_revision=None, trust_remote_code=False, "
        "dtype=torch.bfloat16, max_seq_len=32768, download_dir=None, load_format=auto, "
        "tensor_parallel_size=1, pipeline_parallel_size=1, data_parallel_size=1, "
        "disable_custom_all_reduce=False, quantization=None, enforce_eager=False, "
        "kv_cache_dtype=auto, device_config=cuda, seed=0, "
        f"served_model_name={MODEL}, enable_prefix_caching=False, chunked_prefill_enabled=True",
    )  # fmt: skip
    log.record(
        at(s, 12.1), CORE, "INFO", "gpu_model_runner.py:2602",
        f"Starting to load model {MODEL}...",
    )  # fmt: skip
    log.record(
        at(s, 18.9), CORE, "INFO", "gpu_model_runner.py:2634",
        f"Model loading took {WEIGHTS / GIB:.4f} GiB and 6.812093 seconds",
    )  # fmt: skip
    kv_cache_lines(
        log, at(s, 26.7), CORE, kv_bytes=KV_BYTES, tokens=GPU_BLOCKS * BLOCK,
        max_model_len=32_768, utils_lines=(1087, 1091),
    )  # fmt: skip
    log.record(
        at(s, 38.2), CORE, "INFO", "gpu_model_runner.py:3480",
        f"Graph capturing finished in 11 secs, took {GRAPHS / GIB:.2f} GiB",
    )  # fmt: skip
    log.record(
        at(s, 38.3), CORE, "INFO", "core.py:210",
        "init engine (profile, create kv cache, warmup model) took 26.94 seconds",
    )  # fmt: skip
    log.record(
        at(s, 40.9), API, "INFO", "api_server.py:1884",
        "Starting vLLM API server 0 on http://0.0.0.0:8000",
    )  # fmt: skip
    log.raw(at(s, 41.0), API, "INFO:     Started server process [1]")
    log.raw(at(s, 41.0), API, "INFO:     Waiting for application startup.")
    log.raw(at(s, 41.1), API, "INFO:     Application startup complete.")


def oom_text(run: Run) -> str:
    allocated, reserved, non_torch = Memory(0, 0).at_oom()
    free = TORCH_TOTAL - reserved - non_torch
    return (
        f"CUDA out of memory. Tried to allocate {size(LOGITS_FP32)}. GPU 0 has a total capacity "
        f"of {size(TORCH_TOTAL)} of which {size(free)} is free. Process {ENGINE_HOST_PID} has "
        f"{size(reserved + non_torch)} memory in use. Of the allocated memory {size(allocated)} "
        f"is allocated by PyTorch, with {size(GRAPHS)} allocated in private pools (e.g., CUDA "
        f"Graphs), and {size(reserved - allocated)} is reserved by PyTorch but unallocated. If "
        "reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF="
        "expandable_segments:True to avoid fragmentation.  See documentation for Memory "
        "Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )


def size(value: int) -> str:
    """PyTorch's ``format_size``."""
    if value <= 1024:
        return f"{value} bytes"
    if value <= MIB:
        return f"{value / 1024:.2f} KiB"
    if value <= GIB:
        return f"{value / MIB:.2f} MiB"
    return f"{value / GIB:.2f} GiB"


SITE = "/usr/local/lib/python3.12/dist-packages"
TRACEBACK = (
    ("vllm/v1/engine/core.py", 701, "run_engine_core", "engine_core.run_busy_loop()"),
    ("vllm/v1/engine/core.py", 728, "run_busy_loop", "self._process_engine_step()"),
    ("vllm/v1/engine/core.py", 754, "_process_engine_step",
     "outputs, model_executed = self.step_fn()"),
    ("vllm/v1/engine/core.py", 284, "step",
     "model_output = self.execute_model_with_error_logging("),
    ("vllm/v1/engine/core.py", 270, "execute_model_with_error_logging", "raise err"),
    ("vllm/v1/engine/core.py", 261, "execute_model_with_error_logging",
     "return model_fn(scheduler_output)"),
    ("vllm/v1/executor/abstract.py", 103, "execute_model",
     'output = self.collective_rpc("execute_model",'),
    ("vllm/v1/worker/gpu_worker.py", 447, "execute_model",
     "output = self.model_runner.execute_model(scheduler_output,"),
    ("vllm/v1/worker/gpu_model_runner.py", 2283, "execute_model",
     "prompt_logprobs_dict = self._get_prompt_logprobs_dict("),
    ("vllm/v1/worker/gpu_model_runner.py", 2841, "_get_prompt_logprobs_dict",
     "logprobs = self.sampler.compute_logprobs(logits)"),
    ("vllm/v1/sample/sampler.py", 113, "compute_logprobs",
     "return logits.log_softmax(dim=-1, dtype=torch.float32)"),
)  # fmt: skip


def death(log: VllmLog, run: Run, culprit: int, in_flight: list[int], oom_ns: int) -> None:
    oom = run.at(oom_ns)
    spec = run.specs[culprit]
    others = [run.specs[i].rid for i in in_flight if i != culprit]
    log.record(
        oom + timedelta(milliseconds=3), CORE, "ERROR", "dump_input.py:69",
        f"Dumping input data for V1 LLM engine (v0.11.0) with config: model='{MODEL}', "
        "tensor_parallel_size=1, max_seq_len=32768, enable_prefix_caching=False, ",
    )  # fmt: skip
    params = sampling_params(max_tokens=1, temperature=0.0, prompt_logprobs=5, version=(0, 11))
    log.record(
        oom + timedelta(milliseconds=4), CORE, "ERROR", "dump_input.py:76",
        "Dumping scheduler output for model execution: SchedulerOutput(scheduled_new_reqs="
        f"[NewRequestData(req_id={spec.rid},prompt_token_ids_len={spec.prompt},"
        f"mm_features=[],sampling_params={params},"
        f"num_computed_tokens=0,lora_request=None)], scheduled_cached_reqs=CachedRequestData("
        f"req_ids={others!r}, resumed_from_preemption=[...]), num_scheduled_tokens="
        f"{{{spec.rid}: {CHUNK}, ...}}, total_num_scheduled_tokens={CHUNK + len(others)}, "
        "scheduled_spec_decode_tokens={}, scheduled_encoder_inputs={}, "
        "num_common_prefix_blocks=[0], finished_req_ids=[], free_encoder_mm_hashes=[], "
        "structured_output_request_ids={}, grammar_bitmask=null, kv_connector_metadata=null)",
    )  # fmt: skip
    frames = "\n".join(
        f'  File "{SITE}/{path}", line {line}, in {fn}\n    {code}'
        for path, line, fn, code in TRACEBACK
    )
    log.record(
        oom + timedelta(milliseconds=9), CORE, "ERROR", "core.py:710",
        "EngineCore encountered a fatal error.\nTraceback (most recent call last):\n"
        f"{frames}\ntorch.OutOfMemoryError: {oom_text(run)}",
    )  # fmt: skip
    t = oom + timedelta(milliseconds=31)
    log.record(
        t, API, "ERROR", "async_llm.py:480",
        "AsyncLLM output_handler failed.\nTraceback (most recent call last):\n"
        '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/async_llm.py", line 439,'
        " in output_handler\n    outputs = await engine_core.get_output_async()\n"
        '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core_client.py", line '
        "846, in get_output_async\n    raise self._format_exception(outputs) from None\n"
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack "
        "trace (above) for the root cause.",
    )  # fmt: skip
    for k, i in enumerate(in_flight):
        rid = run.specs[i].rid
        log.record(
            t + timedelta(microseconds=400 * (k + 1)), API, "INFO", "async_llm.py:406",
            f"Request {rid} failed (engine dead).",
        )  # fmt: skip
        log.raw(
            t + timedelta(microseconds=400 * (k + 1) + 150), API,
            f'INFO:     10.2.{17 + k % 5}.{40 + k}:{41_000 + 37 * k} - "POST /v1/completions '
            'HTTP/1.1" 500 Internal Server Error',
        )  # fmt: skip
    end = oom + timedelta(milliseconds=820)
    log.record(
        end, API, "ERROR", "core_client.py:564",
        "Engine core proc EngineCore_DP0 died unexpectedly, shutting down client.",
    )  # fmt: skip
    for k, line in enumerate(
        ("Shutting down", "Waiting for application shutdown.", "Application shutdown complete.",
         "Finished server process [1]")
    ):  # fmt: skip
        log.raw(end + timedelta(milliseconds=60 + 20 * k), API, f"INFO:     {line}")
