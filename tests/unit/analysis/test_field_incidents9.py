"""Incidents from public threads (a ninth set) whose cause a person reads at once and the rules
misread, each rewritten from the thread named beside it in its real format (prefixes, figures and
the order of the lines kept; unrelated lines left out): TensorRT-LLM's runtime failing a buffer
with no size, one huge prompt's prefill read as fragmentation or a last straw, the driver's Xid
beside an out-of-memory failure.
"""

from __future__ import annotations

from pathlib import Path

from oomtrace.analysis import analyze
from oomtrace.analysis.findings import Findings
from oomtrace.ingest import IngestOptions, load_any
from oomtrace.report import ReportInputs, build_report, render
from oomtrace.report.verdict import build_verdict
from oomtrace.trace import Trace

CORE, API = "(EngineCore_DP0 pid=229)", "(APIServer pid=1)"


def _trace(tmp_path: Path, files: dict[str, str]) -> Trace:
    node = tmp_path / "gpu-node"
    node.mkdir(parents=True)
    for name, text in files.items():
        (node / name).write_text(text, encoding="utf-8")
    return load_any([node], IngestOptions(year=2026, tz="UTC"))


def _findings(tmp_path: Path, files: dict[str, str]) -> Findings:
    return analyze(_trace(tmp_path, files))


def _markdown(trace: Trace) -> str:
    report = build_report(ReportInputs(analyze(trace).to_json(), trace))
    return render(report, "markdown", asset_dir="a").text


# https://github.com/NVIDIA/TensorRT-LLM/issues/401: gptManagerBenchmark on a Llama-2-7B engine
# built with max_batch_size 192 on an A100 40GB; the runtime's failure and its first frames.
TRTLLM_401 = (
    "[TensorRT-LLM][ERROR] [TensorRT-LLM][ERROR] CUDA runtime error in ::cudaMallocAsync(ptr, n, "
    "mCudaStream->get()): out of memory (/code/tensorrt_llm/cpp/tensorrt_llm/runtime/"
    "tllmBuffers.h:112)\n"
    "1       0x55c059d1e7c3 void tensorrt_llm::common::check<cudaError>(cudaError, char const*, "
    "char const*, int) + 147\n"
    "2       0x7f4aa35755f6 tensorrt_llm::runtime::BufferManager::gpu(unsigned long, "
    "nvinfer1::DataType) const + 230\n"
)


def test_a_tensorrt_llm_buffer_with_no_size_says_what_its_memory_is_made_of(
    tmp_path: Path,
) -> None:
    # GIVEN TensorRT-LLM's runtime failing cudaMallocAsync, no size, no time, no phase
    findings = _findings(tmp_path, {"trtllm.log": TRTLLM_401})
    primary = findings.primary
    assert primary is not None
    # THEN the class stays undecided (nothing places it), but the reason says whose buffer it
    # was and what sizes TensorRT-LLM's memory
    assert primary.cls == "unknown"
    assert primary.reason.startswith(
        "TensorRT-LLM's runtime could not allocate a device buffer (the message states no size)"
    )
    assert "max_batch_size and max_num_tokens" in primary.reason
    assert "kv_cache_free_gpu_mem_fraction" in primary.reason
    # AND the fix is TensorRT-LLM's own settings, with no value the log cannot give
    (fix,) = findings.remedies
    assert fix.action == (
        "lower kv_cache_free_gpu_mem_fraction, or build the engine with a smaller "
        "max_batch_size / max_num_tokens"
    )
    assert fix.value is None
    # AND the verdict's cause line says it, before what would decide it
    verdict = build_verdict(findings.to_json()["incidents"][0], [fix.to_json()])
    assert verdict.lines[1].startswith("Cause: TensorRT-LLM's runtime could not allocate")
    assert verdict.lines[-1].startswith("Fix (budget): lower kv_cache_free_gpu_mem_fraction")


def _startup(at: str, *, chunk: int, kv: str, tokens: str) -> str:
    """vLLM 0.13's start-up lines: its version, settings and KV cache statements."""
    return "\n".join(
        (
            f"{API} INFO 04-19 {at} [api_server.py:1351] vLLM API server version 0.13.0",
            (
                f"{API} INFO 04-19 {at} [utils.py:253] non-default args: {{'model': "
                f"'Qwen/Qwen3-32B', 'max_model_len': 262144, 'max_num_batched_tokens': {chunk}, "
                "'gpu_memory_utilization': 0.92}"
            ),
            f"{CORE} INFO 04-19 {at} [gpu_worker.py:340] Available KV cache memory: {kv}",
            f"{CORE} INFO 04-19 {at} [kv_cache_utils.py:1229] GPU KV cache size: {tokens} tokens",
        )
    )


