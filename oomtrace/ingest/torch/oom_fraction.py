"""PyTorch's ``cudaMallocAsync`` refusal: "Allocation on device d would exceed allowed memory".

With ``PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync`` PyTorch's asynchronous allocator raises
``torch.OutOfMemoryError`` with a message of six lines (``mallocAsync`` in
``c10/cuda/CUDAMallocAsyncAllocator.cpp``, ``docs/formats/pytorch.md``)::

    Allocation on device 0 would exceed allowed memory. (out of memory)
    Currently allocated     : 6.89 GiB
    Requested               : 320.00 MiB
    Device limit            : 23.69 GiB
    Free (according to CUDA): 2.94 MiB
    PyTorch limit (set by user-supplied memory fraction)
                            : 17179869184.00 GiB

It reaches logs in three shapes: as those lines; on one line with the newlines escaped (TGI's
warm-up panic quotes it as ``Generation("Allocation on device 0 ...\\nCurrently allocated ...")``);
or on one line with the newlines turned into spaces (an issue form, a UI). The limit is the memory
fraction's share of the device, or 2^64 bytes ("17179869184.00 GiB") when no fraction was set:
then the refusal was the driver's (``cudaMallocAsync`` failed), not the limit's.

:func:`stitch` joins the continuation lines onto their first line (all three shapes then read
alike); :func:`refusals` reads the figures.
"""

from __future__ import annotations

from typing import Final

import polars as pl

from oomtrace.units import bytes_expr

SIZE_TEXT: Final = r"[0-9.]+ ?(?:bytes|[KMGTP]iB)"
HEAD: Final = r"Allocation on device (\d+) would exceed allowed memory\. \(out of memory\)"
# The continuation lines, as a line holds them (the first line is matched by "out of memory").
PARTS: Final = (
    r"(?:Currently allocated|Requested|Device limit|Free \(according to CUDA\))\s*:\s*"
    + SIZE_TEXT
    + r"|PyTorch limit \(set by user-supplied memory fraction\)|^\s*:\s*"
    + SIZE_TEXT
    + r"\s*$"
)
_FIELDS: Final = {
    "allocated": r"Currently allocated\s*:\s*([0-9.]+) ?(bytes|[KMGTP]iB)",
    "requested": r"Requested\s*:\s*([0-9.]+) ?(bytes|[KMGTP]iB)",
    "total": r"Device limit\s*:\s*([0-9.]+) ?(bytes|[KMGTP]iB)",
    "free": r"Free \(according to CUDA\)\s*:\s*([0-9.]+) ?(bytes|[KMGTP]iB)",
}
_LIMIT: Final = r"memory fraction\)(?:\\n|\s)*:\s*([0-9.]+ ?(?:bytes|[KMGTP]iB))"
_MAX_PARTS: Final = 6
# Continuation lines follow their first line at once; a few seconds absorb log timestamps, and a
# log that prints no time has its lines placed a second apart in its order (the untimed reading),
# so the sixth continuation line stands six seconds after its head (ComfyUI's refusal pasted
# bare, https://github.com/Comfy-Org/ComfyUI/issues/3278, lost its limit and free memory).
_JOIN_WITHIN_S: Final = _MAX_PARTS
# 2^64 bytes, the limit PyTorch prints when no memory fraction is set, in GiB.
_NO_LIMIT_GIB: Final = 17179869184.0


def stitch(hits: pl.DataFrame) -> pl.DataFrame:
    """``hits`` (``ts``, ``_t`` in file order) with each refusal's continuation lines appended
    to its first line and removed; continuation lines with no first line before them stay."""
    is_part = pl.col("_t").str.contains(PARTS) & ~pl.col("_t").str.contains(HEAD)
    if not hits.select(is_part.any()).item():
        return hits
    # A run is a line that is not a continuation and the continuation lines right after it.
    frame = hits.with_row_index("_row").with_columns(_part=is_part)
    frame = frame.with_columns(_run=(~pl.col("_part")).cum_sum()).with_columns(
        _rank=pl.int_range(pl.len()).over("_run")
    )
    heads = frame.filter(pl.col("_t").str.contains(HEAD)).select(
        "_run", _head_row="_row", _head_ts="ts"
    )
    parts = (
        frame.filter(pl.col("_part"))
        .join(heads, on="_run", how="inner")
        .filter(
            (pl.col("_rank") <= _MAX_PARTS)
            & ((pl.col("ts") - pl.col("_head_ts")).dt.total_seconds().abs() <= _JOIN_WITHIN_S)
        )
    )
    if parts.height == 0:
        return hits
    joined = parts.group_by("_head_row").agg(_more=pl.col("_t").str.join("\n"))
    out = (
        frame.filter(~pl.col("_row").is_in(parts["_row"].implode()))
        .join(joined, left_on="_row", right_on="_head_row", how="left", maintain_order="left")
        .with_columns(
            _t=pl.when(pl.col("_more").is_not_null())
            .then(pl.concat_str(pl.col("_t"), pl.lit("\n"), pl.col("_more")))
            .otherwise(pl.col("_t"))
        )
    )
    return out.select(hits.columns)


def refusals(hits: pl.DataFrame) -> pl.DataFrame | None:
    """The refusals among ``hits``: device, requested, device total and free, PyTorch's
    allocation, and the limit in words (``_layout`` ``fraction``)."""
    found = hits.filter(pl.col("_t").str.contains(HEAD))
    if found.height == 0:
        return None
    sizes = {
        name: bytes_expr(pl.col("_t").str.extract(p, 1), pl.col("_t").str.extract(p, 2))
        for name, p in _FIELDS.items()
    }
    # 2^64 bytes does not fit an Int64: the limit is kept in words only.
    limit = pl.col("_t").str.extract(_LIMIT, 1)
    no_limit = limit.str.extract(r"([0-9.]+) ?GiB", 1).cast(pl.Float64, strict=False) >= (
        _NO_LIMIT_GIB
    )
    return found.with_columns(
        device=pl.col("_t").str.extract(HEAD, 1).cast(pl.Int32, strict=False),
        requested_bytes=sizes["requested"],
        total_bytes=sizes["total"],
        free_bytes=sizes["free"],
        allocated_bytes=sizes["allocated"],
        _layout=pl.lit("fraction"),
        _limit=pl.when(limit.is_null())
        .then(pl.lit("limit not stated"))
        .when(no_limit)
        .then(pl.lit("no memory fraction set, so CUDA itself refused"))
        .otherwise(pl.format("limit {} (the memory fraction)", limit)),
    )
