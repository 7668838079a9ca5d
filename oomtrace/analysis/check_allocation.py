"""One allocation judged by the OOM message's own figures: what it asked, what was free, what
PyTorch held. What a reader concludes from an OOM pasted without the log around it, and what the
transient check falls back on when no KV observation or request places the OOM in a step.
"""

from __future__ import annotations

import re
from typing import Any, Final

from oomtrace.analysis import evidence as ev
from oomtrace.analysis.findings import ClassCheck
from oomtrace.ingest.sglang.extract import KV_POOL_OOM, POOL_TOKENS
from oomtrace.ingest.torch.llamacpp_log import KV_FULL_DETAIL
from oomtrace.schema import EVENT_PHASES, STARTUP_PHASES
from oomtrace.units import format_bytes

# Memory in use outside PyTorch's allocator worth naming: a tenth of the device.
_OUTSIDE_SHARE = 0.1
# Free memory this far above the allocation (a share of the device) was not a shortage; below
# it, the device was all but full (the allocator needs whole segments, free memory is split).
_PLENTY = 0.05
# Under this share of the device free, the device was full when an allocation failed: what
# filled it comes first in the reason, the allocation after it.
_FULL_SHARE = 0.1
# ... and the allocation a last straw where what was already held is this many times its size.
_STRAW = 4


_POOL_TOKENS = re.compile(POOL_TOKENS)


def kv_pool_oom(event: dict[str, Any]) -> bool:
    """Whether the failure is an engine's KV pool running out of slots (SGLang's "Decode out of
    memory", llama.cpp's "failed to find free space in the KV cache"), not the device's
    allocator."""
    detail = str(event.get("detail") or "")
    return event.get("kind") == "oom" and (KV_POOL_OOM in detail or KV_FULL_DETAIL in detail)


def pool_tokens(event: dict[str, Any]) -> tuple[int, int] | None:
    """The tokens a KV-pool OOM asked for and those the pool had, where its message states
    them."""
    found = _POOL_TOKENS.search(str(event.get("detail") or "")) if kv_pool_oom(event) else None
    return (int(found.group(1)), int(found.group(2))) if found else None


def pool_not_short(event: dict[str, Any], page_size: int | None = None) -> str | None:
    """Why a KV-pool OOM was not the pool too small for the step (by its own count it had as
    many tokens as were asked), or None. SGLang counts tokens where a paged pool hands out whole
    pages: a decode step of N requests asks for "N tokens" and may need up to N pages."""
    tokens = pool_tokens(event)
    if tokens is None or tokens[1] < tokens[0]:
        return None
    asked, available = tokens
    reason = (
        f"the engine counted {available:,} tokens available in its KV pool (free and evictable) "
        f"for the {asked:,} it asked, and still failed: by its count the pool had room"
    )
    if page_size is not None and page_size > 1:
        return reason + (
            f"; with a page size of {page_size} a decode step takes a whole page for each request "
            f"that fills its last one, up to {asked:,} pages ({asked * page_size:,} tokens), "
            f"and {available:,} tokens are {available // page_size:,} pages: the pool ran out "
            "of whole pages, which the count in tokens does not show (a page-size problem)"
        )
    return reason + (
        "; with a page size above 1 (--page-size) a step takes whole pages, which these token "
        "counts do not show (a page-size problem, not a pool too small for the step)"
    )


def not_short(event: dict[str, Any], page_size: int | None = None) -> str | None:
    """Why an OOM was not for lack of device memory (more was free than it asked), or of KV pool
    slots (:func:`pool_not_short`), or None."""
    if (pool := pool_not_short(event, page_size)) is not None:
        return pool
    wanted, free = event.get("requested_bytes"), event.get("free_bytes")
    total = event.get("total_bytes")
    if event.get("kind") != "oom" or wanted is None or free is None or total is None:
        return None
    if free - wanted < _PLENTY * total:
        return None
    return (
        f"the device had {format_bytes(free)} free, more than the {format_bytes(wanted)} asked: "
        "the failure was not for lack of device memory (a per-process limit, a memory fraction "
        "or the driver refused it)"
    )


