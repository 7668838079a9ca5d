"""TensorRT-LLM's own lines (alone, under Triton's ``tensorrtllm_backend``, or under
``trtllm-serve``), read by the ``pytorch-log`` parser beside the out-of-memory message: the KV
pool the runtime allocated, its refusal of a pool too small for one sequence, and its two ways of
running out of device memory (``docs/formats/pytorch.md``, "TensorRT-LLM").

* The C++ runtime tags its lines ``[TensorRT-LLM][INFO]`` (``WARNING``, ``ERROR``, ``DEBUG``,
  ``VERBOSE``), the Python layer of ``trtllm-serve`` ``[TRT-LLM] [I]`` (``[W]``, ``[E]``, and
  ``[RANK n]`` between under MPI). Neither prints a time of day on the C++ lines; Triton's own
  lines are glog's (``E1103 02:59:01.152656 81041 backend_model.cc:553]``: no year).
* The KV pool, in three wordings: ``[MemUsageChange] Allocated 78.30 GiB for max tokens in paged
  KV cache (3731744).`` (``batch_manager/kvCacheManager.cpp`` from 0.10: the size printed as
  ``bytes / (1 << 30)``, then the pool's tokens), ``Max tokens in paged KV cache: 117760.
  Allocating 54022635520 bytes.`` (0.8 and 0.9) and ``Allocate 956301312 bytes for k/v cache.``
  then ``Using 29184 total tokens in paged KV cache, and 272 blocks per sequence`` (0.7; 0.5
  printed ``Using 10718 tokens in paged KV cache.``).
  They become ``available_kv_cache_bytes`` and ``kv_cache_tokens``. Every rank prints its own
  (the same figures); the PyTorch backend states a small pool for its estimation run before the
  real one, and an encoder-decoder model a second, smaller pool for its cross-attention: the
  largest pool stated is taken (a note says there were several).
* ``trtllm-serve``'s ``max_seq_len=N, max_num_requests=N, max_num_tokens=N`` line (its
  ``[TRT-LLM] [I]`` summary once the pool is sized) gives ``max_model_len``, ``max_num_seqs`` and
  ``max_num_batched_tokens``.
* ``maxTokensInPagedKvCache (29184) must be large enough to process at least 1 sequence to
  completion`` is the runtime refusing to start: a ``startup_kv_insufficient`` event.
* Out of device memory: a CUDA call's failure, ``[TensorRT-LLM][ERROR] CUDA runtime error in
  ::cudaMallocAsync(ptr, n, mCudaStream->get()): out of memory (/app/tensorrt_llm/cpp/
  tensorrt_llm/runtime/tllmBuffers.h:112)`` (no size; Triton relays it inside its "Failed to
  create instance" or "loading failed" line, and a terminal may wrap it anywhere, so the tail
  with the runtime's source file is what is matched), and the PyTorch backend's executor
  refusing to be created, ``Executor creation failed due to insufficient GPU memory.`` followed
  by the component it could not create (``The following component could not be created: KV
  cache``) and ``Total GPU memory (GiB): 140.06`` / ``Free GPU memory before component creation
  attempt (GiB): 108.86``. Both are ``oom`` events; the second with the device's total and free
  memory and, where the component is the KV cache, the phase ``kv_cache_init``. (``[TRT-LLM]
  [W] insufficient GPU memory for CUDA graphs, capturing fewer batch sizes`` is a warning, not
  a failure, and is not read.)
"""

from __future__ import annotations

from typing import Any, Final

import polars as pl

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.ingest.torch.stated import first_stated
from oomtrace.units import GiB

