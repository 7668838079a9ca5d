"""Shapes the round-9 held-out excerpts taught (public threads, named per test), read by the
``pytorch-log`` reader: TGI's limits where its Args line lost its name, was wrapped by a paste or
sits in a JSON log, and its router's warm-up span; an engine's wrapper of an OOM already told
(vLLM's sampler warm-up, Ollama's ``unable to allocate CUDA0 buffer``); a zoned time after a
zone-less prefix on one line; llama.cpp's 2023 start-up lines."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from oomtrace.ingest import IngestOptions, ingest_paths
from oomtrace.trace import Trace
from oomtrace.units import MiB
from tests.factories import file_at

MTIME = datetime(2026, 12, 1, tzinfo=UTC)


def _trace(tmp_path: Path, text: str, newline: str = "\n") -> Trace:
    raw = tmp_path / "raw.log"
    raw.write_bytes(text.replace("\n", newline).encode())
    return ingest_paths([file_at(tmp_path / "server.log", MTIME, copy_of=raw)], IngestOptions())


def _ooms(trace: Trace) -> pl.DataFrame:
    return trace.events.filter(pl.col("kind") == "oom")


# --- TGI's limits -------------------------------------------------------------------------------


def test_the_routers_warmup_span_states_the_prefill_budget(tmp_path: Path) -> None:
    # https://github.com/huggingface/text-generation-inference/issues/1164 (its title)
    trace = _trace(
        tmp_path,
        "ERROR warmup{max_input_length=64 max_prefill_tokens=256}:warmup: text_generation_client:"
        " router/client/src/lib.rs:33: Server error: Not enough memory to handle 256 prefill "
        "tokens. You need to decrease `--max-batch-prefill-tokens`\n",
    )
    assert trace.manifest.engine.get("name") == "tgi"
    assert trace.manifest.engine_config["max_num_batched_tokens"] == 256
    assert trace.events["kind"].to_list() == ["startup_kv_insufficient"]


def test_args_pasted_without_their_name(tmp_path: Path) -> None:
    # https://github.com/huggingface/text-generation-inference/issues/710 (the issue template's
    # System Info holds the bare "{ model_id: ... }")
    trace = _trace(
        tmp_path,
        '{ model_id: "/opt/ml/model", revision: None, validation_workers: 2, sharded: None, '
        "num_shard: Some(8), quantize: None, dtype: None, trust_remote_code: false, "
        "max_concurrent_requests: 128, max_best_of: 2, max_stop_sequences: 4, max_input_length: "
        "3072, max_total_tokens: 4096, waiting_served_ratio: 1.2, max_batch_prefill_tokens: 4096,"
        " max_batch_total_tokens: 16000, max_waiting_tokens: 20, env: false }\n"
        "Not enough memory to handle 16000 total tokens with 2 prefill tokens. You need to "
        "decrease `--max-batch-total-tokens` or `--max-batch-prefill-tokens`\n",
    )
    config = trace.manifest.engine_config
    assert (config["max_num_batched_tokens"], config["max_model_len"]) == (4096, 4096)


def test_args_a_paste_wrapped_are_read_across_the_wrap(tmp_path: Path) -> None:
    # https://github.com/huggingface/text-generation-inference/issues/832: wrapped inside
    # "max_stop_sequences", the limits on the piece under it
    trace = _trace(
        tmp_path,
        "2023-08-22T17:48:37.505854Z  INFO text_generation_launcher: Args { model_id: "
        '"meta-llama/Llama-2-13b-chat-hf", revision: None, validation_workers: 2, sharded: None, '
        "num_shard: Some(4), quantize: None, dtype: None, trust_remote_code: false, "
        "max_concurrent_requests: 128, max_best_of: 2, max_st\n"
        "op_sequences: 4, max_input_length: 4096, max_total_tokens: 8192, waiting_served_ra\n",
    )
    assert trace.manifest.engine_config["max_model_len"] == 8192


def test_the_json_logs_args_give_the_device_share(tmp_path: Path) -> None:
    # https://github.com/huggingface/text-generation-inference/issues/1200 (json_output: true;
    # the line as the thread shows it, cut short)
    trace = _trace(
        tmp_path,
        '{"timestamp":"2023-12-05T22:36:44.127472Z","level":"INFO","fields":{"message":"Args { '
        'model_id: \\"mistralai/Mistral-7B-Instruct-v0.1\\", revision: None, max_input_length: '
        "4096, max_total_tokens: 8192, waiting_served_ratio: 1.2, max_batch_prefill_tokens: 4096,"
        " max_batch_total_tokens: None, cuda_memory_fraction: 0.9, rope_scaling: Some(Linear), "
        'json_output: true, otlp_endpoint: Some(\\"jae\n',
    )
    config = trace.manifest.engine_config
    assert config["gpu_memory_utilization"] == 0.9
    assert config["max_num_batched_tokens"] == 4096


# --- one failure told twice ----------------------------------------------------------------------


def test_vllms_sampler_wrapper_and_the_oom_it_wraps_are_one(tmp_path: Path) -> None:
    # https://github.com/vllm-project/vllm/issues/19445 (re-flowed a sentence a line)
    trace = _trace(
        tmp_path,
        "RuntimeError: CUDA out of memory occurred when warming up sampler with 256 dummy "
        "requests.\n"
        "Please try lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the "
        "engine.\n"
        "\n"
        "torch.OutOfMemoryError: CUDA out of memory.\n"
        "Tried to allocate 252.00 MiB. GPU 0 has a total capacity of 10.57 GiB of which 163.12 "
        "MiB is free.\n"
        "Process 2073789 has 10.41 GiB memory in use.\n",
    )
    assert _ooms(trace).select("device", "requested_bytes").rows() == [(0, 252 * MiB)]


def test_ollamas_unable_to_allocate_is_ggmls_failure_told_again(tmp_path: Path) -> None:
    # https://github.com/ollama/ollama/issues/8964 (Windows Server: CRLF), two code blocks; the
    # pinned host memory's failure is no device OOM
    trace = _trace(
        tmp_path,
        "Error: llama runner process has terminated: error loading model: unable to allocate "
        "CUDA0 buffer\n"
        "\n"
        "ggml_cuda_host_malloc: failed to allocate 335445.83 MiB of pinned memory: out of memory\n"
        "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 28426.68 MiB on device 0: "
        "cudaMalloc failed: out of memory\n",
        newline="\r\n",
    )
    assert trace.manifest.engine.get("name") == "ollama"
    ((device, requested),) = _ooms(trace).select("device", "requested_bytes").rows()
    assert device == 0
    assert abs(requested - 28426.68 * MiB) < MiB


# --- times ---------------------------------------------------------------------------------------


def test_a_zoned_time_after_a_local_prefix_is_the_lines_time(tmp_path: Path) -> None:
    # https://github.com/ollama/ollama/issues/9562: Docker Desktop's local time, then Ollama's own
    # in UTC
    trace = _trace(
        tmp_path,
        '2025-03-06 23:33:40 time=2025-03-07T05:33:40.329Z level=ERROR source=sched.go:456 msg="'
        'error loading llama server" error="llama runner process has terminated: error loading '
        "model: unable to allocate CUDA0 buffer\\nllama_model_load_from_file_impl: failed to load "
        'model"\n',
    )
    assert _ooms(trace)["ts"].to_list() == [datetime(2025, 3, 7, 5, 33, 40, 329000, tzinfo=UTC)]


# --- llama.cpp of 2023 ---------------------------------------------------------------------------


def test_llama_cpp_of_2023_states_its_kv_cache_in_mb_that_are_mib(tmp_path: Path) -> None:
    # https://github.com/ggml-org/llama.cpp/issues/1230 (WSL; the title's failure)
    trace = _trace(
        tmp_path,
        "llama_model_load_internal: n_ctx      = 512\n"
        "llama_model_load_internal: mem required  = 10583.26 MB (+ 1608.00 MB per state)\n"
        "llama_init_from_file: kv self size  =  400.00 MB\n"
        "CUDA error 2 at ggml-cuda.cu:359: out of memory\n",
    )
    assert trace.manifest.engine.get("name") == "llama.cpp"
    assert trace.manifest.engine_config["available_kv_cache_bytes"] == 400 * MiB
    assert trace.manifest.engine_config["kv_cache_tokens"] == 512
    assert _ooms(trace).height == 1
