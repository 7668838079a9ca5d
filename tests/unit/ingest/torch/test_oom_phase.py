"""The phase an OOM came in, read off the lines around it: llama.cpp's account of the failed
buffer, a traceback's frames. Each excerpt is rewritten from the public thread named beside it
(ids, sizes and line structure kept; unrelated lines left out)."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from oomtrace.ingest.torch.oom_phase import failure_phases
from oomtrace.ingest.torch.oom_text import OOM_SHAPES
from oomtrace.units import MiB
from tests.factories import text_trace

# vllm-project/vllm#27508 (gpt-oss-120b on an H100): the engine core's traceback as pasted, the
# logger's header cut; the sampler's forward pass of the dummy sampler run fails.
VLLM_DUMMY_SAMPLER = (
    "```python-traceback\n"
    "(EngineCore_DP0 pid=8884)" + " " * 35 + "sampling_metadata=dummy_metadata)\n"
    '(EngineCore_DP0 pid=8884)   File "/opt/conda/envs/vllm_env/lib/python3.13/site-packages/torch/'
    'nn/modules/module.py", line 1773, in _wrapped_call_impl\n'
    "(EngineCore_DP0 pid=8884)     return self._call_impl(*args, **kwargs)\n"
    '(EngineCore_DP0 pid=8884)   File "/opt/conda/envs/vllm_env/lib/python3.13/site-packages/vllm/'
    'v1/sample/sampler.py", line 86, in forward\n'
    "(EngineCore_DP0 pid=8884)     logits = logits.to(torch.float32)\n"
    "(EngineCore_DP0 pid=8884) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
    "786.00 MiB. GPU 0 has a total capacity of 79.11 GiB of which 140.75 MiB is free. Process "
    "3270336 has 78.96 GiB memory in use. Of the allocated memory 68.83 GiB is allocated by "
    "PyTorch, with 660.00 MiB allocated in private pools (e.g., CUDA Graphs), and 331.08 MiB is "
    "reserved by PyTorch but unallocated.\n"
    "```\n"
)
# ggml-org/llama.cpp#11476 (docker compose): the compute buffers rebuilt while serving fail, three
# times, each followed by llama_kv_cache_update_impl's account.
LLAMA_KV_UPDATE = (
    "deep-seek-1  | ggml_backend_cuda_buffer_type_alloc_buffer: allocating 9866.00 MiB on device "
    "1: cudaMalloc failed: out of memory\n"
    "deep-seek-1  | ggml_gallocr_reserve_n: failed to allocate CUDA1 buffer of size 10345253120\n"
    "deep-seek-1  | llama_kv_cache_update_impl: failed to allocate compute buffers\n"
) * 3
# ggml-org/llama.cpp#20431: the weights of one device do not fit.
LLAMA_WEIGHTS = (
    "print_info: max token length      = 256\n"
    "load_tensors: loading model tensors, this can take a while... (mmap = true, direct_io = "
    "false)\n"
    "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 144817.04 MiB on device 0: cudaMalloc "
    "failed: out of memory\n"
    "alloc_tensor_range: failed to allocate CUDA0 buffer of size 151851674624\n"
    "llama_model_load: error loading model: unable to allocate CUDA0 buffer\n"
)
# vllm-project/vllm#30515 (a comment's V1 log, engine core 387): the CUDA graph capture's frames,
# compile_or_warm_up_model -> capture_model -> _capture_cudagraphs -> _dummy_run, as vLLM's
# logger prints a traceback (a header on every line). The comment's OOM line is not quoted in
# the thread: the failure here is #27508's message, for the shape.
_HEAD = "(EngineCore_DP0 pid=387) ERROR 03-08 16:44:32 [core.py:1111] "
_PKG = "/usr/local/lib/python3.12/dist-packages/vllm"
VLLM_CAPTURE = (
    "(EngineCore_DP0 pid=387) INFO 03-08 16:44:20 [gpu_model_runner.py:4850] Model loading took "
    "64.2 GiB memory and 40.1 seconds\n"
    + "".join(
        _HEAD + line + "\n"
        for line in (
            "EngineCore failed to start.",
            "Traceback (most recent call last):",
            f'  File "{_PKG}/v1/worker/gpu_worker.py", line 588, in compile_or_warm_up_model',
            "    cuda_graph_memory_bytes = self.model_runner.capture_model()",
            f'  File "{_PKG}/v1/worker/gpu_model_runner.py", line 5684, in capture_model',
            "    self._capture_cudagraphs(",
            f'  File "{_PKG}/v1/worker/gpu_model_runner.py", line 5795, in _capture_cudagraphs',
            "    self._warmup_and_capture(",
            f'  File "{_PKG}/v1/worker/gpu_model_runner.py", line 4976, in _dummy_run',
            "    outputs = self.model(",
            (
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 786.00 MiB. GPU 0 "
                "has a total capacity of 79.11 GiB of which 140.75 MiB is free. Of the allocated "
                "memory 68.83 GiB is allocated by PyTorch, and 331.08 MiB is reserved by PyTorch "
                "but unallocated."
            ),
        )
    )
)


def _phases(text: str) -> list[tuple[int, str | None]]:
    lines = pl.DataFrame({"text": text.splitlines()}).with_row_index("line", 1)
    found = failure_phases(lines.with_columns(pl.col("line").cast(pl.Int64)), OOM_SHAPES)
    return found.filter(pl.col("text").str.contains(OOM_SHAPES)).select("line", "phase").rows()


def test_the_dummy_sampler_run_is_read_off_the_traceback(tmp_path: Path) -> None:
    (oom,) = text_trace(tmp_path, "gptoss.txt", VLLM_DUMMY_SAMPLER).events.to_dicts()
    assert (oom["phase"], oom["requested_bytes"]) == ("profile_sampler", 786 * MiB)
    assert oom["detail"].endswith(
        "; during the start-up profiling run's dummy sampler pass (logits of a full batch)"
    )


def test_each_llama_cpp_failure_takes_the_account_after_it() -> None:
    # each failure's own account, never the one of the failure before (which is nearer above)
    assert _phases(LLAMA_KV_UPDATE) == [(n, "compute_realloc") for n in (1, 4, 7)]
    assert _phases(LLAMA_WEIGHTS) == [(3, "load_weights")]


def test_a_graph_reserved_again_after_a_memory_update_is_while_serving() -> None:
    # GIVEN newer llama.cpp's runtime path (src/llama-context.cpp, memory_update): graph_reserve
    # fails, then memory_update says it was after the memory update
    lines = [
        *LLAMA_KV_UPDATE.splitlines(keepends=True)[:2],
        "deep-seek-1  | graph_reserve: failed to allocate compute buffers\n",
        "deep-seek-1  | memory_update: failed to reserve graph after the memory update\n",
    ]
    # THEN the runtime account wins over graph_reserve's (which start-up prints too)
    assert _phases("".join(lines)) == [(1, "compute_realloc")]


def test_a_marker_does_not_reach_across_another_failure() -> None:
    # GIVEN a weights failure, then a runtime one whose lines state nothing
    text = LLAMA_WEIGHTS + LLAMA_KV_UPDATE.splitlines(keepends=True)[0]
    # THEN the second has no phase: the first's account belongs to the first
    assert _phases(text) == [(3, "load_weights"), (6, None)]


def test_the_loading_line_counts_only_right_before_the_failure() -> None:
    # GIVEN load_tensors' informational line, then ten unrelated lines, then a bare failure
    text = LLAMA_WEIGHTS.splitlines(keepends=True)[1] + "x\n" * 10
    text += LLAMA_KV_UPDATE.splitlines(keepends=True)[0]
    # THEN it is not said to be the weights: that line says only that loading began
    assert _phases(text) == [(12, None)]


def test_the_most_specific_frame_wins() -> None:
    # capture_model runs _dummy_run: the capture is what failed, not a profiling run
    assert _phases(VLLM_CAPTURE)[-1][1] == "graph_capture"


def test_an_idle_rank_s_dummy_batch_is_while_serving() -> None:
    # GIVEN the same _dummy_run, called by an idle data-parallel rank (vLLM's gpu_worker.py,
    # execute_dummy_batch) rather than by the capture
    text = VLLM_CAPTURE.replace("in compile_or_warm_up_model", "in execute_dummy_batch")
    text = text.replace("in capture_model", "in _run").replace("in _capture_cudagraphs", "in _x")
    # THEN it is no start-up phase
    assert _phases(text)[-1][1] == "dummy_batch"


def test_vllm_logs_carry_the_phase_of_their_tracebacks(tmp_path: Path) -> None:
    trace = text_trace(tmp_path, "vllm.log", VLLM_CAPTURE)
    (oom,) = trace.events.filter(pl.col("kind") == "oom").to_dicts()
    assert oom["phase"] == "graph_capture"
    assert oom["detail"].endswith("; during the CUDA graph capture at start-up")


# vllm-project/vllm#29360 (8 x H20, TP 8 + EP): the DeepGEMM kernel warm-up after the KV cache
# is allocated; the failing rank's excerpt holds only the innermost warm-up frame (the outer ones,
# compile_or_warm_up_model and kernel_warmup, were printed by another rank).
VLLM_DEEPGEMM_WARMUP = (
    "(Worker_TP3_EP3 pid=406) ERROR 11-25 08:05:06 [multiproc_executor.py:815]   File "
    '"/usr/local/lib/python3.12/dist-packages/vllm/model_executor/warmup/deep_gemm_warmup.py", '
    "line 262, in _warmup\n"
    "(Worker_TP3_EP3 pid=406) ERROR 11-25 08:05:06 [multiproc_executor.py:815]     out = "
    "torch.empty((MAX_M, n), device=device, dtype=torch.bfloat16)\n"
    "(Worker_TP3_EP3 pid=406) ERROR 11-25 08:05:06 [multiproc_executor.py:815] "
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 666.00 MiB. GPU 3 has a total "
    "capacity of 95.10 GiB of which 145.94 MiB is free. Process 53397 has 94.95 GiB memory in "
    "use. Of the allocated memory 92.33 GiB is allocated by PyTorch, and 32.77 MiB is reserved "
    "by PyTorch but unallocated.\n"
)
# huggingface/text-generation-inference#2301 (docker compose, 4 x A6000): TGI's warm-up prefill
# fails computing the prefill's log-probabilities.
_TGI = "tgi-llama3.1-70b-1  | "
_TGI_PKG = "/opt/conda/lib/python3.10/site-packages/text_generation_server/models"
TGI_WARMUP = "".join(
    _TGI + line + "\n"
    for line in (
        "Traceback (most recent call last):",
        f'  File "{_TGI_PKG}/flash_causal_lm.py", line 1251, in warmup',
        "    _, batch, _ = self.generate_token(batch)",
        f'  File "{_TGI_PKG}/flash_causal_lm.py", line 1693, in generate_token',
        "    prefill_logprobs_tensor = torch.log_softmax(out, -1)",
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.93 GiB. GPU 2 has a "
            "total capacity of 47.53 GiB of which 1.18 GiB is free. Process 790346 has 46.33 GiB "
            "memory in use."
        ),
    )
)


def test_a_kernel_or_model_warm_up_frame_is_the_warm_up() -> None:
    assert _phases(VLLM_DEEPGEMM_WARMUP) == [(3, "warmup")]
    assert _phases(TGI_WARMUP) == [(6, "warmup")]
    # a frame whose name only begins with the word is not one
    assert _phases(VLLM_CAPTURE.replace("in _dummy_run", "in _warmup_and_capture")) == [
        (12, "graph_capture")
    ]


def test_the_warm_up_phase_reaches_the_event(tmp_path: Path) -> None:
    # through the PyTorch-log reader (TGI's shard) and vLLM's own reader (its literal scan picks
    # the frame lines by FRAME_LITERALS)
    (oom,) = text_trace(tmp_path, "tgi.log", TGI_WARMUP).events.to_dicts()
    assert (oom["phase"], oom["requested_bytes"]) == ("warmup", int(3.93 * 1024**3))
    trace = text_trace(tmp_path, "vllm.log", VLLM_DEEPGEMM_WARMUP)
    (oom,) = trace.events.filter(pl.col("kind") == "oom").to_dicts()
    assert (oom["source"].split(":")[0], oom["phase"]) == ("vllm-log", "warmup")
