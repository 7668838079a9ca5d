"""An allocator's failed device allocation that it retries: a sign of memory pressure, not a
failure. The failure, if one follows, is the framework's own out-of-memory error, read by
:mod:`.oom_text`; these lines never make an ``oom`` event.

* PyTorch's caching allocator from 2.13 logs each failed ``cudaMalloc`` before it frees its
  cache and retries (``c10/cuda/CUDACachingAllocator.cpp``, ``alloc_block``, added by
  pytorch/pytorch PR 180946 and lowered to INFO by PR 193391 after issue 193195):
  ``[rank1]:[W812 16:00:28.643448608 CUDACachingAllocator.cpp:3933] memory allocation failed with
  OOM on device 1 while trying to allocate 20971520 bytes (free: 15794176, total:
  150111977472).``: the device, the request, CUDA's free and total memory, in bytes (with
  expandable segments: ``expandable_segments: memory mapping failed with OOM on device 0 while
  trying to map 20971520 bytes (free: ..., total: ...)``; a paste may wrap it before ``while``
  or before its figures, the next line then holding the rest). An engine
  that packs the GPU (vLLM's ``gpu_memory_utilization``) prints it thousands of times at
  start-up, each allocation up to three times before it succeeds.
* TensorFlow's stream executor logs ``failed to allocate 32.00M (33554432 bytes) from device:
  CUDA_ERROR_OUT_OF_MEMORY: out of memory`` (``cuda_driver.cc``); its BFC allocator then frees
  and retries, saying so (``The caller indicates that this is not a failure``,
  https://github.com/talmolab/sleap/issues/2142); the failure is its ``ResourceExhaustedError``.

A streak of such lines on one device (no other failure or phase line between them) is one
``warning`` event at the first: how many there were, the largest request, and the least free
memory with the device's total where the lines state them (the ``requested_bytes``,
``free_bytes`` and ``total_bytes`` of the event).
"""

from __future__ import annotations

from typing import Final

import polars as pl

from oomtrace.units import format_bytes

_HEAD: Final = r"memory (?:allocation|mapping) failed with OOM on device"
_TORCH: Final = (
    _HEAD + r" (?P<t_device>\d+)\s+while trying to (?:allocate|map)\s+(?P<t_request>\d+) bytes"
    r"\s*\(free: (?P<t_free>\d+), total: (?P<t_total>\d+)\)"
)
# The rest of a warning a paste wrapped before its figures.
_REST: Final = (
    r"^\s*(?:while trying to (?:allocate|map)\s+)?(?:\d+ bytes\s*)?\(free: \d+, total: \d+\)"
)
_TF: Final = (
    r"failed to allocate [0-9.]+[KMGT]? \((?P<f_request>\d+) bytes\) from device: "
    r"CUDA_ERROR_OUT_OF_MEMORY"
)
SNIFF: Final = f"{_HEAD}|{_TF}"
LINE: Final = f"{SNIFF}|{_REST}"
_WHO: Final = {True: "PyTorch's caching allocator", False: "TensorFlow's allocator"}


def events(lines: pl.DataFrame) -> pl.DataFrame:
    """The streaks of retried allocations among ``lines`` (``ts``, ``text``, in the log's
    order; the other lines it holds break a streak) as ``warning`` events."""
    text = pl.col("text")
    wrapped = text.str.contains(_HEAD) & ~text.str.contains(_TORCH)
    whole = pl.when(wrapped & text.shift(-1).str.contains(_REST)).then(
        text + " " + text.shift(-1).str.strip_chars()
    )
    marked = lines.with_columns(
        f=whole.otherwise(text).str.extract_groups(f"(?:{_TORCH})|(?:{_TF})")
    ).unnest("f")
    retry = pl.col("t_request").is_not_null() | pl.col("f_request").is_not_null()
    marked = marked.with_columns(
        retry=retry,
        torch=pl.col("t_request").is_not_null(),
        device=pl.col("t_device").cast(pl.Int32),
        request=pl.coalesce("t_request", "f_request").cast(pl.Int64),
        free=pl.col("t_free").cast(pl.Int64),
        total=pl.col("t_total").cast(pl.Int64),
    )
    if not marked["retry"].any():
        return pl.DataFrame()
    # a new streak at every other line (but a wrapped warning's rest), and where the device
    # changes
    other = ~pl.col("retry") & ~pl.col("text").str.contains(_REST)
    streak = (other | (pl.col("device").ne_missing(pl.col("device").shift(1)))).cum_sum()
    grouped = (
        marked.with_columns(streak=streak)
        .filter(pl.col("retry"))
        .group_by("streak", maintain_order=True)
        .agg(
            pl.col("ts").first(),
            pl.col("device").first(),
            pl.col("torch").first(),
            pl.len().alias("count"),
            pl.col("request").max(),
            pl.col("free").min(),
            pl.col("total").max(),
        )
    )
    details = [
        _detail(torch, count, request, free, total)
        for torch, count, request, free, total in grouped.select(
            "torch", "count", "request", "free", "total"
        ).rows()  # one row a streak
    ]
    return grouped.select(
        "ts",
        "device",
        kind=pl.lit("warning"),
        requested_bytes="request",
        free_bytes="free",
        total_bytes="total",
        detail=pl.Series(details, dtype=pl.String),
    )


def _detail(torch: bool, count: int, request: int, free: int | None, total: int | None) -> str:
    times = "once" if count == 1 else f"{count} times"
    state = ""
    if free is not None and total is not None:
        state = f"; {format_bytes(free)} free of {format_bytes(total)}"
    return (
        f"{_WHO[torch]} could not get device memory {times} (largest request "
        f"{format_bytes(request)}{state}) and retried after freeing its cache: memory pressure, "
        "recovered unless an out-of-memory error follows"
    )