def _stats(at: str, running: int, usage: float) -> str:
    return (
        f"{API} INFO 04-19 {at} [loggers.py:257] Engine 000: Avg prompt throughput: 1620.4 "
        f"tokens/s, Avg generation throughput: 88.1 tokens/s, Running: {running} reqs, Waiting: "
        f"0 reqs, GPU KV cache usage: {usage:.1f}%, Prefix cache hit rate: 0.0%"
    )


def _received(at: str, rid: str, prompt: int) -> str:
    """vLLM's request line with --enable-log-requests (params after the prompt, the ids
    counted, never kept)."""
    ids = ", ".join(str(1000 + k % 9000) for k in range(prompt))
    return (
        f"{API} INFO 04-19 {at} [logger.py:49] Received request {rid}: prompt: None, params: "
        "SamplingParams(n=1, presence_penalty=0.0, frequency_penalty=0.0, repetition_penalty="
        "1.0, temperature=0.6, top_p=0.95, top_k=20, min_p=0.0, seed=None, stop=[], "
        "stop_token_ids=[], bad_words=[], include_stop_str_in_output=False, ignore_eos=False, "
        "max_tokens=2048, min_tokens=0, logprobs=None, prompt_logprobs=None, "
        "skip_special_tokens=True, spaces_between_special_tokens=True, truncate_prompt_tokens="
        f"None, structured_outputs=None, extra_args=None), prompt_token_ids: [{ids}], "
        "prompt_embeds shape: None, lora_request: None."
    )


def _failed(at: str, rid: str) -> str:
    return f"{API} INFO 04-19 {at} [async_llm.py:488] Request {rid} failed (engine dead)."


# https://github.com/Sandermage/genesis-vllm-patches/issues/1: TurboQuant KV on an RTX 5090, a
# long context's continuation prefill; the failing frame and PyTorch's figures (711.09 MiB reserved
# but unallocated, more than the 72.00 MiB that failed). The request lines are vLLM's with
# --enable-log-requests (the thread states one long conversation, not its line).
OOM_GENESIS = (
    f'{CORE} ERROR 04-19 12:21:04 [core.py:1134]   File "/usr/local/lib/python3.12/dist-'
    'packages/vllm/v1/attention/backends/turboquant_attn.py", line 727, in '
    "_continuation_prefill\n"
    f"{CORE} ERROR 04-19 12:21:04 [core.py:1134]     v_full = torch.cat([v_cached_trim.to("
    "qdtype), val_chunk], dim=0)\n"
    f"{CORE} ERROR 04-19 12:21:04 [core.py:1134] torch.OutOfMemoryError: CUDA out of memory. "
    "Tried to allocate 72.00 MiB. GPU 0 has a total capacity of 31.33 GiB of which 2.56 MiB is "
    "free. Including non-PyTorch memory, this process has 31.28 GiB memory in use. Of the "
    "allocated memory 29.83 GiB is allocated by PyTorch, with 18.00 MiB allocated in private "
    "pools (e.g., CUDA Graphs), and 711.09 MiB is reserved by PyTorch but unallocated. If "
    "reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF="
    "expandable_segments:True to avoid fragmentation.\n"
)


def _genesis_log() -> str:
    return "\n".join(
        (
            _startup("12:10:02", chunk=16384, kv="9.87 GiB", tokens="161,696"),
            _stats("12:20:40", 2, 21.4),
            _received("12:20:51", "chatcmpl-short-1", 1_200),
            _received("12:20:55", "chatcmpl-long-7", 16_384),
            OOM_GENESIS.rstrip("\n"),
            _failed("12:21:05", "chatcmpl-short-1"),
            _failed("12:21:05", "chatcmpl-long-7"),
        )
    )