_POOL_GIB: Final = r"Allocated ([0-9.]+) GiB for max tokens in paged KV cache \((\d+)\)"
_POOL_09: Final = r"Max tokens in paged KV cache: (\d+)\. Allocating (\d+) bytes"
_POOL_07_BYTES: Final = r"Allocate (\d+) bytes for k/v cache"
# (0.5 said "Using 10718 tokens in paged KV cache.", NVIDIA/TensorRT-LLM#224)
_POOL_07_TOKENS: Final = r"Using (\d+) (?:total )?tokens in paged KV cache"
_SERVE_LIMITS: Final = r"\bmax_seq_len=(\d+), max_num_requests=(\d+), max_num_tokens=(\d+)"
REFUSAL: Final = (
    r"maxTokensInPagedKvCache(?: \((\d+)\))? must be large enough to process at least 1 sequence"
)
_CUDA_OOM: Final = r"out of memory \(\S*tensorrt_llm\S*:\d+\)"
# Triton creating the model instance (the runtime's buffers and KV cache), on the failure's line
_CREATION: Final = r"Failed to create instance: |when creating modelInstanceState: |loading failed"
_EXECUTOR_OOM: Final = r"Executor creation failed due to insufficient GPU memory"
_COMPONENT: Final = r"^The following component could not be created: (.+?)\s*$"
_TOTAL: Final = r"^Total GPU memory \(GiB\): ([0-9.]+)"
_FREE: Final = r"^Free GPU memory before component creation attempt \(GiB\): ([0-9.]+)"
# How far after the executor's refusal its account (component, total, free) is looked for.
_ACCOUNT_LINES: Final = 6

# Every TensorRT-LLM line this module reads (the executor's account included).
LINES: Final = "|".join(
    f"(?:{p})"
    for p in (
        _POOL_GIB,
        _POOL_09,
        _POOL_07_BYTES,
        _POOL_07_TOKENS,
        _SERVE_LIMITS,
        REFUSAL,
        _CUDA_OOM,
        _CREATION,
        _EXECUTOR_OOM,
        _COMPONENT,
        _TOTAL,
        _FREE,
    )
)
# What marks a TensorRT-LLM log whose failure (if any) is beyond the head read for sniffing.
MARKERS: Final = (
    r"\[TensorRT-LLM\]\[(?:INFO|WARNING|ERROR|DEBUG|VERBOSE)\]|\[TRT-LLM\] (?:\[RANK \d+\] )?"
    r"\[[IWE]\] |for max tokens in paged KV cache|" + REFUSAL + "|" + _EXECUTOR_OOM
)


def engine_config(lines: pl.Series, diag: SourceDiagnostics) -> dict[str, Any]:
    """The KV pool's bytes and tokens (the largest pool stated: see :func:`_pool`) and
    ``trtllm-serve``'s limits as it last states them (it states them again once the real pool is
    sized, ``max_seq_len`` cut to what the pool holds)."""
    config: dict[str, Any] = _pool(lines, diag)
    if not config:
        for key, pattern in (
            ("available_kv_cache_bytes", _POOL_07_BYTES),
            ("kv_cache_tokens", _POOL_07_TOKENS),
        ):
            value = first_stated(lines, (pattern,), key, diag, pl.Int64())
            if value is not None:
                config[key] = value
    limits = lines.str.extract_groups(_SERVE_LIMITS).struct.unnest().drop_nulls()
    if limits.height:
        last = limits.cast(pl.Int64).row(-1)
        keys = ("max_model_len", "max_num_seqs", "max_num_batched_tokens")
        config.update(zip(keys, last, strict=True))
    return config