# A library's own allocation that found the device full states no size: the reader needs to
# know whose memory it was and why the engine's share did not cover it. Keyed by what the failure
# line says (the sizeless event's detail, oomtrace/ingest/torch/oom_text.py).
NCCL_WORDS: Final = "NCCL could not allocate device memory"
# TensorRT-LLM's runtime failing a CUDA allocation (``cudaMallocAsync`` in ``BufferManager::gpu``,
# or the driver's ``cuMemAlloc``): its message states no size and no phase, but what its memory
# is made of is known (https://github.com/NVIDIA/TensorRT-LLM/issues/401).
TRTLLM_RUNTIME_WORDS: Final = "TensorRT-LLM's runtime could not allocate a device buffer"
# ggml's CUDA backend (llama.cpp, Ollama) failing a call inside an operation: ``CUDA error 2 at
# .../ggml-cuda.cu:7358: out of memory`` states no size and no buffer, but what shares the device
# is known (https://github.com/ollama/ollama/issues/1236: deepseek-coder 6.7b on a 6 GB card).
GGML_WORDS: Final = "the CUDA backend of llama.cpp (ggml) ran out of device memory"
_GGML: Final = (
    GGML_WORDS + " inside an operation (the message states no size and no buffer): the device "
    "holds the layers offloaded to it (-ngl; Ollama's num_gpu), the KV cache of the context (-c; "
    "Ollama's num_ctx) and the compute buffers (-b, -ub); together they exceeded it"
)
# The leads of a sizeless failure whose engine's memory is known: each has its remedy.
SIZELESS_LEADS: Final = (TRTLLM_RUNTIME_WORDS, GGML_WORDS)
_LIBRARIES: Final = (
    (
        "TensorRT-LLM: a CUDA allocation failed",
        (
            TRTLLM_RUNTIME_WORDS + " (the message states no size): its memory is the engine's "
            "weights, its runtime buffers, sized once for the max_batch_size and max_num_tokens "
            "the engine was built with, and the KV cache, kv_cache_free_gpu_mem_fraction of what "
            "those leave free; a buffer that finds no room means these together exceed the "
            "device"
        ),
    ),
    (
        "Cuda failure",
        (
            NCCL_WORDS + " for its own buffers (communicators, P2P "
            "and proxy buffers): NCCL allocates outside PyTorch's cache and outside the "
            "engine's memory share (--gpu-memory-utilization, --mem-fraction-static), so a "
            "share that takes nearly the whole device leaves it too little; the message states "
            "no size"
        ),
    ),
    (
        "CUBLAS_STATUS_ALLOC_FAILED",
        (
            "cuBLAS could not create its handle and workspace (CUBLAS_STATUS_ALLOC_FAILED): a "
            "library's allocation outside PyTorch's cache found the device full; the message "
            "states no size"
        ),
    ),
    (
        "CUDNN_STATUS_ALLOC_FAILED",
        (
            "cuDNN could not allocate its workspace (CUDNN_STATUS_ALLOC_FAILED): a library's "
            "allocation outside PyTorch's cache found the device full; the message states no size"
        ),
    ),
    (
        "NVML_SUCCESS",
        (
            "an allocation failed for want of device memory, and PyTorch's report of it failed "
            "in NVML before any figure was printed (its process list: NVML does not answer it "
            "on a MIG slice or in some containers); the device or MIG slice was full"
        ),
    ),
)


def library_failure(event: dict[str, Any] | None) -> str | None:
    """Whose allocation a sizeless failure was (NCCL, cuBLAS, cuDNN) or why PyTorch printed no
    figures (its report failing in NVML), in words; None for any other failure."""
    if not event or event.get("kind") != "oom" or event.get("requested_bytes") is not None:
        return None
    detail = str(event.get("detail") or "")
    if "ggml-cuda" in detail:
        return _GGML
    return next((words for key, words in _LIBRARIES if detail.startswith(key)), None)


