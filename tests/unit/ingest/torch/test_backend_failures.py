"""Device-memory failures told by the layers under PyTorch and llama.cpp (ggml's Vulkan and Metal
backends, NCCL), and a PyTorch message that lost its device index, in the shapes public threads
show them."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from oomtrace.ingest import IngestOptions, ingest_paths
from oomtrace.trace import Trace


def _trace(tmp_path: Path, text: str) -> Trace:
    path = tmp_path / "server.log"
    path.write_text(text)
    trace = ingest_paths([path], IngestOptions())
    assert trace.manifest.sources[0].parser == "pytorch-log"
    return trace


def _ooms(tmp_path: Path, text: str) -> list[tuple[object, ...]]:
    ooms = _trace(tmp_path, text).events.filter(pl.col("kind") == "oom")
    return ooms.select("device", "requested_bytes").rows()


def test_vulkans_failed_allocation_is_the_request_in_bytes(tmp_path: Path) -> None:
    # https://github.com/ggml-org/llama.cpp/issues/15256 (RTX 2060, Vulkan build of August 2025):
    # the driver's ErrorOutOfDeviceMemory repeats the failure on the next line
    text = (
        "ggml_vulkan: Device memory allocation of size 118497280 failed.\n"
        "ggml_vulkan: vk::Device::allocateMemory: ErrorOutOfDeviceMemory\n"
        "double free or corruption (out)\n"
        "\n"
        "\tmaxMemoryAllocationSize           = 0xffe00000\n"
    )
    assert _ooms(tmp_path, text) == [(None, 118497280)]


def test_vulkans_sentence_in_an_issue_title_is_read(tmp_path: Path) -> None:
    # https://github.com/ikawrakow/ik_llama.cpp/issues/1289: only the title states the failure
    text = (
        "# Bug: Device memory allocation of size 17368219904 failed.\n"
        "\n"
        "```\n"
        "Computed blk.12.attn_kv_b.weight as 512 x 8960 and stored in buffer Vulkan0\n"
        "```\n"
    )
    assert _ooms(tmp_path, text) == [(None, 17368219904)]


def test_metals_repeated_insufficient_memory_is_one_failure(tmp_path: Path) -> None:
    # https://github.com/ollama/ollama/issues/6257: every failed command buffer says it again
    pair = (
        "error: Insufficient Memory (00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)\n"
        "ggml_metal_graph_compute: command buffer 3 failed with status 5\n"
    )
    events = _trace(tmp_path, "```\n" + pair * 4 + "error: Insufficient\n").events
    ooms = events.filter(pl.col("kind") == "oom")
    assert ooms.select("device", "requested_bytes").rows() == [(None, None)]
    assert "kIOGPUCommandBufferCallbackErrorOutOfMemory" in ooms["detail"][0]


def test_a_2026_metal_warmup_failure_keeps_the_caches_cells_and_sequences(tmp_path: Path) -> None:
    # https://github.com/mozilla-ai/llamafile/pull/881 (ggml 0.9.5): the cache line's "4/1 seqs"
    # is n_seq_max over n_stream, then the warm-up's command buffer fails
    text = (
        "llama_kv_cache:      Metal KV buffer size = 11440.00 MiB\n"
        "llama_kv_cache: size = 11440.00 MiB ( 28160 cells, 104 layers,  4/1 seqs), "
        "K (f16): 5720.00 MiB, V (f16): 5720.00 MiB\n"
        "llama_context:      Metal compute buffer size =   307.00 MiB\n"
        "common_init_from_params: warming up the model with an empty run - please wait ... "
        "(--no-warmup to disable)\n"
        "ggml_metal_synchronize: error: command buffer 0 failed with status 5\n"
        "/Users/dev/llama.cpp/ggml/src/ggml-metal/ggml-metal-context.m:235: fatal error\n"
        "error: Insufficient Memory (00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)\n"
    )
    trace = _trace(tmp_path, text)
    config = trace.manifest.engine_config
    assert (config["kv_cache_tokens"], config["max_num_seqs"]) == (28160, 4)
    assert trace.events.filter(pl.col("kind") == "oom").height == 1


def test_nccls_failed_calloc_names_its_device_and_size(tmp_path: Path) -> None:
    # https://github.com/NVIDIA/nccl/issues/1235: NCCL_DEBUG output, a blank line between the
    # failure and the allocation it was; the bracket is the CUDA device
    text = (
        "ng30903:3063025:3066048 [0] NCCL INFO transport.cc:33 -> 3\n"
        "\n"
        "ng30903:3063028:3066152 [3] include/alloc.h:178 NCCL WARN Cuda failure 'out of memory'\n"
        "\n"
        "ng30903:3063028:3066152 [3] include/alloc.h:185 NCCL WARN Failed to CUDA calloc "
        "6291456 bytes\n"
        "ng30903:3063028:3066152 [3] NCCL INFO transport/p2p.cc:204 -> 1\n"
    )
    assert _ooms(tmp_path, text) == [(3, 6291456)]


def test_nccls_repeated_enqueue_failure_is_one_sizeless_failure(tmp_path: Path) -> None:
    # https://github.com/NVIDIA/TensorRT-LLM/issues/1670 (8x V100 under Triton)
    pair = (
        "VM-0-16-ubuntu:392:494 [2] enqueue.cc:43 NCCL WARN Cuda failure 'out of memory'\n"
        "\n"
        "VM-0-16-ubuntu:392:494 [2] enqueue.cc:54 NCCL WARN Cuda failure 'invalid resource "
        "handle'\n"
        "\n"
    )
    assert _ooms(tmp_path, pair * 3 + "VM-0\n") == [(2, None)]


def test_a_message_without_a_device_index_keeps_its_figures(tmp_path: Path) -> None:
    # https://github.com/huggingface/text-generation-inference/issues/2246: "GPU  has" (TGI 2.x)
    text = (
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB. GPU  has a "
        "total capacity of 44.53 GiB of which 1.94 MiB is free. Process 123210 has 44.52 GiB "
        "memory in use. Of the allocated memory 40.92 GiB is allocated by PyTorch, and 754.08 MiB "
        "is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try "
        "setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
        "documentation for Memory Management \n"
    )
    ooms = _trace(tmp_path, text).events.filter(pl.col("kind") == "oom")
    gib, mib = 2**30, 2**20
    assert ooms.select("device", "total_bytes", "allocated_bytes").rows() == [
        (None, round(44.53 * gib), round(40.92 * gib))
    ]
    assert ooms["free_bytes"][0] == round(1.94 * mib)


def test_caffe2s_enforce_on_cuda_error_2_is_an_out_of_memory(tmp_path: Path) -> None:
    # https://github.com/facebookresearch/Detectron/issues/560 (Caffe2, 2018)
    text = (
        '  File "/usr/local/lib/python2.7/dist-packages/caffe2/python/workspace.py", line 178, '
        "in CallWithExceptionIntercept\n"
        "    return func(*args, **kwargs)\n"
        "RuntimeError: [enforce fail at event_gpu.cc:17] error == cudaSuccess. 2 vs 0. Error at: "
        "/home/sd/pytorch/caffe2/core/event_gpu.cc:17: out of memory \n"
    )
    assert _ooms(tmp_path, text) == [(None, None)]


def test_tensorrts_allocator_error_2_in_a_title_is_an_out_of_memory(tmp_path: Path) -> None:
    # https://github.com/NVIDIA/TensorRT/issues/948 (Windows)
    text = (
        "# [E] [TRT] C:\\source\\rtSafe\\safeRuntime.cpp (25) - Cuda Error in "
        "nvinfer1::internal::DefaultAllocator::allocate: 2 (out of memory)\n"
    )
    assert _ooms(tmp_path, text) == [(None, None)]


def test_an_npu_message_cut_in_a_title_keeps_its_request_and_device(tmp_path: Path) -> None:
    # https://github.com/vllm-project/vllm-omni/issues/1199: torch_npu's layout cut mid-way
    text = (
        "# [Bug]: RuntimeError: NPU out of memory. Tried to allocate 52.00 MiB (NPU 0; 60.96 GiB "
        "total capacity; 59.36 GiB already allocated;\n"
        "\n"
        "### Your current environment\n"
    )
    assert _ooms(tmp_path, text) == [(0, 52 * 2**20)]


def test_a_2025_kv_slot_failure_that_kobold_gave_up_on_is_kv_exhaustion(tmp_path: Path) -> None:
    # https://github.com/LostRuins/koboldcpp/issues/1535 (1.91): the KV line glued to kobold's
    # progress text, then its own "Failed to predict"
    text = (
        "[Context Shifting: Erased 143 tokens at position 1379]\n"
        "Processing Prompt [BLAS] (454 / 454 tokens)update: applying K-shift\n"
        "decode: failed to find KV cache slot for ubatch of size 454\n"
        "llama_decode: failed to decode, ret = 1\n"
        "\n"
        "Failed to predict at token position 15480! Check your context buffer sizes!\n"
    )
    ooms = _trace(tmp_path, text).events.filter(pl.col("kind") == "oom")
    assert ooms["detail"].to_list()[0].startswith("llama.cpp found no free space in the KV cache")
    assert ooms.height == 1


def test_kobolds_gave_up_after_metal_failed_is_no_kv_exhaustion(tmp_path: Path) -> None:
    # https://github.com/LostRuins/koboldcpp/issues/1371 (M4 Mac mini): the decode failed on Metal
    text = (
        "error: Insufficient Memory (00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)\n"
        "llama_graph_compute: ggml_backend_sched_graph_compute_async failed with error -1\n"
        "llama_decode: failed to decode, ret = -3\n"
        "\n"
        "Failed to predict at 43! Check your context buffer sizes!\n"
    )
    ooms = _trace(tmp_path, text).events.filter(pl.col("kind") == "oom")
    assert ooms.height == 1
    assert "kIOGPUCommandBufferCallbackErrorOutOfMemory" in ooms["detail"][0]
