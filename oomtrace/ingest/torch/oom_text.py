"""PyTorch out-of-memory messages, in every generation, found anywhere in any log.

Shared by every log parser: give :func:`extract_ooms` the lines (already timestamped) and it
returns one ``oom`` event per failing allocation plus a ``process_used_bytes`` sample for each
process the message lists. The message layouts (``docs/formats/pytorch.md``):

* ``old``: ``CUDA out of memory. Tried to allocate A (GPU d; T total capacity; X already
  allocated; F free; [L allowed; ]R reserved in total by PyTorch)`` (torch <= 2.0; very old
  builds end ``; C cached)``; other vendors reuse it, e.g. ``NPU ... current active;``);
* ``sentences``: ``CUDA out of memory. Tried to allocate A. GPU d has a total capacity of T of
  which F is free. [Process P has X memory in use. ]...[Including non-PyTorch memory, this
  process has X memory in use. ][L allowed; ]Of the allocated memory X is allocated by PyTorch,
  [with X allocated in private pools (e.g., CUDA Graphs), ]and U is reserved by PyTorch but
  unallocated.`` (torch >= 2.1; 2.1 prints "capacty");
* ``ggml``: llama.cpp's ``ggml_backend_cuda_buffer_type_alloc_buffer: allocating A MiB on device
  d: cudaMalloc failed: out of memory`` (the requested size and device only);
* ``sizeless``: ``CUDA error: out of memory``, ``CUBLAS_STATUS_ALLOC_FAILED``,
  ``CUDNN_STATUS_ALLOC_FAILED``, ``Tried to allocate more than 1EB memory``, the 2.14
  ``preemptively rejected`` form: an ``oom`` event whose sizes are null, never 0.

The same failure is often printed several times (the worker's traceback, then the engine's
"Worker failed with error '...'" wrapper): identical messages for one device within
:data:`REPEAT_WINDOW_S` seconds count once.
"""

from __future__ import annotations

from typing import Final

import polars as pl

from oomtrace.schema import empty
from oomtrace.units import bytes_expr

REPEAT_WINDOW_S: Final = 5

_SIZE = r"([0-9.]+) ?(bytes|[KMGTP]iB)"
_DEVICE_WORD = r"(?:GPU|NPU|XPU|HPU|MPS)"

_OLD: Final = (
    r"(?:CUDA|NPU|XPU|HPU) out of memory\. Tried to allocate "
    + _SIZE
    + r" \("
    + _DEVICE_WORD
    + r" (\d+); "
    + _SIZE
    + r" total capacity; "
    + _SIZE
    + r" already allocated; (?:[0-9.]+ ?(?:bytes|[KMGTP]iB) current active; )?"
    + _SIZE
    + r" free; (?:"
    + _SIZE
    + r" allowed; )?(?:"
    + _SIZE
    + r" reserved in total by PyTorch|"
    + r"[0-9.]+ ?(?:bytes|[KMGTP]iB) cached)"
)
_OLD_NAMES: Final = [
    "req_n", "req_u", "device", "total_n", "total_u", "alloc_n", "alloc_u", "free_n", "free_u",
    "allowed_n", "allowed_u", "reserved_n", "reserved_u",
]  # fmt: skip

_NEW: Final = (
    r"out of memory\. Tried to allocate "
    + _SIZE
    + r"\. "
    + _DEVICE_WORD
    + r" (\d+) has a total capac(?:i)?ty of "
    + _SIZE
    + r" of which "
    + _SIZE
    + r" is free\."
)
_NEW_NAMES: Final = ["req_n", "req_u", "device", "total_n", "total_u", "free_n", "free_u"]
_SELF: Final = r"this process has " + _SIZE + r" memory in use"
_ALLOCATED: Final = r"Of the allocated memory " + _SIZE + r" is allocated by PyTorch"
_UNALLOCATED: Final = r"and " + _SIZE + r" is reserved by PyTorch but unallocated"
_OTHERS: Final = r"Process (\d+) has ([0-9.]+ ?(?:bytes|[KMGTP]iB)) memory in use"

_SIZELESS: Final = (
    r"CUDA error: out of memory|CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_ALLOC_FAILED|"
    r"Tried to allocate more than 1EB memory|Allocation was preemptively rejected|"
    r"(?:CUDA|XPU|NPU) out of memory"
)
_GGML: Final = r"allocating ([0-9.]+) (MiB) on device (\d+): cudaMalloc failed: out of memory"
# Cheap test that a line may hold an OOM; parsers use it to pick the lines worth keeping.
PREFILTER: Final = r"out of memory|ALLOC_FAILED|preemptively rejected"
# Any line that extract_ooms turns into an event matches this (used to count recognised lines).
OOM_SHAPES: Final = "|".join(f"(?:{p})" for p in (_OLD, _NEW, _GGML, _SIZELESS))

EVENT_COLUMNS: Final = [
    "ts", "device", "kind", "requested_bytes", "total_bytes", "free_bytes", "allocated_bytes",
    "reserved_unallocated_bytes", "process_bytes", "detail",
]  # fmt: skip