def _pool(lines: pl.Series, diag: SourceDiagnostics) -> dict[str, Any]:
    """The largest KV pool the 0.8+ wordings state, in bytes and tokens. The PyTorch backend
    first allocates a small pool for its estimation run, then the real one (TensorRT-LLM#3092:
    "Initial KV cache (temporary for KV cache size estimation)" in its account of a failure), and
    an encoder-decoder model's second pool is its smaller cross-attention cache: the largest is
    the pool the requests share."""
    gib = lines.str.extract_groups(_POOL_GIB).struct.rename_fields(["size", "tokens"])
    old = lines.str.extract_groups(_POOL_09).struct.rename_fields(["tokens", "bytes"])
    pools = pl.concat(
        [
            gib.struct.unnest().select(
                bytes=(pl.col("size").cast(pl.Float64, strict=False) * GiB).round(0),
                tokens=pl.col("tokens").cast(pl.Int64, strict=False),
            ),
            old.struct.unnest().select(
                bytes=pl.col("bytes").cast(pl.Float64, strict=False),
                tokens=pl.col("tokens").cast(pl.Int64, strict=False),
            ),
        ]
    ).drop_nulls()
    if pools.height == 0:
        return {}
    distinct = pools.unique(maintain_order=True)
    if distinct.height > 1:
        diag.note(
            f"TensorRT-LLM states {distinct.height} KV pools (an estimation pool, a second cache "
            "or several starts); kept the largest"
        )
    largest = pools.sort("bytes", descending=True, maintain_order=True).row(0, named=True)
    return {
        "available_kv_cache_bytes": int(largest["bytes"]),
        "kv_cache_tokens": int(largest["tokens"]),
    }


def events(lines: pl.DataFrame) -> pl.DataFrame:
    """The runtime's refusals and out-of-memory failures among ``lines`` (``ts``, ``text``, in
    file order), each once (every rank prints its own)."""
    text = pl.col("text")
    refusals = lines.filter(text.str.contains(REFUSAL)).select(
        "ts",
        kind=pl.lit("startup_kv_insufficient"),
        detail=pl.lit("TensorRT-LLM: the paged KV cache cannot hold one sequence to completion")
        + pl.format(" (maxTokensInPagedKvCache {})", text.str.extract(REFUSAL, 1)).fill_null(""),
    )
    # Triton names the model instance's creation on the failure's line, which a terminal may
    # wrap once (TensorRT-LLM#260): the runtime's buffers and KV cache, at start-up
    creating = text.str.contains(_CREATION) | text.shift(1).str.contains(_CREATION).fill_null(False)
    cuda = (
        lines.with_columns(_creating=creating)
        .filter(text.str.contains(_CUDA_OOM))
        .select(
            "ts",
            kind=pl.lit("oom"),
            detail=pl.lit("TensorRT-LLM: a CUDA allocation failed, out of memory (no size stated)"),
            phase=pl.when("_creating").then(pl.lit("engine_create")),
        )
    )
    ahead = [text.shift(-i) for i in range(1, _ACCOUNT_LINES + 1)]
    executor = lines.filter(text.str.contains(_EXECUTOR_OOM).fill_null(value=False))
    if executor.height:
        account = lines.with_columns(
            component=pl.coalesce(a.str.extract(_COMPONENT, 1) for a in ahead),
            total=pl.coalesce(a.str.extract(_TOTAL, 1) for a in ahead).cast(pl.Float64),
            free=pl.coalesce(a.str.extract(_FREE, 1) for a in ahead).cast(pl.Float64),
        ).filter(text.str.contains(_EXECUTOR_OOM))
        executor = account.select(
            "ts",
            kind=pl.lit("oom"),
            total_bytes=(pl.col("total") * GiB).round(0).cast(pl.Int64),
            free_bytes=(pl.col("free") * GiB).round(0).cast(pl.Int64),
            detail=pl.lit("TensorRT-LLM: the executor could not be created for lack of GPU memory")
            + pl.format(" (component: {})", "component").fill_null(""),
            phase=pl.when(pl.col("component").str.to_lowercase() == "kv cache")
            .then(pl.lit("kv_cache_init"))
            .otherwise(None),
        )
    found = [f for f in (refusals, cuda, executor) if f.height]
    if not found:
        return pl.DataFrame()
    both = pl.concat(found, how="diagonal_relaxed")
    return both.unique(subset=["kind", "detail"], keep="first", maintain_order=True)
