"""Device-memory failures told by the layers under PyTorch and llama.cpp rather than by an
allocator of their own (``docs/formats/pytorch.md``, "Other allocation failures"):

* ggml's Vulkan backend (``ggml/src/ggml-vulkan/ggml-vulkan.cpp``, ``ggml_vk_create_buffer``):
  ``ggml_vulkan: Device memory allocation of size N failed.`` (N in bytes), then the driver's
  ``vk::Device::allocateMemory: ErrorOutOfDeviceMemory``. The first line states the failure and
  its size; the second repeats it and is not read. The backend names no device index there.
* Apple's Metal (ggml's ``ggml-metal``, which llama.cpp, Ollama and koboldcpp run): the command
  buffer's status is ``kIOGPUCommandBufferCallbackErrorOutOfMemory`` ("Insufficient Memory"),
  printed for every failed buffer: a failure without a size or a device.
* cudaMalloc's error 2 as Caffe2 (``CAFFE_ENFORCE``), TensorRT (its default allocator) and
  torch_memory_saver (SGLang's and verl's memory saver, ``cudaError error: 2 (out of memory)
  file=csrc/core.cpp func=resume``, fzyzcjy/torch_memory_saver issue 99) report it, with no size.
* TensorRT's error-code form (``Error Code 2: OutOfMemory (...)``) and llama.cpp's loader
  (``unable to allocate CUDA2 buffer``: the device from the backend's name), with no size.
* NCCL (``src/include/alloc.h``, ``checks.h``): ``NCCL WARN Cuda failure 'out of memory'``
  (``Cuda failure 2 'out of memory'`` in later releases; the sentence is ``oom_text.NCCL_OOM``)
  behind NCCL's prefix ``host:pid:tid [cudaDev]``, whose bracket is the failing device; where the
  allocation was NCCL's own it goes on ``Failed to CUDA calloc N bytes`` (a blank line may come
  between), the request.
"""

from __future__ import annotations

from typing import Final

import polars as pl

VULKAN: Final = r"Device memory allocation of size (\d+) failed"
METAL: Final = r"kIOGPUCommandBufferCallbackErrorOutOfMemory"
# NCCL's line prefix (``host:pid:tid [cudaDev] ``): the device the failure happened on.
NCCL_DEVICE: Final = r"^\S+:\d+:\d+ \[(\d+)\] "
NCCL_CALLOC: Final = r"NCCL WARN Failed to CUDA calloc (\d+) bytes"
# cudaErrorMemoryAllocation (2) as Caffe2's CAFFE_ENFORCE reports it ("error == cudaSuccess. 2 vs
# 0. Error at: FILE:LINE: out of memory") and as TensorRT's default allocator does ("Cuda Error in
# nvinfer1::internal::DefaultAllocator::allocate: 2 (out of memory)") and torch_memory_saver
# ("[torch_memory_saver.cpp] cudaError error: 2 (out of memory)  file=csrc/core.cpp ...").
CUDA_ERROR_2: Final = (
    r"error == cudaSuccess\. 2 vs 0\b|Cuda Error in [\w:]+: 2 \(out of memory\)|"
    r"\bcudaError error: 2 \(out of memory\)"
)
# TensorRT's builder and runtime logging a failed device allocation in their error-code form
# ("[TRT] [E] 2: [virtualMemoryBuffer.cpp::resizePhysical::161] Error Code 2: OutOfMemory (no
# further information)", ELS-RD/transformer-deploy issue 60).
TENSORRT: Final = r"Error Code \d+: OutOfMemory \("
# llama.cpp's model loader failing a backend buffer for the weights ("unable to allocate CUDA2
# buffer", ``src/llama-model.cpp``; relayed by Ollama as the runner's last words, ollama issue
# 9170): the device is the backend's index; a host buffer (``CUDA_Host``) is no device's.
GGML_LOAD: Final = r"unable to allocate (?:CUDA|ROCm|Vulkan|SYCL)(\d+) buffer"
# The failures without a stated size this module adds to the sizeless ones.
# (GGML_LOAD is not among them: it repeats the failure of the allocating lines above it, where
# they were printed; oom_text reads it only where they were not.)
SIZELESS: Final = f"{METAL}|{CUDA_ERROR_2}|{TENSORRT}"
# What a line must hold to be worth a closer look.
PREFILTER: Final = f"{VULKAN}|{METAL}|Failed to CUDA calloc|{TENSORRT}|{GGML_LOAD}"


def nccl_request(hits: pl.Expr) -> pl.Expr:
    """The bytes NCCL failed to allocate: the ``Failed to CUDA calloc`` line that follows each of
    ``hits`` (the lines that may hold a failure, :data:`PREFILTER` among them, so the blank line
    NCCL may print between the two is not there); null where none follows."""
    return hits.shift(-1).str.extract(NCCL_CALLOC, 1).cast(pl.Int64, strict=False)
