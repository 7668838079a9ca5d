"""A vLLM V1 server coming up, as its log prints it (0.10 to 0.13: ``api_server.py``, the
engine core's config line, ``gpu_model_runner.py``'s load and graph lines, ``gpu_worker.py``'s KV
memory, ``kv_cache_utils.py``'s size and concurrency; ``docs/formats/vllm.md``), and the lines a
server prints where the samples of issue 13 need them: uvicorn's access lines, the engine core's
death on an OOM."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from tools.sample_incidents.text import Filler, iso_ns
from tools.sample_incidents.vllm_lines import VllmLog, at, kv_cache_lines

GIB = 1 << 30


@dataclass(frozen=True)
class Startup:
    """What one start prints: the version, the two processes, the model and its settings (as
    the ``non-default args`` dict prints them), and the figures the engine states."""

    version: str
    api: str
    core: str
    model: str
    args: str
    max_model_len: int
    weights: int
    kv_bytes: int
    tokens: int
    graphs: int
    utils_lines: tuple[int, int] = (1087, 1091)
    batched_tokens: int = 8192


def v1_startup(log: VllmLog, s: datetime, st: Startup) -> datetime:
    """The start-up lines from ``s``; returns when the API server is up."""
    api, core, model = st.api, st.core, st.model
    log.record(
        at(s, 0.0), api, "INFO", "api_server.py:1839", f"vLLM API server version {st.version}"
    )
    log.record(
        at(s, 0.01), api, "INFO", "utils.py:233",
        f"non-default args: {{'model_tag': '{model}', 'model': '{model}', {st.args}}}",
    )  # fmt: skip
    log.record(at(s, 5.4), api, "INFO", "model.py:547", "Resolved architecture: LlamaForCausalLM")
    log.record(at(s, 5.4), api, "INFO", "model.py:1510", f"Using max model len {st.max_model_len}")
    log.record(
        at(s, 5.5), api, "INFO", "scheduler.py:205",
        f"Chunked prefill is enabled with max_num_batched_tokens={st.batched_tokens}.",
    )  # fmt: skip
    log.record(
        at(s, 11.2), core, "INFO", "core.py:77",
        f"Initializing a V1 LLM engine (v{st.version}) with config: model='{model}', "
        f"speculative_config=None, tokenizer='{model}', skip_tokenizer_init=False, "
        "tokenizer_mode=auto, revision=None, tokenizer_revision=None, trust_remote_code=False, "
        f"dtype=torch.bfloat16, max_seq_len={st.max_model_len}, download_dir=None, "
        "load_format=auto, tensor_parallel_size=1, pipeline_parallel_size=1, "
        "data_parallel_size=1, disable_custom_all_reduce=False, quantization=None, "
        "enforce_eager=False, kv_cache_dtype=auto, device_config=cuda, seed=0, "
        f"served_model_name={model}, enable_prefix_caching=True, enable_chunked_prefill=True",
    )  # fmt: skip
    log.record(
        at(s, 12.9), core, "INFO", "gpu_model_runner.py:2602", f"Starting to load model {model}..."
    )
    log.record(
        at(s, 21.3), core, "INFO", "gpu_model_runner.py:2653",
        f"Model loading took {st.weights / GIB:.4f} GiB and 7.913842 seconds",
    )  # fmt: skip
    kv_cache_lines(
        log, at(s, 31.6), core, kv_bytes=st.kv_bytes, tokens=st.tokens,
        max_model_len=st.max_model_len, utils_lines=st.utils_lines,
    )  # fmt: skip
    log.record(
        at(s, 41.9), core, "INFO", "gpu_model_runner.py:3480",
        f"Graph capturing finished in 10 secs, took {st.graphs / GIB:.2f} GiB",
    )  # fmt: skip
    log.record(
        at(s, 42.1), core, "INFO", "core.py:210",
        "init engine (profile, create kv cache, warmup model) took 20.71 seconds",
    )  # fmt: skip
    log.record(
        at(s, 43.6), api, "INFO", "api_server.py:1634",
        "Starting vLLM API server 0 on http://0.0.0.0:8000",
    )  # fmt: skip
    for k, line in enumerate(
        ("Started server process [1]", "Waiting for application startup.",
         "Application startup complete.")
    ):  # fmt: skip
        log.raw(at(s, 43.7 + 0.05 * k), api, f"INFO:     {line}")
    return at(s, 43.85)


def docker_log(filler: Filler, *, bracket: bool = True) -> VllmLog:
    """A server's log as ``docker logs -t`` shows it, at vLLM's default INFO level (no DEBUG
    records), each line received a fraction of a millisecond after it was written."""
    return VllmLog(
        outer=docker_prefix,
        delay=lambda: timedelta(microseconds=filler.jitter_us(30, 700)),
        debug=False,
        bracket=bracket,
    )


def loading_mib(up: float, loaded_mib: int) -> int | None:
    """``nvidia-smi``'s memory.used while the engine starts ``up`` seconds ago: its CUDA context,
    the weights streaming in, then the weights alone; None once it has taken its budget."""
    if up < 12:
        return 4
    if up < 22:
        return 512 + int((up - 12) / 9.3 * (loaded_mib - 512))
    if up < 32:
        return loaded_mib
    return None


def docker_prefix(received: datetime) -> str:
    """``docker logs -t``: the daemon's RFC 3339 time with nanoseconds, then the line."""
    return iso_ns(received, (received.microsecond * 7919) % 1000) + " "


def access_line(log: VllmLog, ts: datetime, api: str, filler: Filler, status: str) -> None:
    """uvicorn's access line (``INFO:     ip:port - "POST ..." 200 OK``): vLLM prints it for
    every request even without request logging, with no time of its own."""
    log.raw(ts, api, f'INFO:     {filler.client()} - "POST /v1/chat/completions HTTP/1.1" {status}')


def core_death(log: VllmLog, when: datetime, st: Startup, message: str) -> None:
    """The engine core's fatal error for a ``torch.OutOfMemoryError`` in a forward pass, and the
    API server noticing (vLLM 0.11's ``core.py`` and ``core_client.py``)."""
    site = "/usr/local/lib/python3.12/dist-packages/vllm"
    frames = (
        ("v1/engine/core.py", 701, "run_engine_core", "engine_core.run_busy_loop()"),
        ("v1/engine/core.py", 728, "run_busy_loop", "self._process_engine_step()"),
        (
            "v1/engine/core.py",
            754,
            "_process_engine_step",
            "outputs, model_executed = self.step_fn()",
        ),
        ("v1/engine/core.py", 284, "step", "model_output = self.execute_model_with_error_logging("),
        ("v1/worker/gpu_model_runner.py", 2406, "execute_model", "model_output = self.model("),
        (
            "model_executor/models/llama.py",
            104,
            "forward",
            "x, _ = self.gate_up_proj(x)",
        ),
    )
    tb = "\n".join(f'  File "{site}/{f}", line {n}, in {fn}\n    {c}' for f, n, fn, c in frames)
    log.record(
        when + timedelta(milliseconds=5), st.core, "ERROR", "core.py:710",
        f"EngineCore encountered a fatal error.\nTraceback (most recent call last):\n{tb}\n"
        f"torch.OutOfMemoryError: {message}",
    )  # fmt: skip
    log.record(
        when + timedelta(milliseconds=31), st.api, "ERROR", "async_llm.py:480",
        "AsyncLLM output_handler failed.",
    )  # fmt: skip
    log.record(
        when + timedelta(milliseconds=812), st.api, "ERROR", "core_client.py:564",
        "Engine core proc EngineCore_DP0 died unexpectedly, shutting down client.",
    )  # fmt: skip
