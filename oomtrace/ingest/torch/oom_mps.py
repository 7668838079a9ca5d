"""PyTorch's Apple-silicon (MPS) allocator refusal.

``MPSHeapAllocatorImpl::malloc`` (``aten/src/ATen/mps/MPSAllocator.mm``) raises, when a buffer
would pass the high watermark::

    MPS backend out of memory (MPS allocated: 9.57 GiB, other allocations: 17.35 GiB, max
    allowed: 27.20 GiB). Tried to allocate 292.50 MiB on private pool. Use
    PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 to disable upper limit for memory allocations ...

There is no device index (one GPU) and no capacity: "max allowed" is the watermark, a share of
the unified memory, so it goes to the event's ``detail``, never to ``total_bytes``. Builds before
PyTorch 2.3 print the sizes with ``format_size`` of ``MPSAllocator.h``, which divides by 1024 but
writes ``KB``/``MB``/``GB``: those units are binary here (``docs/formats/pytorch.md``, "MPS").
"""

from __future__ import annotations

from typing import Final

import polars as pl

from oomtrace.units import bytes_beyond_range, bytes_expr

_SIZE: Final = r"([0-9.]+) ?(bytes|[KMGT]i?B)"
HEAD: Final = r"MPS backend out of memory \(MPS allocated: "
_MESSAGE: Final = (
    HEAD
    + _SIZE
    + r", other allocations: "
    + _SIZE
    + r", max allowed: "
    + _SIZE
    + r"\)\. Tried to allocate "
    + _SIZE
    + r" on (\w+) pool"
)
_NAMES: Final = [
    "alloc_n", "alloc_u", "other_n", "other_u", "allowed_n", "allowed_u", "req_n", "req_u", "pool",
]  # fmt: skip


def refusals(hits: pl.DataFrame) -> pl.DataFrame | None:
    """One row per MPS refusal among ``hits`` (``ts``, ``_t``), or None when there is none."""
    groups = pl.col("_t").str.extract_groups(_MESSAGE).struct.rename_fields(_NAMES)
    found = hits.with_columns(_g=groups).unnest("_g").filter(pl.col("req_n").is_not_null())
    if found.height == 0:
        return None

    def size(prefix: str) -> pl.Expr:
        return bytes_expr(pl.col(f"{prefix}_n"), pl.col(f"{prefix}_u"), decimal_means_binary=True)

    beyond = pl.sum_horizontal(
        bytes_beyond_range(pl.col(f"{p}_n"), pl.col(f"{p}_u"), decimal_means_binary=True)
        for p in ("alloc", "other", "allowed", "req")
    )
    return found.select(
        "ts",
        "_t",
        _layout=pl.lit("mps"),
        device=pl.lit(None, dtype=pl.Int32),
        requested_bytes=size("req"),
        allocated_bytes=size("alloc"),
        free_bytes=pl.lit(None, dtype=pl.Int64),
        _limit=pl.format(
            "MPS: {} {} allocated by other processes, {} {} allowed by the watermark; {} pool",
            "other_n",
            "other_u",
            "allowed_n",
            "allowed_u",
            "pool",
        ),
        _beyond=beyond.cast(pl.Int32),
    )