def one_allocation(event: dict[str, Any]) -> ClassCheck:
    """``transient_peak`` when one allocation asked for more than was free, with the figures the
    transient remedies read (``requested_bytes``, ``room_bytes``)."""
    wanted, free, total = (event.get(k) for k in ("requested_bytes", "free_bytes", "total_bytes"))
    if wanted is None or event.get("kind") != "oom":
        return ClassCheck("transient_peak", False, "the failure states no allocation size")
    phase = event.get("phase")
    if free is None and phase is not None and phase not in STARTUP_PHASES:
        # the lines around it place it in a step while serving: temporary memory that did not
        # fit beside what was held, even though the message states nothing free to compare
        return ClassCheck(
            "transient_peak",
            True,
            f"{EVENT_PHASES[phase]} asked for {format_bytes(wanted)} and failed (the message "
            "states no free memory): temporary memory for a step did not fit beside what was "
            "held",
            (ev.event(event),),
            (("requested_bytes", wanted), ("room_bytes", None), ("phase", phase), _engine(event)),
        )
    if free is None:
        return ClassCheck(
            "transient_peak",
            False,
            f"an allocation of {format_bytes(wanted)} failed; the message states no free memory "
            "to compare it with",
        )
    of_total = f" of {format_bytes(total)}" if total is not None else ""
    asked = f"a single allocation of {format_bytes(wanted)}"
    allocated = event.get("allocated_bytes")
    if full := _full_device(wanted, free, total, allocated, phase):
        # what filled the device first: the allocation that failed is only the one that came
        # when nothing was left, a last straw a person would not call the cause
        reason = full
    elif wanted > free:
        reason = f"{asked} asked for more than the {format_bytes(free)} free{of_total}"
    else:
        reason = (
            f"{asked} failed with only {format_bytes(free)}{of_total} free: the device was full"
        )
    if total is not None and wanted > total:
        reason += ": larger than the whole device, so no setting of others makes it fit"
    if allocated is not None and not full:
        reason += f" ({format_bytes(allocated)} allocated by PyTorch)"
    outside = _outside(event)
    if outside is not None and allocated is not None and _async_pool(event, outside, allocated):
        # cudaMallocAsync's "Currently allocated" leaves out what its CUDA pool keeps of freed
        # memory: a rest several times what tensors hold is that pool growing, not a peak
        # (https://github.com/huggingface/text-generation-inference/issues/655: 9.64 GiB
        # allocated, 3 MiB free of 39.39 GiB; the maintainers' fix was the native allocator)
        reason += (
            f"; {format_bytes(outside)} in use beyond the {format_bytes(allocated)} PyTorch had "
            "allocated: with the cudaMallocAsync allocator that is most likely its CUDA pool's "
            "cache (memory freed by tensors that the pool keeps and PyTorch does not count), "
            "else another process; a pool that grows request after request is that allocator's "
            "leak, which the native allocator (PYTORCH_CUDA_ALLOC_CONF=backend:native) avoids"
        )
    elif outside is not None:
        reason += (
            f"; {format_bytes(outside)} in use outside PyTorch's allocator (other processes or "
            "memory PyTorch does not count)"
        )
    if phase is not None and phase not in STARTUP_PHASES:
        reason = f"{EVENT_PHASES[phase]}: {reason}"
    return ClassCheck(
        "transient_peak",
        True,
        reason,
        (ev.event(event),),
        (("requested_bytes", wanted), ("room_bytes", free), ("phase", phase), _engine(event)),
    )