def test_one_prompts_prefill_beside_a_fragmented_cache_is_the_prompts_step(
    tmp_path: Path,
) -> None:
    # GIVEN a 16,384-token prefill chunk of one conversation, 1,200 tokens of another, and the
    # allocator holding 711 MiB reserved but unallocated (more than the 72 MiB that failed)
    findings = _findings(tmp_path, {"vllm.log": _genesis_log()})
    primary = findings.primary
    assert primary is not None
    # THEN the story is the prompt's prefill, named with its figures, not fragmentation
    assert primary.cls == "transient_peak"
    assert primary.reason.startswith(
        "one request's prefill: chatcmpl-long-7's 16,384-token prompt chunk was 93% of the "
        "17,584 tokens of the step that failed; its allocation of 72.00 MiB failed with "
        "2.56 MiB free"
    )
    # AND the allocator's slack is said beside it, not dropped
    assert "the allocator also held 711.09 MiB reserved but unallocated" in primary.reason
    assert primary.culprits[0].request_id == "chatcmpl-long-7"
    fragmentation = next(c for c in primary.checks if c.cls == "fragmentation")
    assert fragmentation.matched  # what it found stays in the findings
    # AND the fixes: the prefill budget first (with chunked prefill and the length bound said),
    # the allocator's setting after it
    actions = [r.action for r in findings.remedies]
    assert actions[0].startswith("set --max-num-batched-tokens ")
    assert int(actions[0].split()[-1]) < 16_384
    assert "--max-model-len bounds the prompts admitted" in findings.remedies[0].detail
    assert actions[-1].startswith("set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")


def test_a_short_prompts_step_on_a_fragmented_cache_stays_fragmentation(tmp_path: Path) -> None:
    # GIVEN the same failure, the step made of short prompts (no one prompt dominates)
    log = "\n".join(
        (
            _startup("12:10:02", chunk=16384, kv="9.87 GiB", tokens="161,696"),
            _stats("12:20:40", 3, 21.4),
            *(_received("12:20:5" + str(k), f"chatcmpl-s-{k}", 1_500) for k in range(3)),
            OOM_GENESIS.rstrip("\n"),
            *(_failed("12:21:05", f"chatcmpl-s-{k}") for k in range(3)),
        )
    )
    findings = _findings(tmp_path, {"vllm.log": log})
    assert findings.primary is not None
    assert findings.primary.cls == "fragmentation"


# https://github.com/wtdcode/vllm-backport/issues/94: one ~245k-token prompt, prefill chunk
# 16384, DeepSeek FP8 on A800-80GB; PyTorch's figures at the failure (640 MiB asked, 287.94 MiB
# free, 1.25 GiB reserved but unallocated: below 2 % of the device, no fragmentation).
OOM_94 = (
    f"{CORE} ERROR 04-19 13:02:11 [core.py:1134] torch.OutOfMemoryError: CUDA out of memory. "
    "Tried to allocate 640.00 MiB. GPU 0 has a total capacity of 79.25 GiB of which 287.94 MiB "
    "is free. Including non-PyTorch memory, this process has 78.86 GiB memory in use. Of the "
    "allocated memory 76.14 GiB is allocated by PyTorch, with 2.52 GiB allocated in private "
    "pools (e.g., CUDA Graphs), and 1.25 GiB is reserved by PyTorch but unallocated."
)


def test_a_huge_prompts_prefill_is_named_with_its_chunk_not_as_the_last_straw(
    tmp_path: Path,
) -> None:
    log = "\n".join(
        (
            _startup("12:58:00", chunk=16384, kv="41.20 GiB", tokens="675,008"),
            _stats("13:01:50", 2, 11.8),
            _received("13:01:58", "chatcmpl-doc-245k", 16_384),
            _received("13:02:00", "chatcmpl-chat-3", 900),
            OOM_94,
            _failed("13:02:12", "chatcmpl-doc-245k"),
            _failed("13:02:12", "chatcmpl-chat-3"),
        )
    )
    trace = _trace(tmp_path, {"vllm.log": log})
    primary = analyze(trace).primary
    assert primary is not None
    assert primary.cls == "transient_peak"
    assert primary.reason.startswith("one request's prefill: chatcmpl-doc-245k's 16,384-token")
    assert "last straw" not in primary.reason
    # AND the report's first screen tells it: the request, the figures, the prefill budget
    verdict = _markdown(trace).split("### What would have prevented it")[0]
    assert "chatcmpl-doc-245k" in verdict
    assert "16,384-token prompt chunk" in verdict
    assert "Fix (parameters): set --max-num-batched-tokens" in verdict