def extract_ooms(lines: pl.DataFrame, text: str = "text") -> tuple[pl.DataFrame, pl.DataFrame]:
    """OOM events and per-process samples from ``lines`` (columns ``ts`` and ``text``).

    Returns ``(events, samples)`` with canonical column names (without ``node``/``source``).
    Cost: one literal-ish scan of every line; the detailed patterns run only on the few lines
    that mention running out of memory.
    """
    hits = lines.filter(pl.col(text).str.contains(PREFILTER)).select("ts", pl.col(text).alias("_t"))
    if hits.height == 0:
        return _empty_events(), _empty_samples()
    found = [
        _sized(hits, _OLD, _OLD_NAMES, "old"),
        _sized(hits, _NEW, _NEW_NAMES, "sentences"),
        _ggml(hits),
    ]
    sized = pl.concat([f for f in found if f is not None] or [hits.clear()], how="diagonal_relaxed")
    sizeless = (
        hits.join(sized.select("_t").unique(), on="_t", how="anti")
        .filter(pl.col("_t").str.contains(_SIZELESS))
        .with_columns(
            _layout=pl.lit("sizeless"),
            _what=pl.col("_t").str.extract("(" + _SIZELESS + ")", 1),
            device=pl.col("_t")
            .str.extract(r"(?:GPU|device) (\d+)", 1)
            .cast(pl.Int32, strict=False),
        )
    )
    events = pl.concat([sized, sizeless], how="diagonal_relaxed")
    events = _dedupe(events)
    samples = _process_samples(events)
    detail = (
        pl.when(pl.col("_layout") == "sizeless")
        .then(pl.format("{} (no size stated)", pl.col("_what")))
        .when(pl.col("_layout") == "ggml")
        .then(pl.lit("llama.cpp (ggml) cudaMalloc failed: out of memory"))
        .otherwise(pl.format("PyTorch OOM message ({} layout)", pl.col("_layout")))
    )
    events = events.with_columns(kind=pl.lit("oom"), detail=detail)
    events = events.with_columns(
        pl.lit(None).alias(column) for column in EVENT_COLUMNS if column not in events.columns
    )
    return events.select(EVENT_COLUMNS).sort("ts"), samples


def _sized(hits: pl.DataFrame, pattern: str, names: list[str], layout: str) -> pl.DataFrame | None:
    groups = pl.col("_t").str.extract_groups(pattern).struct.rename_fields(names)
    found = hits.with_columns(_g=groups).unnest("_g").filter(pl.col("req_n").is_not_null())
    if found.height == 0:
        return None

    def size(prefix: str) -> pl.Expr:
        return bytes_expr(pl.col(f"{prefix}_n"), pl.col(f"{prefix}_u"))

    if layout == "old":
        found = found.with_columns(
            allocated_bytes=size("alloc"),
            reserved_unallocated_bytes=(size("reserved") - size("alloc")).clip(lower_bound=0),
            total_bytes=pl.coalesce(size("allowed"), size("total")),
        )
    else:
        extra = [
            pl.col("_t").str.extract_groups(p).struct.rename_fields([f"{n}_n", f"{n}_u"])
            for p, n in ((_SELF, "self"), (_ALLOCATED, "alloc"), (_UNALLOCATED, "unalloc"))
        ]
        found = (
            found.with_columns(_s=extra[0], _a=extra[1], _u=extra[2])
            .unnest("_s", "_a", "_u")
            .with_columns(
                total_bytes=size("total"),
                process_bytes=size("self"),
                allocated_bytes=size("alloc"),
                reserved_unallocated_bytes=size("unalloc"),
                _others=pl.col("_t").str.extract_all(_OTHERS),
            )
        )
    return found.with_columns(
        _layout=pl.lit(layout),
        device=pl.col("device").cast(pl.Int32, strict=False),
        requested_bytes=size("req"),
        free_bytes=size("free"),
    ).select(~pl.selectors.matches(r"_(n|u)$"))


def _ggml(hits: pl.DataFrame) -> pl.DataFrame | None:
    groups = pl.col("_t").str.extract_groups(_GGML).struct.rename_fields(["n", "u", "d"])
    found = hits.with_columns(_g=groups).unnest("_g").filter(pl.col("n").is_not_null())
    if found.height == 0:
        return None
    return found.select(
        "ts",
        "_t",
        _layout=pl.lit("ggml"),
        device=pl.col("d").cast(pl.Int32, strict=False),
        requested_bytes=bytes_expr(pl.col("n"), pl.col("u")),
        free_bytes=pl.lit(None, dtype=pl.Int64),
    )


def _dedupe(events: pl.DataFrame) -> pl.DataFrame:
    """Identical failures on one device within the repeat window count once."""
    key = [c for c in ("device", "requested_bytes", "free_bytes", "_layout") if c in events.columns]
    events = events.sort("ts")
    previous = pl.col("ts").shift(1).over(key)
    gap = (pl.col("ts") - previous).dt.total_seconds()
    return events.filter(previous.is_null() | (gap > REPEAT_WINDOW_S))


def _process_samples(events: pl.DataFrame) -> pl.DataFrame:
    if "_others" not in events.columns:
        return _empty_samples()
    listed = (
        events.select("ts", "device", "_others")
        .explode("_others")
        .drop_nulls("_others")
        .with_columns(
            _g=pl.col("_others").str.extract_groups(
                r"Process (\d+) has ([0-9.]+) ?(bytes|[KMGTP]iB)"
            )
        )
        .unnest("_g")
    )
    if listed.height == 0:
        return _empty_samples()
    names = listed.columns[-3:]
    return listed.select(
        "ts",
        "device",
        pid=pl.col(names[0]).cast(pl.Int64, strict=False),
        metric=pl.lit("process_used_bytes"),
        value=bytes_expr(pl.col(names[1]), pl.col(names[2])).cast(pl.Float64),
    )


def _empty_events() -> pl.DataFrame:
    return empty("events").select(EVENT_COLUMNS)


def _empty_samples() -> pl.DataFrame:
    return empty("samples").drop("node", "source")
