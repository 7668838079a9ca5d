"""vLLM lines as people posted them in 2025-2026 threads, in shapes the other tests do not hold:
a header whose date and time the poster replaced by "...", a level padded to a width, the 0.21+
record that restates ``--gpu-memory-utilization`` once CUDA graphs are profiled, vllm-ascend's
profiling summary, and a PyTorch OOM quoted a sentence a line above vLLM's engine-death
exception. Each text is a faithful rewrite of the thread named beside its test (ids and figures
kept, the surrounding output cut)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from oomtrace.trace import Trace
from tests.unit.ingest.vllm.field_ingest import vllm_trace

GIB = 2**30
MIB = 2**20


def _trace(tmp_path: Path, text: str) -> Trace:
    # a name that does not say "vllm": these files are recognised by what they hold
    return vllm_trace(tmp_path, text, "posted.txt")


@pytest.mark.parametrize(
    "lead",
    [
        # https://github.com/noonghunna/club-3090/issues/32 (the time replaced by "...")
        "INFO ... ",
        # the same records with the time left out and the columns aligned, as a write-up on
        # vLLM's CUDA-graph estimate quotes them
        "INFO    ",
    ],
)
def test_a_header_with_its_time_elided_still_gives_the_start_up_figures(
    tmp_path: Path, lead: str
) -> None:
    trace = _trace(
        tmp_path,
        "Booted the shipped 180K + 0.93 on our test rig. Result:\n\n```\n"
        f"{lead}[gpu_worker.py:489] Available KV cache memory: 4.11 GiB\n"
        f"{lead}[kv_cache_utils.py:1778] GPU KV cache size: 326,112 tokens\n"
        f"{lead}[kv_cache_utils.py:1783] Maximum concurrency for 180,000 tokens per request: "
        "1.34x\n"
        f"{lead}Application startup complete.\n```\n",
    )
    config = trace.manifest.engine_config
    assert config["available_kv_cache_bytes"] == round(4.11 * GIB)
    assert config["kv_cache_tokens"] == 326112
    assert config["max_concurrency_tokens"] == 180000
    assert config["max_concurrency"] == 1.34


def test_the_cuda_graph_profiling_record_states_the_utilisation_asked_for(
    tmp_path: Path,
) -> None:
    # https://github.com/noonghunna/club-3090/issues/127 (vLLM 0.21+, TP4 workers; the other
    # workers print the same record)
    text = (
        "(Worker_TP1 pid=148) INFO 05-14 00:04:16 [gpu_model_runner.py:6143] Estimated CUDA graph "
        "memory: 0.17 GiB total\n"
        "(Worker_TP0 pid=147) INFO 05-14 00:04:17 [gpu_worker.py:460] Available KV cache memory: "
        "15.72 GiB\n"
        "(Worker_TP0 pid=147) INFO 05-14 00:04:17 [gpu_worker.py:475] CUDA graph memory profiling "
        "is enabled (default since v0.21.0). The current --gpu-memory-utilization=0.9200 is "
        "equivalent to --gpu-memory-utilization=0.9129 without CUDA graph memory profiling. To "
        "maintain the same effective KV cache size as before, increase --gpu-memory-utilization "
        "to 0.9271. To disable, set VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0.\n"
    )
    config = _trace(tmp_path, text).manifest.engine_config
    assert config["gpu_memory_utilization"] == 0.92
    assert config["available_kv_cache_bytes"] == round(15.72 * GIB)


def test_an_oom_quoted_a_sentence_a_line_above_the_engine_death_is_read_whole(
    tmp_path: Path,
) -> None:
    # https://github.com/vllm-project/vllm/issues/52871 (RTX 5090; the poster's abridged call
    # path, the message broken after its first sentence, "...", then V1's EngineDeadError)
    text = (
        "~6000 tokens killed the engine every time:\n\n```\n"
        "qwen_gdn_linear_attn.py:283  forward_native -> fla_chunk_gated_delta_rule\n"
        "    flash_linear_attention/ops/chunk_o.py:168   o = torch.empty_like(v)\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 96.00 MiB.\n"
        "GPU 0 has a total capacity of 31.40 GiB of which 41.56 MiB is free.\n"
        "...\n"
        "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.\n```\n"
    )
    events = _trace(tmp_path, text).events
    oom = events.filter(pl.col("kind") == "oom")
    assert oom.height == 1
    assert oom.row(0, named=True)["requested_bytes"] == 96 * MIB
    assert oom.row(0, named=True)["total_bytes"] == round(31.40 * GIB)
    assert oom.row(0, named=True)["free_bytes"] == round(41.56 * MIB)
    assert events.filter(pl.col("kind") == "engine_dead").height == 1


def test_a_level_padded_to_a_width_still_starts_a_record(tmp_path: Path) -> None:
    # https://github.com/vllm-project/vllm/pull/24505 (vLLM 0.10.2 on ROCm: "INFO  09-09 ..." with
    # two spaces, and access lines in a logging format of their own between the stats)
    trace = _trace(
        tmp_path,
        "Server output:\n\n```\n"
        '(APIServer pid=17943) INFO  127.0.0.1:53300 "POST /v1/completions HTTP/1.1" 200 OK\n'
        '(APIServer pid=17943) INFO  127.0.0.1:53302 "POST /v1/completions HTTP/1.1" 200 OK\n'
        "(APIServer pid=17943) INFO  09-09 05:27:57 [loggers.py:123] Engine 000: Avg prompt "
        "throughput: 5.1 tokens/s, Avg generation throughput: 12.2 tokens/s, Running: 2 reqs, "
        "Waiting: 0 reqs, GPU KV cache usage: 0.0%, Prefix cache hit rate: 0.0%\n"
        "(APIServer pid=17943) WARNING 09-09 05:28:07 [loggers.py:123] Engine 000: Avg prompt "
        "throughput: 0.0 tokens/s, Avg generation throughput: 9.0 tokens/s, Running: 1 reqs, "
        "Waiting: 0 reqs, GPU KV cache usage: 0.4%, Prefix cache hit rate: 0.0%\n```\n",
    )
    running = trace.samples.filter(pl.col("metric") == "requests_running").sort("ts")
    assert running["value"].to_list() == [2, 1]
    assert running["ts"].dt.second().to_list() == [57, 7]


def test_vllm_ascends_profiling_summary_gives_the_weights_and_the_activation_peak(
    tmp_path: Path,
) -> None:
    # https://github.com/vllm-project/vllm-ascend/pull/8289 (the NPU worker's "Actual usage:"
    # with "weights" and NPU graph memory; the excerpt ends mid-record)
    config = _trace(
        tmp_path,
        "(EngineCore pid=2884597) INFO 04-15 06:30:01 [worker.py:575] Free memory on device "
        "(60.86/61.27 GiB) on startup. Desired GPU memory utilization is (0.9, 55.14 GiB). Actual "
        "usage: 1.14 GiB for weights, 0.22 GiB for peak activation, 0.13 GiB for non-torch "
        "memory, 0.04 GiB for NPU graph memory. Replace gpu_memory_utilization with "
        "`--kv-cache-memory=57403864576` (53.46 GiB) to fit in\n",
    ).manifest.engine_config
    assert config["profiled_weights_bytes"] == round(1.14 * GIB)
    assert config["activation_peak_bytes"] == round(0.22 * GIB)
    assert config["non_torch_bytes"] == round(0.13 * GIB)
    assert config["initial_free_bytes"] == round(60.86 * GIB)
    assert config["gpu_memory_utilization"] == 0.9


def test_the_kv_budget_is_the_smallest_any_worker_profiled(tmp_path: Path) -> None:
    # https://github.com/vllm-project/vllm/issues/16570 (0.8.3 V0, TP4 on 40 GB cards: the driver
    # prints without a process prefix, between its workers, and keeps the least for KV)
    trace = _trace(
        tmp_path,
        "".join(
            f"{prefix}INFO 04-15 00:05:58 [worker.py:267] model weights take 34.43GiB; "
            f"non_torch_memory takes {non_torch}GiB; PyTorch activation peak memory takes 2.51GiB; "
            f"the rest of the memory reserved for KV Cache is {kv}GiB.\n"
            for prefix, non_torch, kv in (
                ("(VllmWorkerProcess pid=126555) ", "0.34", "0.13"),
                ("", "0.43", "0.04"),
                ("(VllmWorkerProcess pid=126553) ", "0.38", "0.09"),
            )
        ),
    )
    config = trace.manifest.engine_config
    assert config["available_kv_cache_bytes"] == round(0.04 * GIB)
    # other figures keep the first statement
    assert config["non_torch_bytes"] == round(0.34 * GIB)
    notes = " ".join(trace.manifest.sources[0].notes)
    assert "kept the smallest" in notes


def test_a_v0_paste_that_lost_its_newlines_keeps_its_ids_and_the_engines_death(
    tmp_path: Path,
) -> None:
    # https://github.com/vllm-project/vllm/issues/5697 (vLLM 0.4/0.5: the engine loop's
    # TimeoutError and three aborts pasted onto two lines)
    trace = _trace(
        tmp_path,
        'raceback (most recent call last):   File "/root/anaconda3/envs/vllm/lib/python3.10/site-'
        'packages/vllm/engine/async_llm_engine.py", line 42, in _log_task_completion     '
        "return_value = task.result()     raise exceptions.TimeoutError() from exc "
        "asyncio.exceptions.TimeoutError  The above exception was the direct cause of the "
        "following exception:  Traceback (most recent call last):   File "
        '"uvloop/cbhandles.pyx", line 63, in uvloop.loop.Handle._run     raise '
        "AsyncEngineDeadError( vllm.engine.async_llm_engine.AsyncEngineDeadError: Task finished "
        "unexpectedly. This should never happen! Please open an \n"
        "issue on Github. See stack trace above for theactual cause. INFO 06-19 11:25:01 "
        "async_llm_engine.py:167] Aborted request cmpl-7347d49f836c40a6b8d00fff45f5998d. INFO "
        "06-19 11:25:01 async_llm_engine.py:167] Aborted request "
        "cmpl-10f955208ce04051aeb80f37a1b930b4. INFO 06-19 11:25:01 async_llm_engine.py:167] "
        "Aborted request cmpl-66dbd15ae2574c24ad701af023c451e6.\n",
    )
    aborted = trace.requests.filter(pl.col("event") == "aborted")
    assert sorted(aborted["request_id"]) == [
        "cmpl-10f955208ce04051aeb80f37a1b930b4",
        "cmpl-66dbd15ae2574c24ad701af023c451e6",
        "cmpl-7347d49f836c40a6b8d00fff45f5998d",
    ]
    assert trace.events.filter(pl.col("kind") == "engine_dead").height == 1


def test_the_engine_core_process_raising_is_its_death(tmp_path: Path) -> None:
    # https://github.com/noonghunna/club-3090/issues/60 (vLLM V1 in Docker: the weights' repack
    # failed for want of memory; the core process's own traceback follows "Process EngineCore:")
    trace = _trace(
        tmp_path,
        "(EngineCore pid=74) ERROR 05-07 00:37:03 [core.py:1136]     return self._op(*args, "
        "**kwargs)\n"
        "(EngineCore pid=74) ERROR 05-07 00:37:03 [core.py:1136]            "
        "^^^^^^^^^^^^^^^^^^^^^^^^^\n"
        "(EngineCore pid=74) ERROR 05-07 00:37:03 [core.py:1136] RuntimeError: CUDA driver "
        "error: out of memory\n"
        "(EngineCore pid=74) Process EngineCore:\n"
        "(EngineCore pid=74) Traceback (most recent call last):\n"
        '(EngineCore pid=74)   File "/usr/lib/python3.12/multiprocessing/process.py", line 314, '
        "in _bootstrap\n"
        "(EngineCore pid=74)     self.run()\n",
    )
    deaths = trace.events.filter(pl.col("kind") == "engine_dead")
    assert deaths.height == 1
    assert deaths["ts"].dt.strftime("%m-%d %H:%M:%S").to_list() == ["05-07 00:37:03"]


def test_a_ci_runners_bracketed_utc_time_wins_over_vllms_local_time(tmp_path: Path) -> None:
    # the prefix as vLLM's Buildkite CI prints it (https://github.com/pytorch/pytorch/issues/
    # 170433: runner time in UTC, vLLM's own 8 hours behind), before a stats record in vLLM's
    # own format
    trace = _trace(
        tmp_path,
        "[2025-12-13T19:54:35Z] (APIServer pid=1) INFO 12-13 11:54:35 [loggers.py:271] Engine "
        "000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 1.0 tokens/s, "
        "Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 5.0%, Prefix cache hit rate: "
        "0.0%\n",
    )
    times = trace.samples["ts"].unique().dt.strftime("%Y-%m-%d %H:%M:%S").to_list()
    assert times == ["2025-12-13 19:54:35"]


def test_the_0_8_engine_cores_exception_is_its_death(tmp_path: Path) -> None:
    # https://github.com/vllm-project/vllm/pull/14728 (V1 of March 2025, no process prefix: the
    # sampler's dummy run failed right after the CUDA graphs were captured)
    trace = _trace(
        tmp_path,
        "INFO 03-14 02:45:05 [gpu_model_runner.py:1434] Graph capturing finished in 22 secs, "
        "took 0.64 GiB\n"
        "ERROR 03-14 02:45:06 [core.py:337] EngineCore hit an exception: Traceback (most recent "
        "call last):\n"
        'ERROR 03-14 02:45:06 [core.py:337]   File "/home/jovyan/vllm/vllm/v1/worker/'
        'gpu_model_runner.py", line 1292, in _dummy_sampler_run\n'
        "ERROR 03-14 02:45:06 [core.py:337]     sampler_output = self.model.sample(\n",
    )
    deaths = trace.events.filter(pl.col("kind") == "engine_dead")
    assert deaths["detail"].to_list() == ["EngineCore hit an exception"]


def test_a_v1_traceback_pasted_without_its_headers_is_vllms(tmp_path: Path) -> None:
    # https://github.com/vllm-project/vllm/issues/24814 (the engine core's frames, each line
    # behind its process prefix and nothing else)
    trace = _trace(
        tmp_path,
        "(EngineCore_DP0 pid=150254)     engine_core = EngineCoreProc(*args, **kwargs)\n"
        "(EngineCore_DP0 pid=150254)                   ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
        '(EngineCore_DP0 pid=150254)   File "/mnt/vllm/vllm/v1/engine/core.py", line 91, in '
        "__init__\n"
        "(EngineCore_DP0 pid=150254)     self._initialize_kv_caches(vllm_config)\n",
    )
    assert trace.manifest.sources[0].parser == "vllm-log"
    assert trace.events.filter(pl.col("kind") == "oom").height == 0