def _full_device(
    wanted: int, free: int, total: int | None, allocated: int | None, phase: str | None = None
) -> str | None:
    """The reason of an allocation that failed on a device already full (under
    :data:`_FULL_SHARE` of it free), what filled it first; None where the device was not full
    or the allocation is a large share of what was held (:data:`_STRAW`). An engine fills the
    device by design (vLLM and SGLang size their KV pool to a share of it), so the question is
    the headroom it left, not the allocation that came last (vllm#29360: 666 MiB asked with
    146 MiB of 95 GiB free)."""
    if total is None or wanted <= free or free >= _FULL_SHARE * total:
        return None
    if wanted * _STRAW > total - free:  # a large share of what was held: the step itself
        return None
    held = f"{format_bytes(total - free)} of {format_bytes(total)} in use"
    if allocated is not None:
        held += f" ({format_bytes(allocated)} allocated by PyTorch)"
    step = "a step's temporary memory (such as a long prompt's prefill activations or logits)"
    smaller = "a smaller step"
    if phase == "mm_encode":
        # the vision encoder's activations grow with the images' pixels, not with any KV or
        # batch setting (vllm#9356: its patch embedding's im2col asked 3.59 GiB)
        step = "the vision encoder's temporary memory for a request's images (it grows with pixels)"
        smaller = "fewer or smaller images"
    return (
        f"the device was full: {held}, {format_bytes(free)} free; a temporary allocation of "
        f"{format_bytes(wanted)} did not fit in the headroom left: {step}, the last straw; what "
        "filled the device is the engine's own share (weights, KV cache) by design, so the fix "
        f"is more headroom or {smaller}"
    )


def _engine(event: dict[str, Any]) -> tuple[str, str | None]:
    """The engine whose settings bound the failed step, where the event's own words name one."""
    llama = str(event.get("detail") or "").startswith("llama.cpp")
    return ("engine", "llama.cpp" if llama else None)


def _async_pool(event: dict[str, Any], outside: int, allocated: int) -> bool:
    """Whether the rest of a cudaMallocAsync refusal is its pool grown past what is in use."""
    refusal = str(event.get("detail") or "").startswith("PyTorch cudaMallocAsync refusal")
    return refusal and outside > allocated


def held_outside(event: dict[str, Any]) -> int | None:
    """In use less what PyTorch holds (allocated, and reserved but unallocated): memory outside
    this process's PyTorch allocator, where the message states no process's own use (which would
    account for it); None where a figure is missing."""
    total, free = event.get("total_bytes"), event.get("free_bytes")
    allocated = event.get("allocated_bytes")
    if total is None or free is None or allocated is None or event.get("process_bytes"):
        return None
    return int(total - free - allocated - (event.get("reserved_unallocated_bytes") or 0))


def _outside(event: dict[str, Any]) -> int | None:
    """:func:`held_outside` where it is a tenth of the device or more."""
    outside = held_outside(event)
    if outside is None or outside < _OUTSIDE_SHARE * event["total_bytes"]:
        return None
    return outside


def stated_fragmentation(oom: dict[str, Any], capacity: int | None) -> ClassCheck | None:
    """``fragmentation`` from the OOM's own figures: the allocator held, reserved but
    unallocated, at least the allocation that failed (and 2 % of the device); None when the
    message states no reserved-but-unallocated memory."""
    slack, wanted = oom.get("reserved_unallocated_bytes"), oom.get("requested_bytes")
    if slack is None:
        return None
    floor = 0.02 * (capacity or oom.get("total_bytes") or 0)
    if wanted is not None and slack >= wanted and slack >= floor:
        return ClassCheck(
            "fragmentation",
            True,
            f"the allocator held {format_bytes(slack)} reserved but unallocated, more than the "
            f"{format_bytes(wanted)} it failed to allocate: the free cache was fragmented",
            (ev.event(oom),),
            (("slack_bytes", slack), ("requested_bytes", wanted)),
        )
    return ClassCheck(
        "fragmentation",
        False,
        f"reserved but unallocated at the OOM ({format_bytes(slack)}) was below the failed "
        "allocation",
        (ev.event(oom),),
    )
