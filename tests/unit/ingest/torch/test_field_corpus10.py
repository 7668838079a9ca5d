"""Shapes the round-10 leftovers and held-out excerpts taught (public threads, named per test),
read by the ``pytorch-log`` reader: journald's prefix without its host and with a lower-case
month, Ollama's relay of its runner's ``cudaMalloc failed: out of memory`` and its start-up lines,
the process that printed an OOM and its own wrapper's phase, TGI's router client, LMDeploy's
TurboMind, TensorRT's default allocator under Triton."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from oomtrace.ingest import IngestOptions, ingest_paths
from oomtrace.trace import Trace
from oomtrace.units import MiB
from tests.factories import file_at

MTIME = datetime(2026, 12, 1, tzinfo=UTC)


def _trace(tmp_path: Path, text: str) -> Trace:
    raw = tmp_path / "raw.log"
    raw.write_text(text)
    return ingest_paths([file_at(tmp_path / "server.log", MTIME, copy_of=raw)], IngestOptions())


def _ooms(trace: Trace) -> pl.DataFrame:
    return trace.events.filter(pl.col("kind") == "oom")


# --- Ollama under journald ----------------------------------------------------------------------

# https://github.com/ollama/ollama/issues/5113 (journalctl under a locale that prints "jun", the
# host cut from the paste; the runner's failure only as Ollama relays it)
OLLAMA_5113 = (
    "jun 18 13:23:17 ollama[22256]: llm_load_print_meta: arch             = deepseek2\n"
    "jun 18 13:23:17 ollama[22256]: llm_load_print_meta: n_layer          = 27\n"
    "jun 18 13:23:19 ollama[22256]: time=2024-06-18T13:23:19.008+02:00 level=ERROR "
    'source=sched.go:388 msg="error loading llama server" error="llama runner process has '
    'terminated: signal: aborted (core dumped) cudaMalloc failed: out of memory"\n'
    "jun 18 13:23:19 ollama[22256]: [GIN] 2024/06/18 - 13:23:19 | 500 |  3.168403177s |       "
    '127.0.0.1 | POST     "/api/chat"\n'
)


def test_ollamas_relay_of_its_runners_failure_is_an_oom(tmp_path: Path) -> None:
    trace = _trace(tmp_path, OLLAMA_5113)
    assert trace.manifest.engine.get("name") == "ollama"
    ooms = _ooms(trace)
    assert ooms.height == 1
    assert ooms["requested_bytes"].to_list() == [None]
    assert "cudaMalloc failed: out of memory (no size stated)" in ooms["detail"][0]
    # Ollama's own zoned time, not the journald prefix's year-less local one
    assert ooms["ts"].to_list() == [datetime(2024, 6, 18, 11, 23, 19, 8000, tzinfo=UTC)]


def test_a_lower_case_month_in_journalds_prefix_is_read(tmp_path: Path) -> None:
    text = OLLAMA_5113.replace(
        "time=2024-06-18T13:23:19.008+02:00 level=ERROR", "level=ERROR"
    ).replace("[GIN] 2024/06/18 - 13:23:19", "[GIN]")
    trace = ingest_paths(
        [file_at(tmp_path / "server.log", MTIME, text=text)], IngestOptions(tz="UTC")
    )
    # the year from the file's time (2026), the month and day from journald's "jun 18"
    assert _ooms(trace)["ts"].to_list() == [datetime(2026, 6, 18, 13, 23, 19, tzinfo=UTC)]


def test_the_relay_after_ggmls_sized_failure_is_that_failure_told_again(tmp_path: Path) -> None:
    # https://github.com/ollama/ollama/issues/3683 (ggml's sized line, then Ollama's relay)
    trace = _trace(
        tmp_path,
        "Apr 17 01:25:10 ai-pc ollama[56169]: ggml_backend_cuda_buffer_type_alloc_buffer: "
        "allocating 24289.03 MiB on device 0: cudaMalloc failed: out of memory\n"
        "Apr 17 01:25:11 ai-pc ollama[56169]: llama_model_load: error loading model: unable to "
        "allocate backend buffer\n"
        "Apr 17 01:25:11 ai-pc ollama[56169]: time=2024-04-17T01:25:11.819+04:00 level=ERROR "
        'source=routes.go:120 msg="error loading llama server" error="llama runner process no '
        'longer running: -1 cudaMalloc failed: out of memory"\n',
    )
    ooms = _ooms(trace)
    assert ooms["requested_bytes"].to_list() == [round(24289.03 * MiB)]
    assert ooms["device"].to_list() == [0]


def test_the_relay_is_told_again_even_where_the_two_lines_times_disagree(tmp_path: Path) -> None:
    # the same lines read with --tz UTC: journald's local times and Ollama's "+04:00" are then four
    # hours apart, and the relay is still ggml's failure told again (it is a few lines below it)
    text = (
        "Apr 17 01:25:10 ai-pc ollama[56169]: ggml_backend_cuda_buffer_type_alloc_buffer: "
        "allocating 24289.03 MiB on device 0: cudaMalloc failed: out of memory\n"
        "Apr 17 01:25:11 ai-pc ollama[56169]: time=2024-04-17T01:25:11.819+04:00 level=ERROR "
        'source=routes.go:120 msg="error loading llama server" error="llama runner process no '
        'longer running: -1 cudaMalloc failed: out of memory"\n'
    )
    trace = ingest_paths(
        [file_at(tmp_path / "server.log", MTIME, text=text)], IngestOptions(tz="UTC")
    )
    assert _ooms(trace)["requested_bytes"].to_list() == [round(24289.03 * MiB)]


# --- The process that printed an OOM, and its own wrapper's phase -------------------------------

_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.74 GiB. GPU {gpu} has a "
    "total capacity of 23.57 GiB of which {free} MiB is free. Process {host_pid} has 22.97 GiB "
    "memory in use. Of the allocated memory 20.21 GiB is allocated by PyTorch, with 128.00 MiB "
    "allocated in private pools (e.g., CUDA Graphs), and 185.98 MiB is reserved by PyTorch but "
    "unallocated."
)
_RANK = "(VllmWorker rank={rank} pid={pid}) ERROR 03-19 07:27:53 [multiproc_executor.py:375] "
# https://github.com/vllm-project/vllm/issues/15105: two ranks' OOMs, then one rank's chained
# wrapper (in vLLM 0.8's words, as https://github.com/vllm-project/vllm/issues/14452 prints them)
VLLM_15105 = "".join(
    _RANK.format(rank=rank, pid=pid) + body + "\n"
    for rank, pid, body in (
        (1, 2978, _OOM.format(gpu=1, free="605.88", host_pid=133288)),
        (0, 2961, _OOM.format(gpu=0, free="594.88", host_pid=133267)),
        (1, 2978, ""),
        (1, 2978, "The above exception was the direct cause of the following exception:"),
        (1, 2978, ""),
        (1, 2978, "Traceback (most recent call last):"),
        (1, 2978, "    raise RuntimeError("),
        (
            1,
            2978,
            (
                "RuntimeError: CUDA out of memory occurred when warming up sampler with 1024 "
                "dummy requests. Please try lowering `max_num_seqs` or `gpu_memory_utilization` "
                "when initializing the engine."
            ),
        ),
    )
)


def test_an_oom_takes_the_phase_of_its_own_processs_wrapper(tmp_path: Path) -> None:
    trace = ingest_paths(
        [file_at(tmp_path / "vllm.log", MTIME, text=VLLM_15105)], IngestOptions(year=2025)
    )
    assert trace.manifest.sources[0].parser == "vllm-log"
    ooms = _ooms(trace).sort("device")
    assert ooms["requested_bytes"].to_list() == [round(1.74 * 2**30)] * 2
    # rank 1 printed the wrapper: its OOM was the sampler's warm-up; rank 0's own lines say none
    assert ooms.select("device", "phase", "proc", "pid").rows() == [
        (0, None, "(VllmWorker rank=0 pid=2961)", 133267),
        (1, "profile_sampler", "(VllmWorker rank=1 pid=2978)", 133288),
    ]


def test_another_processs_wrapper_names_no_phase_of_this_oom(tmp_path: Path) -> None:
    # the same lines, the wrapper printed by rank 0 only: rank 1's OOM has no phase then
    text = VLLM_15105.replace(
        "rank=1 pid=2978) ERROR 03-19 07:27:53 [multiproc_executor.py:375] R",
        "rank=0 pid=2961) ERROR 03-19 07:27:53 [multiproc_executor.py:375] R",
    )
    trace = _trace(tmp_path, text)
    ooms = _ooms(trace).sort("device")
    assert ooms.select("device", "phase").rows() == [(0, "profile_sampler"), (1, None)]


def test_the_pytorch_log_reader_keeps_the_printing_process(tmp_path: Path) -> None:
    # the process prefixes without vLLM's level and source, behind docker's timestamps: read by
    # the pytorch-log reader
    text = VLLM_15105.replace(" ERROR 03-19 07:27:53 [multiproc_executor.py:375]", "")
    text = "".join(f"2025-03-19T07:27:53.5Z {line}\n" for line in text.splitlines())
    trace = _trace(tmp_path, text)
    assert trace.manifest.sources[0].parser == "pytorch-log"
    ooms = _ooms(trace).sort("device")
    assert ooms.select("phase", "proc").rows() == [
        (None, "(VllmWorker rank=0 pid=2961)"),
        ("profile_sampler", "(VllmWorker rank=1 pid=2978)"),
    ]


# --- Round 10's held-out excerpts -----------------------------------------------------------------


def test_ollamas_start_up_lines_alone_are_ollamas_log(tmp_path: Path) -> None:
    # https://github.com/ollama/ollama/issues/2835 (Windows, no failure yet in the lines posted)
    trace = _trace(
        tmp_path,
        'time=2024-03-02T10:57:13.946+08:00 level=INFO source=images.go:710 msg="total blobs: 17"\n'
        "time=2024-03-02T10:57:13.961+08:00 level=INFO source=routes.go:1019 "
        'msg="Listening on [::]:1123 (version 0.1.27)"\n'
        "time=2024-03-02T10:57:14.141+08:00 level=INFO source=payload_common.go:146 "
        'msg="Dynamic LLM libraries [cpu_avx2 cpu cuda_v11.3 cpu_avx]"\n',
    )
    assert trace.manifest.engine.get("name") == "ollama"
    assert _ooms(trace).height == 0


def test_tgis_router_client_names_tgi(tmp_path: Path) -> None:
    # https://github.com/huggingface/text-generation-inference/issues/1356
    trace = _trace(
        tmp_path,
        "2023-12-18T02:36:47.730476Z ERROR batch{batch_size=1}:prefill:prefill{id=7570 size=1}:"
        "prefill{id=7570 size=1}: text_generation_client: router/client/src/lib.rs:33: Server "
        "error: CUDA out of memory. Tried to allocate 18.00 MiB. GPU 0 has a total capacty of "
        "79.11 GiB of which 14.62 MiB is free. Process 124797 has 79.08 GiB memory in use. Of "
        "the allocated memory 78.11 GiB is allocated by PyTorch, and 131.85 MiB is reserved by "
        "PyTorch but unallocated.\n",
    )
    assert trace.manifest.engine.get("name") == "tgi"
    assert _ooms(trace)["requested_bytes"].to_list() == [18 * MiB]


def test_turbominds_cuda_runtime_error_is_an_oom_of_lmdeploy(tmp_path: Path) -> None:
    # https://github.com/InternLM/lmdeploy/issues/1019
    trace = _trace(
        tmp_path,
        "Traceback (most recent call last):\n"
        '  File "/home/khj/.local/lib/python3.8/site-packages/lmdeploy/turbomind/turbomind.py", '
        "line 486, in _create_model_instance\n"
        "    model_inst = self.tm_model.model_comm.create_model_instance(\n"
        "RuntimeError: [TM][ERROR] CUDA runtime error: out of memory "
        "/lmdeploy/src/turbomind/utils/allocator.h:231\n",
    )
    assert trace.manifest.engine.get("name") == "lmdeploy"
    # its frame, the model instance's creation, is the engine's creation at start-up
    detail = (
        "CUDA runtime error: out of memory (no size stated); during the creation of the engine's "
        "runtime (its buffers and KV cache) at start-up"
    )
    assert _ooms(trace)["detail"].to_list() == [detail]
    assert _ooms(trace)["phase"].to_list() == ["engine_create"]


def test_lmdeploys_own_lines_alone_are_lmdeploys_log(tmp_path: Path) -> None:
    # https://github.com/InternLM/lmdeploy/issues/1001 (the date without its year)
    trace = _trace(
        tmp_path,
        "01/19 15:19:51 - turbomind - WARNING - loading from workspace, ignore args "
        "['cache_max_entry_count', 'tp'] please use TurbomindEngineConfig or modify config.ini\n",
    )
    assert trace.manifest.engine.get("name") == "lmdeploy"


def test_tensorrts_default_allocator_failure_and_its_size_are_one_oom(tmp_path: Path) -> None:
    # https://github.com/triton-inference-server/tensorrtllm_backend/issues/274 (Triton's glog
    # line above places it; the size's line is cut as the thread cuts it)
    trace = _trace(
        tmp_path,
        "I0102 22:06:30.085833 160 cuda_memory_manager.cc:107] CUDA memory pool is created on "
        "device 0 with size 67108864\n"
        "[TensorRT-LLM][INFO] Loaded engine size: 13768 MiB\n"
        "[TensorRT-LLM][ERROR] 1: [defaultAllocator.cpp::allocate::20] Error Code 1: Cuda Runtime "
        "(out of memory)\n"
        "[TensorRT-LLM][WARNING] Requested amount of GPU memory (14434380600 bytes) could not be "
        "allocated. There may not be enough free memory for allocation to succ",
    )
    assert trace.manifest.engine.get("name") == "tensorrt-llm"
    assert _ooms(trace)["requested_bytes"].to_list() == [14434380600]
