"""FlashInfer's attention workspace overflowing: a fixed buffer, not device memory, ran out.

FlashInfer's attention kernels plan each batch into a workspace buffer the engine allocated once
at start-up (vLLM: ``VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE``, 394 MiB by default; SGLang:
``SGLANG_FLASHINFER_WORKSPACE_SIZE``, 384 MiB by default, 512 MiB for some models). The plan
carves its temporaries (``batch_prefill_tmp_v``, ``batch_prefill_tmp_s``, ...) out of that buffer
with a bump allocator, ``AlignedAllocator`` (FlashInfer's ``include/flashinfer/allocator.h``);
when a prefill batch's split-KV temporaries do not fit, it raises, whatever the device has free:

* up to mid-2025: ``Failed to allocate memory for NAME with size N and alignment A in
  AlignedAllocator`` (sglang#1405, sglang#2102, flashinfer#362);
* from flashinfer#1357 on: ``Buffer overflow when allocating memory for NAME with size N and
  alignment A, but only M bytes available in AlignedAllocator. Increase the workspace buffer
  size.`` (pie-project/pie#414, vllm#25342, vllm#40381), after FlashInfer's own head
  (``Error in function 'aligned_alloc' at .../allocator.h:49:``) and, as pasted, wrapped over
  four lines (vllm#40023).

A wrapped message is read from its head and the lines after it (:data:`PARTS` keeps them).

:func:`overflows` reads either into the rows :func:`oomtrace.ingest.torch.oom_text.extract_ooms`
makes, which give them the event kind ``workspace_overflow`` (never ``oom``): the buffer's name
and the alignment in ``detail``, the bytes asked in ``requested_bytes``, and the bytes the
workspace still had when the message states them in ``free_bytes``.
"""

from __future__ import annotations

from typing import Final

import polars as pl

from oomtrace.units import MAX_BYTES

LAYOUT: Final = "workspace"
# The whole message; the buffer's name is a C++ string FlashInfer chose (letters, digits, _).
LINE: Final = (
    r"(?:Failed to allocate memory|Buffer overflow when allocating memory) for (\w{1,64})\s+"
    r"with size (\d{1,20}) and alignment (\d{1,6})(?:,\s+but only (\d{1,20}) bytes available)?"
    r"\s+in AlignedAllocator"
)
# The lines of the message, wrapped or not (none holds the out-of-memory words): what a reader
# keeps; the whole message is read from the head and the lines after it.
PARTS: Final = (
    r"Buffer overflow when allocating memory for \w+\s*$|with size \d+ and alignment \d+,\s*$|"
    r"in AlignedAllocator"
)
# How many lines after its head a wrapped message may take.
WRAPPED: Final = 3


def overflows(hits: pl.DataFrame) -> pl.DataFrame | None:
    """The workspace overflows among ``hits`` (columns ``ts``, ``_t``, the line, and ``_ahead``,
    the line and the :data:`WRAPPED` after it), as rows of ``extract_ooms``' layouts
    (``_layout`` ``workspace``); None where there is none."""
    names = ["_buffer", "_asked", "_alignment", "_left"]
    head = pl.col("_t").str.contains(r"allocat(?:e|ing) memory for \w")
    groups = (
        pl.when(head).then(pl.col("_ahead").str.extract_groups(LINE)).struct.rename_fields(names)
    )
    found = hits.with_columns(_g=groups).unnest("_g").filter(pl.col("_asked").is_not_null())
    if found.height == 0:
        return None
    asked = pl.col("_asked").cast(pl.Int64, strict=False)
    left = pl.col("_left").cast(pl.Int64, strict=False)
    beyond = (asked.is_null() | (asked > MAX_BYTES)).cast(pl.Int32) + (
        pl.col("_left").is_not_null() & (left.is_null() | (left > MAX_BYTES))
    ).cast(pl.Int32)
    return found.with_columns(
        _layout=pl.lit(LAYOUT),
        device=pl.lit(None, dtype=pl.Int32),
        requested_bytes=pl.when(asked <= MAX_BYTES).then(asked),
        free_bytes=pl.when(left <= MAX_BYTES).then(left),
        _beyond=beyond,
    ).drop("_asked", "_left")


def detail() -> pl.Expr:
    """What an overflow's ``detail`` says: the buffer and its alignment, as printed."""
    return pl.format(
        "FlashInfer attention workspace overflow: {} (alignment {} bytes) did not fit in the "
        "fixed workspace buffer",
        pl.col("_buffer"),
        pl.col("_alignment"),
    )
