"""TensorRT-LLM's own lines (alone, under Triton, under ``trtllm-serve``): the KV pool it
allocated, its refusal of a pool too small for one sequence, and its out-of-memory failures, from
the real logs in ``tests/data/torch`` (sources in its README)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from oomtrace.ingest import IngestOptions, ingest_paths
from oomtrace.trace import Trace
from oomtrace.units import GiB

DATA = Path(__file__).parents[3] / "data" / "torch"


def _trace(path: Path) -> Trace:
    trace = ingest_paths([path], IngestOptions())
    assert trace.manifest.sources[0].parser == "pytorch-log"
    return trace


def _written(tmp_path: Path, text: str) -> Trace:
    path = tmp_path / "server.log"
    path.write_text(text)
    return _trace(path)


def test_a_cuda_allocation_failure_wrapped_mid_word_is_one_oom() -> None:
    # Triton relays the runtime's error inside its own glog line; the terminal wrapped it
    events = _trace(DATA / "trtllm-triton-cudamalloc-wrapped.log").events
    ooms = events.filter(pl.col("kind") == "oom")
    assert ooms.height == 1
    assert ooms["requested_bytes"].to_list() == [None]
    assert "TensorRT-LLM" in ooms["detail"][0]


def test_a_pool_too_small_for_one_sequence_is_a_start_up_refusal() -> None:
    trace = _trace(DATA / "trtllm-triton-kv-refusal.log")
    refusals = trace.events.filter(pl.col("kind") == "startup_kv_insufficient")
    assert refusals.height == 1
    assert "29184" in refusals["detail"][0]
    config = trace.manifest.engine_config
    assert (config["available_kv_cache_bytes"], config["kv_cache_tokens"]) == (956301312, 29184)
    assert trace.events.filter(pl.col("kind") == "oom").height == 0


def test_the_pool_in_gib_and_tokens() -> None:
    config = _trace(DATA / "trtllm-triton-kv-pool.log").manifest.engine_config
    assert config["available_kv_cache_bytes"] == round(78.30 * GiB)
    assert config["kv_cache_tokens"] == 3731744


def test_an_executor_without_room_for_its_kv_cache_is_an_oom_at_kv_cache_init() -> None:
    ooms = _trace(DATA / "trtllm-serve-executor-oom.log").events.filter(pl.col("kind") == "oom")
    assert ooms.height == 1
    row = ooms.row(0, named=True)
    assert (row["total_bytes"], row["free_bytes"]) == (round(140.06 * GiB), round(108.86 * GiB))
    assert row["phase"] == "kv_cache_init"
    assert "KV cache" in row["detail"]
    # trtllm-serve's Python logger stamps its lines "[07/08/2025-19:47:15]" (no zone: UTC unless
    # --tz says otherwise)
    assert row["ts"] == datetime(2025, 7, 8, 19, 47, 15, tzinfo=UTC)


def test_the_estimation_pool_gives_way_to_the_real_one(tmp_path: Path) -> None:
    # the PyTorch backend sizes a small pool for its estimation run, then the real one
    # (TensorRT-LLM#3092); lines written in the format trtllm-serve prints
    trace = _written(
        tmp_path,
        "[TensorRT-LLM][INFO] Number of tokens per block: 32.\n"
        "[TensorRT-LLM][INFO] [MemUsageChange] Allocated 0.56 GiB for max tokens in paged KV "
        "cache (8224).\n"
        "[12/20/2025-04:21:10] [TRT-LLM] [I] max_seq_len=8224, max_num_requests=64, "
        "max_num_tokens=8192, max_batch_size=64\n"
        "[TensorRT-LLM][INFO] [MemUsageChange] Allocated 5.95 GiB for max tokens in paged KV "
        "cache (86720).\n"
        "[12/20/2025-04:21:52] [TRT-LLM] [I] max_seq_len=86720, max_num_requests=64, "
        "max_num_tokens=8192, max_batch_size=64\n"
        "[12/20/2025-04:21:53] [TRT-LLM] [W] insufficient GPU memory for CUDA graphs, capturing "
        "fewer batch sizes\n",
    )
    config = trace.manifest.engine_config
    assert (config["available_kv_cache_bytes"], config["kv_cache_tokens"]) == (
        round(5.95 * GiB),
        86720,
    )
    # the limits as restated once the real pool was sized
    assert (config["max_model_len"], config["max_num_seqs"]) == (86720, 64)
    assert config["max_num_batched_tokens"] == 8192
    notes = " ".join(trace.manifest.sources[0].notes)
    assert "kept the largest" in notes
    # the CUDA-graph warning is no failure
    assert trace.events.filter(pl.col("kind") == "oom").height == 0


def test_the_0_5_runtimes_pool_in_tokens(tmp_path: Path) -> None:
    # https://github.com/NVIDIA/TensorRT-LLM/issues/224 (Triton on an A10, October 2023)
    trace = _written(tmp_path, "[TensorRT-LLM][INFO] Using 10718 tokens in paged KV cache.\n")
    assert trace.manifest.engine_config["kv_cache_tokens"] == 10718
