"""The PyTorch-log reader names the engine whose own lines it recognised (TGI, TensorRT-LLM,
llama.cpp, Ollama), so that a remedy names that engine's own setting, not vLLM's with the others'
in parentheses; a log with no engine's lines names none. Real logs of ``tests/data/torch`` (their
threads in its README) and excerpts of the threads named at each test."""

from __future__ import annotations

from pathlib import Path

from oomtrace.analysis import analyze
from oomtrace.ingest import IngestOptions, ingest_paths
from tests.factories import text_trace

DATA = Path(__file__).parents[3] / "data" / "torch"


def _engine(path: Path) -> object:
    return ingest_paths([path], IngestOptions()).manifest.engine.get("name")


def test_a_trtllm_serve_failure_names_its_kv_cache_fraction() -> None:
    # NVIDIA/TensorRT-LLM #5872: the executor could not create its KV cache
    path = DATA / "trtllm-serve-executor-oom.log"
    trace = ingest_paths([path], IngestOptions())
    assert trace.manifest.engine == {"name": "tensorrt-llm"}
    actions = [r.action for r in analyze(trace).remedies]
    assert actions == ["lower --kv_cache_free_gpu_memory_fraction"]
    # AND vLLM's flag is not offered to a TensorRT-LLM user
    assert not any("--gpu-memory-utilization" in a for a in actions)


def test_a_trtllm_pool_bounds_the_sequence_in_trtllm_serves_spelling(
    tmp_path: Path,
) -> None:
    # NVIDIA/TensorRT-LLM #2398 (T5 on an L4): the runtime's pool lines, then PyTorch's message
    # for the allocation that did not fit (the message's figures written for the test in
    # PyTorch's format: the thread's own error is cut from the excerpt)
    trace = text_trace(
        tmp_path,
        "trtllm-2398.log",
        "[TensorRT-LLM][INFO] Memory usage when calculating max tokens in paged kv cache: "
        "total: 22.19 GiB, available: 0.11 GiB\n"
        "[TensorRT-LLM][INFO] Number of blocks in KV cache primary pool: 18\n"
        "[TensorRT-LLM][INFO] Number of tokens per block: 64.\n"
        "[TensorRT-LLM][INFO] [MemUsageChange] Allocated 0.05 GiB for max tokens in paged KV "
        "cache (1152).\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB. GPU 0 has a "
        "total capacity of 22.19 GiB of which 110.00 MiB is free. Including non-PyTorch memory, "
        "this process has 22.07 GiB memory in use. Of the allocated memory 1.20 GiB is "
        "allocated by PyTorch, and 20.00 MiB is reserved by PyTorch but unallocated.\n",
    )
    assert trace.manifest.engine == {"name": "tensorrt-llm"}
    # THEN the longest sequence is bounded by the pool's 1152 tokens in trtllm-serve's spelling
    actions = [r.action for r in analyze(trace).remedies]
    assert actions == ["set --max_seq_len 1152"]


def test_tgis_log_names_tgi_and_its_prefill_budget() -> None:
    # huggingface/text-generation-inference #563: the warm-up's cudaMallocAsync refusal
    path = DATA / "tgi-warmup-panic.log"
    assert _engine(path) == "tgi"
    actions = [r.action for r in analyze(ingest_paths([path], IngestOptions())).remedies]
    assert actions
    assert all("--gpu-memory-utilization" not in a for a in actions)
    assert any("--max-batch-prefill-tokens" in a for a in actions)


def test_llama_servers_log_names_llama_cpp() -> None:
    # ggml's cudaMalloc failure in a llama-server start-up (tests/data/torch/README.md)
    path = DATA / "llama-server.log"
    assert _engine(path) == "llama.cpp"
    actions = [r.action for r in analyze(ingest_paths([path], IngestOptions())).remedies]
    assert actions == ["lower -c"]


def test_ollamas_log_names_ollama(tmp_path: Path) -> None:
    # https://github.com/ollama/ollama/issues/8825 (Ollama 0.5 on Windows, two GPUs)
    trace = text_trace(
        tmp_path,
        "ollama.log",
        'time=2025-02-04T16:56:25.304Z level=INFO source=sched.go:730 msg="new model will fit '
        'in available VRAM, loading" model=C:\\Users\\AI\\.ollama\\models\\blobs\\sha256-6150cb38 '
        'library=cuda parallel=4 required="23.4 GiB"\n'
        'time=2025-02-04T16:56:25.332Z level=INFO source=memory.go:356 msg="offload to cuda" '
        "layers.requested=-1 layers.model=65 layers.offload=65 layers.split=33,32 "
        'memory.available="[14.9 GiB 14.9 GiB]" memory.gpu_overhead="1.0 GiB" '
        'memory.required.full="23.4 GiB" memory.required.partial="23.4 GiB" '
        'memory.required.kv="2.0 GiB" memory.required.allocations="[12.0 GiB 11.4 GiB]"\n',
    )
    assert trace.manifest.engine == {"name": "ollama"}


def test_a_pasted_pytorch_message_names_no_engine(tmp_path: Path) -> None:
    # a script's OOM and nothing else, in PyTorch 2.x's wording (docs/formats/pytorch.md)
    trace = text_trace(
        tmp_path,
        "train.log",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
        "total capacity of 79.15 GiB of which 1.02 GiB is free. Including non-PyTorch memory, "
        "this process has 78.12 GiB memory in use. Of the allocated memory 75.00 GiB is "
        "allocated by PyTorch, and 1.50 GiB is reserved by PyTorch but unallocated.\n",
    )
    assert trace.manifest.engine == {}


def test_a_share_of_the_device_is_not_offered_as_trtllms_fraction(tmp_path: Path) -> None:
    # a TensorRT-LLM line (NVIDIA/TensorRT-LLM #2398) over a full device's PyTorch message
    # (written for the test in PyTorch's format): what it lacked is 2 % of the device, but
    # TensorRT-LLM's fraction is of what the weights leave, so no "by 0.02" is offered
    trace = text_trace(
        tmp_path,
        "trtllm.log",
        "[TensorRT-LLM][INFO] Number of tokens per block: 64.\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 MiB. GPU 0 has a "
        "total capacity of 22.19 GiB of which 110.00 MiB is free. Including non-PyTorch memory, "
        "this process has 22.07 GiB memory in use. Of the allocated memory 1.20 GiB is "
        "allocated by PyTorch, and 20.00 MiB is reserved by PyTorch but unallocated.\n",
    )
    (fix,) = analyze(trace).remedies
    assert fix.action == "lower --kv_cache_free_gpu_memory_fraction"
    assert fix.value is None
    assert "lacked 402.00 MiB" in fix.detail
    assert "weights and buffers leave free" in fix.detail
