"""vLLM start-up lines in shapes met in public threads beyond the ones the other tests hold: the
profiler's summary with what it measured, 0.9.0's block count without the engine index, and
start-up figures quoted without their header above a log. Each text is a faithful rewrite of the
thread named beside its test (ids and figures kept, the surrounding output cut)."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from oomtrace.trace import Trace
from tests.unit.ingest.vllm.field_ingest import vllm_trace

GIB = 2**30


def _trace(tmp_path: Path, text: str) -> Trace:
    return vllm_trace(tmp_path, text)


def _config(tmp_path: Path, text: str) -> dict[str, object]:
    return _trace(tmp_path, text).manifest.engine_config


def test_the_debug_profiling_summary_gives_the_weights_and_the_kv_cache_it_left(
    tmp_path: Path,
) -> None:
    # https://github.com/vllm-project/vllm/pull/29830 (VLLM_LOGGING_LEVEL=DEBUG: header file
    # names with their directory, "[v1/worker/gpu_worker.py:484]")
    config = _config(
        tmp_path,
        "(EngineCore_DP0 pid=3413554) DEBUG 12-01 19:49:03 [v1/worker/gpu_worker.py:484] Free "
        "memory on device (43.91/44.4 GiB) on startup. Desired GPU memory utilization is (0.9, "
        "39.96 GiB). Actual usage is 13.72 GiB for weight, 1.83 GiB for peak activation, 0.04 "
        "GiB for non-torch memory, and 0.0 GiB for CUDAGraph memory. Replace "
        "gpu_memory_utilization config with `--kv-cache-memory=26017729126` (24.23 GiB) to fit "
        "into requested memory, or `--kv-cache-memory=30260962304` (28.18 GiB) to fully utilize "
        "gpu memory. Current kv cache memory in use is 24.38 GiB.\n"
        "(EngineCore_DP0 pid=3413554) INFO 12-01 19:49:03 [v1/engine/core.py:254] init engine "
        "(profile, create kv cache, warmup model) took 1.34 seconds\n",
    )
    assert config["profiled_weights_bytes"] == round(13.72 * GIB)
    assert config["activation_peak_bytes"] == round(1.83 * GIB)
    assert config["non_torch_bytes"] == round(0.04 * GIB)
    assert config["available_kv_cache_bytes"] == round(24.38 * GIB)
    assert config["initial_free_bytes"] == round(43.91 * GIB)
    assert config["gpu_memory_utilization"] == 0.9


def test_the_later_summary_that_adds_weights_to_non_torch_memory_gives_the_rest(
    tmp_path: Path,
) -> None:
    # https://github.com/vllm-project/vllm/pull/57047 (the summary at INFO; the KV size and the
    # maximum concurrency on one record)
    config = _config(
        tmp_path,
        "(EngineCore pid=23853) INFO 09-16 13:51:44 [kv_cache_utils.py:2324] GPU KV cache size: "
        "268,560 tokens, Maximum concurrency for 2,048 tokens per request: 131.13x\n"
        "(EngineCore pid=23853) \n"
        "(EngineCore pid=23853) INFO 09-16 13:51:51 [gpu_worker.py:876] Free memory on device "
        "(46.99/47.37 GiB) on startup. Desired GPU memory utilization is (0.85, 40.27 GiB). "
        "Actual usage is 2.81 GiB for consumed memory (weights + non-torch), 0.57 GiB for peak "
        "activation, and 0.22 GiB for CUDAGraph memory. Current kv cache memory in use is "
        "36.88 GiB.\n",
    )
    assert config["activation_peak_bytes"] == round(0.57 * GIB)
    assert config["available_kv_cache_bytes"] == round(36.88 * GIB)
    assert "profiled_weights_bytes" not in config  # the sum names no weights of their own
    assert (config["kv_cache_tokens"], config["max_concurrency"]) == (268560, 131.13)


def test_the_0_9_0_block_count_without_an_engine_index_is_read(tmp_path: Path) -> None:
    # https://github.com/vllm-project/vllm/issues/18916 (vLLM 0.9.0 in Docker, a viewer's
    # "date time.ms | " before each line)
    config = _config(
        tmp_path,
        "2025-05-30 09:53:49.010 | INFO 05-30 07:53:49 [kv_cache_utils.py:637] GPU KV cache "
        "size: 235,136 tokens\n"
        "2025-05-30 09:53:59.144 | INFO 05-30 07:53:59 [loggers.py:134] vllm cache_config_info "
        "with initialization after num_gpu_blocks is: 14696\n",
    )
    assert config["num_gpu_blocks"] == 14696
    assert config["kv_cache_tokens"] == 235136


def test_start_up_figures_quoted_above_the_log_without_their_header_are_kept(
    tmp_path: Path,
) -> None:
    # https://myoceane.fr/index.php/ai-vllm-a100-gemma-4/ (vLLM 0.19: a blog quotes the two
    # figures it cares about, then the log from its banner on)
    config = _config(
        tmp_path,
        "The log tells a few things:\n"
        "Model loading took 13.72 GiB memory and 62.336108 seconds\n"
        "Available KV cache memory: 36.56 GiB\n"
        "(APIServer pid=6539) INFO 04-18 20:22:57 [utils.py:233] non-default args: {'model_tag': "
        "'openai/gpt-oss-20b', 'port': 10000, 'model': 'openai/gpt-oss-20b', "
        "'trust_remote_code': True, 'max_model_len': 131072, 'gpu_memory_utilization': 0.65}\n",
    )
    assert config["model_weights_bytes"] == round(13.72 * GIB)
    assert config["model_load_seconds"] == 62.336108
    assert config["available_kv_cache_bytes"] == round(36.56 * GIB)
    assert config["max_model_len"] == 131072


def test_the_v0_front_ends_engine_dead_error_is_the_engines_death(tmp_path: Path) -> None:
    # https://github.com/vllm-project/vllm/issues/15039 (0.8 V0 with LoRA: every request after
    # the engine loop stopped is told MQEngineDeadError, the OOM that stopped it as a repr)
    trace = _trace(
        tmp_path,
        "ERROR 03-19 10:55:18 [serving_chat.py:677] vllm.engine.multiprocessing.MQEngineDeadError"
        ": Engine loop is not running. Inspect the stacktrace to find the original error: "
        "OutOfMemoryError('CUDA out of memory. Tried to allocate 128.00 MiB. GPU 0 has a total "
        "capacity of 79.33 GiB of which 16.00 MiB is free. Process 36891 has 79.29 GiB memory in "
        "use. Of the allocated memory 69.59 GiB is allocated by PyTorch, with 46.00 MiB allocated "
        "in private pools (e.g., CUDA Graphs), and 118.89 MiB is reserved by PyTorch but "
        "unallocated.').\n",
    )
    kinds = trace.events.get_column("kind").to_list()
    assert "engine_dead" in kinds
    assert "oom" in kinds


def test_an_error_quoted_above_the_log_is_kept_at_the_logs_first_time(tmp_path: Path) -> None:
    # An OOM quoted at the top of a report, then the log it came from (the arrangement of SGLang
    # issue 10408; the OOM's text as https://github.com/vllm-project/vllm/issues/26863 quotes it,
    # the stats line as vLLM 0.11 prints it). Before, nothing placed the OOM and it was dropped.
    trace = _trace(
        tmp_path,
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 232.00 MiB. GPU 0 has a "
        "total capacity of 23.57 GiB of which 154.25 MiB is free. Including non-PyTorch memory, "
        "this process has 23.40 GiB memory in use. Of the allocated memory 22.88 GiB is "
        "allocated by PyTorch, and 188.29 MiB is reserved by PyTorch but unallocated.\n"
        "The log:\n"
        "(APIServer pid=1) INFO 10-15 09:12:40 [loggers.py:207] Engine 000: Avg prompt "
        "throughput: 0.0 tokens/s, Avg generation throughput: 31.2 tokens/s, Running: 1 reqs, "
        "Waiting: 0 reqs, GPU KV cache usage: 97.1%, Prefix cache hit rate: 0.0%\n",
    )
    (oom,) = trace.events.filter(pl.col("kind") == "oom").to_dicts()
    assert oom["requested_bytes"] == 232 * 2**20
    assert oom["ts"] == trace.samples.get_column("ts").min()
    notes = " ".join(trace.manifest.sources[0].notes)
    assert "came above the first one the log places in time" in notes
