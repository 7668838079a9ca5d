"""Incidents from public threads (a tenth set) whose cause a person reads at once and the rules
misread or told unhelpfully, each rewritten from the thread named beside it in its real format
(prefixes, figures and the order of the lines kept; unrelated lines left out): the hint for a
trace that names no request, in each engine's own terms.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from oomtrace.analysis import analyze
from oomtrace.analysis.findings import Findings
from oomtrace.ingest import IngestOptions, load_any
from oomtrace.report import ReportInputs, build_report
from oomtrace.terminal.findings_text import render_summary
from oomtrace.trace import Trace
from tests.unit.analysis.test_field_incidents5 import TGI_2572
from tests.unit.analysis.test_field_incidents9 import GALLOCR_749, TRTLLM_401
from tests.unit.analysis.test_ollama_remedies import OLLAMA_3683, OLLAMA_6860


def _trace(tmp_path: Path, files: dict[str, str]) -> Trace:
    node = tmp_path / "gpu-node"
    node.mkdir(parents=True)
    for name, text in files.items():
        (node / name).write_text(text, encoding="utf-8")
    return load_any([node], IngestOptions(year=2026, tz="UTC"))


def _findings(tmp_path: Path, files: dict[str, str]) -> Findings:
    return analyze(_trace(tmp_path, files))


# Each engine's own log, none naming a request: the hint names that engine's own way (or says
# it has none oomtrace reads), never vLLM's flag.
@pytest.mark.parametrize(
    ("name", "text", "engine", "says"),
    [
        # https://github.com/huggingface/text-generation-inference/issues/2572
        ("tgi.log", TGI_2572, "tgi", "TGI's router logs a request only once it succeeded"),
        # https://github.com/ollama/ollama/issues/3683
        ("server.log", OLLAMA_3683, "ollama", "Ollama's log states no request's tokens"),
        # https://github.com/ikawrakow/ik_llama.cpp/issues/749
        ("llama.log", GALLOCR_749, "llama.cpp", "keep llama-server's log from before the failure"),
        # https://github.com/NVIDIA/TensorRT-LLM/issues/401
        ("trtllm.log", TRTLLM_401, "tensorrt-llm", "TensorRT-LLM logs no request by id"),
    ],
)
def test_the_no_request_hint_names_the_engines_own_way_to_log_requests(
    tmp_path: Path, name: str, text: str, engine: str, says: str
) -> None:
    # GIVEN an engine's log that names no request
    trace = _trace(tmp_path, {name: text})
    findings = analyze(trace)
    assert findings.trace.engine == engine
    assert findings.trace.requests == 0
    # THEN the terminal's line says that engine's way, not vLLM's flag
    summary = render_summary(findings)
    assert "the inputs name no request" in summary
    assert says in summary
    assert "--enable-log-requests" not in summary
    # AND where the report's verdict says no request is named (a failure with a peak), it says
    # the same way, never vLLM's flag
    paragraph = build_report(ReportInputs(findings.to_json(), trace)).verdict.paragraph
    if "The inputs name no request at the peak" in paragraph:
        assert f"To name them next time: {says}" in paragraph
    assert "--enable-log-requests" not in paragraph


def test_an_ollama_context_remedy_is_a_smaller_context_with_its_arithmetic(
    tmp_path: Path,
) -> None:
    # GIVEN https://github.com/ollama/ollama/issues/6860: the runner ran --ctx-size 8192 over
    # --parallel 4, its 5.00 GiB KV cache fit, and a 144.00 MiB compute buffer on CUDA4 did not
    findings = _findings(tmp_path, {"ollama.log": OLLAMA_6860})
    assert findings.primary is not None
    assert findings.primary.cls == "startup_misfit"
    # THEN no remedy sets the context the runner already uses (8,192 in all, 2,048 a request)
    assert not any(r.value in ("8192", "2048") for r in findings.remedies), findings.remedies
    context = next(r for r in findings.remedies if r.setting == "OLLAMA_CONTEXT_LENGTH")
    # AND the context remedy is a smaller num_ctx, or fewer parallel requests, with its sums:
    # 144 MiB / 640 KiB a token = 231 tokens, 256 in whole steps, 8,192 - 256 = 7,936 in all,
    # 1,984 a request, 1,792 in whole steps of 256
    assert context.action == (
        "lower num_ctx (OLLAMA_CONTEXT_LENGTH) from 2,048 to 1,792, or OLLAMA_NUM_PARALLEL "
        "from 4 to 3"
    )
    assert context.value == "1792"
    assert "231 tokens of the 5.00 GiB KV cache (640.00 KiB a token)" in context.detail
    assert "8,192 - 256 = 7,936 tokens in all" in context.detail
    # AND the buffer's own fixes still come first
    assert findings.remedies[0].setting == "OLLAMA_GPU_OVERHEAD"


# https://github.com/vllm-project/vllm/issues/9356: Llama-3.2-11B-Vision on a 32 GB GPU; the
# excerpt's last frames are the vision encoder's patch embedding (nn.Unfold, im2col)
UNFOLD_9356 = (
    "    return forward_call(*args, **kwargs)\n"
    "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
    '  File "/model/anaconda3/envs/llm/lib/python3.11/site-packages/torch/nn/modules/fold.py", '
    "line 298, in forward\n"
    "    return F.unfold(input, self.kernel_size, self.dilation,\n"
    '  File "/model/anaconda3/envs/llm/lib/python3.11/site-packages/torch/nn/functional.py", '
    "line 4853, in unfold\n"
    "    return torch._C._nn.im2col(input, _pair(kernel_size), _pair(dilation), _pair(padding), "
    "_pair(stride))\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.59 GiB. GPU 0 has a total "
    "capacity of 31.73 GiB of which 3.11 GiB is free. Including non-PyTorch memory, this process "
    "has 28.62 GiB memory in use. Of the allocated memory 28.12 GiB is allocated by PyTorch, and "
    "80.04 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is "
    "large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.\n"
)


def test_a_vision_encoders_patch_embedding_is_the_encoders_step_with_its_fix(
    tmp_path: Path,
) -> None:
    # GIVEN an OOM whose frames end in the vision encoder's patch embedding (F.unfold)
    trace = _trace(tmp_path, {"vllm.log": UNFOLD_9356})
    findings = analyze(trace)
    primary = findings.primary
    assert primary is not None
    assert primary.cls == "transient_peak"
    # THEN its phase is the vision encoder's, said in the reason, and not a prefill's step
    assert primary.reason.startswith("the encoding of a request's image or video")
    assert "the vision encoder's temporary memory for a request's images" in primary.reason
    assert "prefill" not in primary.reason
    assert primary.reason.endswith("more headroom or fewer or smaller images")
    # AND the first fix bounds the images, ahead of the share
    assert "--limit-mm-per-prompt" in findings.remedies[0].action
    assert "max_pixels in --mm-processor-kwargs" in findings.remedies[0].action
    # AND the report's paragraph tells the encoder's story
    paragraph = build_report(ReportInputs(findings.to_json(), trace)).verdict.paragraph
    assert paragraph.startswith("One allocation asked for more than the device could give")
    assert "the vision encoder's temporary memory for a request's images" in paragraph


def test_a_language_models_own_step_is_not_read_as_the_vision_encoder(tmp_path: Path) -> None:
    # GIVEN the same failure without the encoder's frames (a plain traceback's message)
    message = UNFOLD_9356[UNFOLD_9356.index("torch.OutOfMemoryError") :]
    findings = _findings(tmp_path, {"vllm.log": message})
    primary = findings.primary
    assert primary is not None
    assert primary.cls == "transient_peak"
    # THEN it stays a step's temporary memory, with no image fix
    assert "vision encoder" not in primary.reason
    assert "a step's temporary memory" in primary.reason
    assert not any("--limit-mm-per-prompt" in r.action for r in findings.remedies)


# https://github.com/NVIDIA/TensorRT-LLM/issues/260: Triton's TensorRT-LLM backend failing to
# create the model instance (max_batch_size 24 on two V100s), the line wrapped by the terminal
TRTLLM_260 = (
    "[TensorRT-LLM][INFO] [MemUsageChange] TensorRT-managed allocation in IExecutionContext "
    "creation: CPU +0, GPU +0, now: CPU 0, GPU 12569 (MiB)\n"
    "E1103 02:59:01.152656 81041 backend_model.cc:553] ERROR: Failed to create instance: "
    "unexpected error when creating modelInstanceState: [TensorRT-LLM][ERROR] CUDA runtime error "
    "in ::cudaMallocAsync(ptr, n, mCudaSt\n"
    "ream->get()): out of memory (/app/tensorrt_llm/cpp/tensorrt_llm/runtime/tllmBuffers.h:112)\n"
    "1       0x7f5fe6888d85 /opt/tritonserver/backends/tensorrtllm/libtriton_tensorrtllm.so"
    "(+0x35d85) [0x7f5fe6888d85]\n"
)
# https://github.com/triton-inference-server/tensorrtllm_backend/issues/168: the refusal as its
# title states it (kv_cache_free_gpu_mem_fraction 0.2), no figures
REFUSAL_168 = (
    "ERROR: Failed to create instance: unexpected error when creating modelInstanceState: "
    "maxTokensInPagedKvCache must be large enough to process at least 1 sequence to completion "
    "(i.e. must be larger than beam_width * tokensPerBlock * maxBlocksPerSeq)\n"
)


def test_a_tensorrt_llm_instance_that_could_not_be_created_is_a_startup_misfit(
    tmp_path: Path,
) -> None:
    # GIVEN Triton failing to create the instance, its OOM wrapped onto the next line
    trace = _trace(tmp_path, {"triton.log": TRTLLM_260})
    events = trace.events
    # THEN ingest places the failure in the instance's creation
    assert events["phase"].to_list() == ["engine_create"]
    findings = analyze(trace)
    primary = findings.primary
    assert primary is not None
    assert primary.cls == "startup_misfit"
    assert "the creation of the engine's runtime (its buffers and KV cache) at start-up" in (
        primary.reason
    )
    # AND the fix is the engine's build limits or its KV fraction (the thread's: max_batch_size)
    assert findings.remedies[0].action == (
        "lower kv_cache_free_gpu_mem_fraction, or build the engine with a smaller "
        "max_batch_size / max_num_tokens"
    )


def test_a_tensorrt_llm_refusal_without_figures_still_names_its_settings(tmp_path: Path) -> None:
    # GIVEN TensorRT-LLM's refusal with no pool figure
    findings = _findings(tmp_path, {"trtllm.log": REFUSAL_168})
    primary = findings.primary
    assert primary is not None
    assert primary.cls == "startup_misfit"
    # THEN the remedy names what sizes the cache and what one sequence needs, no value invented
    (fix,) = findings.remedies
    assert fix.action.startswith("raise kv_cache_free_gpu_mem_fraction")
    assert "shorter max_seq_len" in fix.action
    assert fix.value is None


# https://github.com/sgl-project/sglang/issues/6082: SGLang with qwen2.5vl-72b-awq on four RTX
# 4090s, GPU 0's memory growing until this OOM; in a container the message lists every process
# by id, the failing one's too
SGLANG_6082 = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 38.00 MiB. GPU 0 has a total "
    "capacity of 23.65 GiB of which 39.44 MiB is free. Process 20909 has 1.81 GiB memory in use. "
    "Process 21069 has 1.87 GiB memory in use. Process 21071 has 1.87 GiB memory in use. Process "
    "21068 has 16.12 GiB memory in use. Process 21070 has 1.91 GiB memory in use. Of the allocated "
    "memory 1.22 GiB is allocated by PyTorch, and 220.57 MiB is reserved by PyTorch but "
    "unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.\n"
)


def test_a_small_failing_process_beside_the_engines_model_process_does_not_blame_the_model(
    tmp_path: Path,
) -> None:
    # GIVEN an OOM in a process holding 1.44 GiB of PyTorch memory, one of four small processes
    # beside a 16.12 GiB one on GPU 0
    findings = _findings(tmp_path, {"sglang.log": SGLANG_6082})
    primary = findings.primary
    assert primary is not None
    assert primary.cls == "foreign_memory"
    # THEN the large process is read as the engine's model process, the small ones as the cause
    assert "the failing process held only 1.44 GiB of PyTorch memory" in primary.reason
    assert "not process 21068 (16.12 GiB), which is most likely the engine's model" in (
        primary.reason
    )
    assert "the 7.46 GiB the small ones held together" in primary.reason
    # AND the fix moves the small ones, never the model's process
    first = findings.remedies[0]
    assert first.action.startswith("keep the small processes off GPU 0 (not process 21068")
    assert not any(r.action.startswith("move process 21068") for r in findings.remedies)


# https://github.com/huggingface/text-generation-inference/issues/1356: TGI's router relaying the
# shard's OOM during a one-request prefill, the device filled by TGI's own KV cache
TGI_1356 = (
    "2023-12-18T02:36:47.730476Z ERROR batch{batch_size=1}:prefill:prefill{id=7570 size=1}:"
    "prefill{id=7570 size=1}: text_generation_client: router/client/src/lib.rs:33: Server error: "
    "CUDA out of memory. Tried to allocate 18.00 MiB. GPU 0 has a total capacty of 79.11 GiB of "
    "which 14.62 MiB is free. Process 124797 has 79.08 GiB memory in use. Of the allocated memory "
    "78.11 GiB is allocated by PyTorch, and 131.85 MiB is reserved by PyTorch but unallocated. If "
    "reserved but unallocated memory is large try setting max_split_size_mb to avoid "
    "fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF\n"
)


def test_tgis_router_relaying_an_oom_is_tgis_and_its_fix_is_in_tgis_terms(tmp_path: Path) -> None:
    # GIVEN only the router's relay of the shard's OOM (text_generation_client)
    findings = _findings(tmp_path, {"tgi.log": TGI_1356})
    # THEN the trace is TGI's, and the headroom fix names TGI's own setting alone
    assert findings.trace.engine == "tgi"
    assert findings.remedies[0].action.startswith("lower --cuda-memory-fraction by")
    assert "--gpu-memory-utilization" not in findings.remedies[0].action


# https://github.com/ollama/ollama/issues/10753: Qwen2.5-VL 32b split 33/32 layers over a 16 GB
# and a 12 GB GPU; a request with a 720p image, then the compute buffer fails on device 1
OLLAMA_10753 = (
    "time=2025-05-18T08:35:01.882Z level=INFO source=server.go:168 msg=offload library=cuda "
    "layers.requested=-1 layers.model=65 layers.offload=65 layers.split=33,32 "
    'memory.available="[15.2 GiB 12.2 GiB]" memory.gpu_overhead="0 B" '
    'memory.required.full="25.7 GiB" memory.graph.full="853.3 MiB"\n'
    'time=2025-05-18T08:36:01.003Z level=DEBUG source=cache.go:136 msg="loading cache slot" id=0 '
    "cache=57 prompt=1227 used=20 remaining=1207\n"
    "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 1953.40 MiB on device 1: cudaMalloc "
    "failed: out of memory\n"
    "ggml_gallocr_reserve_n: failed to allocate CUDA1 buffer of size 2048290048\n"
    "SIGSEGV: segmentation violation\n"
)


def test_ollamas_compute_buffer_failing_for_a_request_is_while_serving_with_ollamas_fixes(
    tmp_path: Path,
) -> None:
    # GIVEN the runner taking a request into a cache slot, then the compute buffer failing
    trace = _trace(tmp_path, {"ollama.log": OLLAMA_10753})
    assert trace.events["phase"].to_list() == ["compute_realloc"]
    findings = analyze(trace)
    primary = findings.primary
    assert primary is not None
    # THEN it is a step while serving, not a start-up misfit
    assert primary.cls == "transient_peak"
    assert primary.reason.startswith("a re-allocation of the compute buffers while serving")
    # AND the fixes are Ollama's: room on the failing GPU of two, then the batch
    actions = [r.action for r in findings.remedies]
    assert actions[0].startswith("reserve room on each GPU with OLLAMA_GPU_OVERHEAD")
    assert "CUDA1" in actions[0]
    assert "lower num_batch" in actions


# https://github.com/InternLM/lmdeploy/issues/1019 (LMDeploy 0.2.x TurboMind, internlm2-chat-7b on
# a 24 GB RTX 3090; the maintainers' answer: the KV cache's cache_max_entry_count left the model
# instance's buffers too little, lower it to 0.2)
LMDEPLOY_1019 = (
    "[WARNING] gemm_config.in is not found; using default GEMM algo\n"
    "Exception in thread Thread-21:\n"
    "Traceback (most recent call last):\n"
    '  File "/usr/lib/python3.8/threading.py", line 932, in _bootstrap_inner\n'
    "    self.run()\n"
    '  File "/usr/lib/python3.8/threading.py", line 870, in run\n'
    "    self._target(*self._args, **self._kwargs)\n"
    '  File "/home/khj/.local/lib/python3.8/site-packages/lmdeploy/turbomind/turbomind.py", '
    "line 486, in _create_model_instance\n"
    "    model_inst = self.tm_model.model_comm.create_model_instance(\n"
    "RuntimeError: [TM][ERROR] CUDA runtime error: out of memory "
    "/lmdeploy/src/turbomind/utils/allocator.h:231\n"
)


def test_turbomind_failing_to_create_its_model_instance_is_a_startup_misfit_of_its_kv_share(
    tmp_path: Path,
) -> None:
    # GIVEN TurboMind's OOM inside its model instance's creation
    trace = _trace(tmp_path, {"lmdeploy.log": LMDEPLOY_1019})
    # THEN ingest places the failure in the engine's creation
    assert trace.events["phase"].to_list() == ["engine_create"]
    findings = analyze(trace)
    primary = findings.primary
    assert primary is not None
    assert primary.cls == "startup_misfit"
    # AND the fix is LMDeploy's own: a smaller KV share, not TensorRT-LLM's settings
    action = findings.remedies[0].action
    assert action.startswith("lower cache_max_entry_count (--cache-max-entry-count")
    assert "kv_cache_free_gpu_mem_fraction" not in action