# https://pastebin.com/fTNHmgzB: the driver's Xid 31 (an MMU fault) in a kernel log; placed here
# in the minute of a vLLM engine core's out-of-memory failure (the OOM from the genesis thread
# above) to test the two read together: a GPU fault inside an OOM's window.
XID31_AT_OOM = (
    "Apr 19 12:21:06 hyperion kernel: NVRM: Xid (PCI:0000:08:00): 31, Ch 0000003b, intr "
    "10000000. MMU Fault: ENGINE GRAPHICS HUBCLIENT_SCC faulted @ 0x0_04687000. Fault is of type "
    "FAULT_PDE ACCESS_TYPE_READ\n"
)


def test_an_xid_in_an_ooms_window_is_named_beside_its_class(tmp_path: Path) -> None:
    # GIVEN the OOM and, 2 s later, the driver's Xid 31 in the kernel log
    trace = _trace(tmp_path, {"vllm.log": _genesis_log(), "kern.log": XID31_AT_OOM})
    findings = analyze(trace)
    primary = findings.primary
    assert primary is not None
    # THEN one incident, still the memory's class, with the fault named in its reason
    assert len(findings.incidents) == 1
    assert primary.cls == "transient_peak"
    assert (
        "the driver also reported Xid 31 on the GPU at 0000:08:00 2 s after the failure: a GPU "
        "memory page fault (MMU fault)" in primary.reason
    )
    fault = next(c for c in primary.checks if c.cls == "gpu_fault")
    assert not fault.matched
    assert fault.figure("xid") == 31
    # AND the fault's own action comes after the memory's fixes
    assert findings.remedies[-1].action.startswith("restart the engine; if the same Xid")
    assert findings.remedies[0].action.startswith("set --max-num-batched-tokens")
    # AND the report's verdict says it
    verdict = _markdown(trace).split("### What would have prevented it")[0]
    assert "Xid 31" in verdict


def test_an_undecided_failure_keeps_its_checks_last_with_an_xid_beside_it(
    tmp_path: Path,
) -> None:
    # GIVEN TensorRT-LLM's sizeless failure with a time (Triton's glog prefix) and an Xid 31
    trt = (
        "E0419 12:21:04.152656 81041 backend_model.cc:553] [TensorRT-LLM][ERROR] CUDA runtime "
        "error in ::cudaMallocAsync(ptr, n, mCudaStream->get()): out of memory (/code/"
        "tensorrt_llm/cpp/tensorrt_llm/runtime/tllmBuffers.h:112)\n"
    )
    findings = _findings(tmp_path, {"triton.log": trt, "kern.log": XID31_AT_OOM})
    primary = findings.primary
    assert primary is not None
    assert primary.cls == "unknown"
    own, _, checks = primary.reason.partition("no class fits: ")
    assert "the driver also reported Xid 31" in own
    assert "Xid" not in checks
    verdict = build_verdict(findings.to_json()["incidents"][0], ())
    assert "Xid 31" in verdict.lines[1]


# https://github.com/ollama/ollama/issues/1236: deepseek-coder:6.7b on a GTX 1660 Ti (6 GB); the
# maintainer: the model with its context needs about 8 GB. Ollama's runner lines, as posted.
GGML_1236 = (
    "CUDA error 2 at /go/src/github.com/jmorganca/ollama/llm/llama.cpp/gguf/ggml-cuda.cu:7358: "
    "out of memory\n"
    "current device: 0\n"
    "2023/11/22 11:37:21 llama.go:430: 2 at /go/src/github.com/jmorganca/ollama/llm/llama.cpp/"
    "gguf/ggml-cuda.cu:7358: out of memory\n"
    "current device: 0\n"
)


def test_ggmls_sizeless_cuda_error_says_what_shares_the_device(tmp_path: Path) -> None:
    findings = _findings(tmp_path, {"ollama.log": GGML_1236})
    primary = findings.primary
    assert primary is not None
    assert primary.cls == "unknown"
    assert primary.reason.startswith(
        "the CUDA backend of llama.cpp (ggml) ran out of device memory inside an operation"
    )
    assert "(-ngl; Ollama's num_gpu)" in primary.reason
    (fix,) = findings.remedies
    assert fix.action.startswith("offload fewer layers to the GPU (-ngl; Ollama: num_gpu)")
    verdict = build_verdict(findings.to_json()["incidents"][0], [fix.to_json()])
    assert verdict.lines[1].startswith("Cause: The CUDA backend of llama.cpp (ggml)")


# https://github.com/OpenMOSS/MOSS-TTSD/issues/71: SGLang's error as the client received it on an
# RTX 4090; another process (5403) held 21.69 GiB, and 20 MiB failed with 20.38 MiB free.
SGLANG_71 = (
    '{"error":{"message":"CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total '
    "capacity of 23.53 GiB of which 20.38 MiB is free. Including non-PyTorch memory, this process "
    "has 1.81 GiB memory in use. Process 5403 has 21.69 GiB memory in use. Of the allocated memory "
    "1.34 GiB is allocated by PyTorch, and 94.59 MiB is reserved by PyTorch but unallocated. If "
    "reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF="
    'expandable_segments:True to avoid fragmentation."}}\n'
)


def test_another_process_beside_an_allocation_that_lacked_nothing_is_said_plainly(
    tmp_path: Path,
) -> None:
    findings = _findings(tmp_path, {"sglang.log": SGLANG_71})
    primary = findings.primary
    assert primary is not None
    assert primary.cls == "foreign_memory"
    assert "lacked 0 B" not in primary.reason
    assert primary.reason.endswith(
        "the allocation found only 20.38 MiB free: the device was full, most of it theirs"
    )
    assert findings.remedies[0].action == "move process 5403 off GPU 0"


# https://github.com/noonghunna/club-3090/issues/58: vLLM on one RTX 3090; the engine core's OOM
# as the title quotes it (50 MiB failed with 56.88 MiB free), then the API server's death.
CLUB_58 = (
    "(EngineCore pid=104) ERROR 05-05 12:36:59 [core.py:1136] torch.OutOfMemoryError: CUDA out of "
    "memory. Tried to allocate 50.00 MiB. GPU 0 has a total capacity of 23.56 GiB of which 56.88 "
    "MiB is free.\n"
    "(APIServer pid=1) ERROR 05-05 12:36:59 [serving.py:1173] vllm.v1.engine.exceptions."
    "EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root "
    "cause.\n"
)


def test_an_allocation_that_failed_with_as_much_free_gets_a_headroom_fix(tmp_path: Path) -> None:
    findings = _findings(tmp_path, {"vllm.log": CLUB_58})
    primary = findings.primary
    assert primary is not None
    assert primary.cls == "transient_peak"
    # THEN a fix, sized by the whole allocation (the free memory was in pieces too small for it)
    fix = findings.remedies[0]
    assert fix.action.startswith("lower --gpu-memory-utilization by 0.02 or more")
    assert "it failed with 56.88 MiB free, in pieces too small for it" in fix.detail


# https://github.com/ikawrakow/ik_llama.cpp/issues/749: "tried to allocate 280 GB on cuda device 0"
# (11 GPUs, pipeline parallelism); the excerpt ends at ggml's graph allocator's failure.
GALLOCR_749 = (
    "llama_kv_cache_init:      CUDA0 KV buffer size =   379.23 MiB\n"
    "llama_new_context_with_model: KV self size  = 1005.79 MiB, c^KV (f16): 1005.79 MiB, kv^T "
    "(f16):    0.00 MiB\n"
    "llama_new_context_with_model:  CUDA_Host  output buffer size =     0.99 MiB\n"
    "llama_new_context_with_model: pipeline parallelism enabled (n_copies=4)\n"
    "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 279356.51 MiB on device 0: cudaMalloc "
    "failed: out of memory\n"
    "ggml_gallocr_reserve_n: failed to allocate CUDA0 buffer of size 292926534144\n"
)


def test_ggmls_graph_allocator_failing_is_the_compute_buffers_reservation(tmp_path: Path) -> None:
    findings = _findings(tmp_path, {"llama.log": GALLOCR_749})
    primary = findings.primary
    assert primary is not None
    assert primary.cls == "startup_misfit"
    assert primary.reason.startswith(
        "the reservation of the compute buffers at start-up needed 272.81 GiB"
    )
    assert findings.remedies[0].action.startswith("lower -ub")
