"""Bytes of KV cache per request, and where that figure comes from.

A request holding ``N`` stored tokens occupies whole blocks: ``ceil(N / block_size)`` blocks of
``bytes_per_block`` each (per GPU: every tensor-parallel worker holds its share of each block).
Bytes per block come from one of two places, and the findings say which:

* the model architecture (``oomtrace.budget.kv_spec``, from ``--config config.json``), which knows
  sliding windows, MLA and recurrent state: it plugs in through :class:`SequenceBytes`;
* the engine's own statements in ``manifest.engine_config``: the bytes of one block summed over
  its KV cache groups (``kv_bytes_per_block``, from the vLLM plugin inside the engine), else the
  memory it set aside for the cache divided by the blocks (``available_kv_cache_bytes /
  num_gpu_blocks``) or by the token slots (``available_kv_cache_bytes / kv_cache_tokens x
  block_size``) it carved from it.

What the engine states about itself wins over defaults: the block size is the engine's own (the
plugin), else its figures (``kv_cache_tokens / num_gpu_blocks``, e.g. 5,120 tokens in 40 blocks
= 128, over a ``block_size`` argument that disagrees), else the argument, else a default.
:attr:`KVModel.sources` says where each figure came from; ``engine_config["stated_by"]`` names
the source of the keys an ingest parser took from somewhere better than the start-up lines.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Protocol

import polars as pl

from oomtrace.budget import KVSpec, kv_spec, load_architecture
from oomtrace.budget.dtypes import KV_CACHE_DTYPES, canonical_model_dtype
from oomtrace.trace import Manifest
from oomtrace.units import GiB, format_bytes

KVBasis = Literal["architecture", "engine_groups", "engine_blocks", "engine_tokens", "none"]

DEFAULT_BLOCK_SIZE = 16  # vLLM's default; SGLang's pages are one token unless stated
# vLLM prints "Available KV cache memory: %.2f GiB": the figure is rounded to 0.005 GiB.
_PRINTED_GIB_ERROR = 0.005 * GiB


class SequenceBytes(Protocol):
    """The plug point for bytes per request: ``oomtrace.budget``'s ``KVSpec`` satisfies it, and
    so does :class:`BlockBytes` (bytes per block from the engine's statements)."""

    def sequence_bytes_expr(self, tokens: pl.Expr, block_size: int) -> pl.Expr:
        """Bytes one sequence with ``tokens`` stored tokens holds, in whole blocks (Int64)."""
        ...


@dataclass(frozen=True)
class BlockBytes:
    """Uniform blocks of ``bytes_per_block`` (all layers of one block of tokens)."""

    bytes_per_block: int

    def sequence_bytes_expr(self, tokens: pl.Expr, block_size: int) -> pl.Expr:
        return blocks_expr(tokens, block_size) * self.bytes_per_block


def blocks_expr(tokens: pl.Expr, block_size: int) -> pl.Expr:
    """Whole blocks for ``tokens`` stored tokens (0 tokens hold 0 blocks)."""
    whole = tokens.round(0).cast(pl.Int64)
    return ((whole + (block_size - 1)) // block_size).cast(pl.Int64)


@dataclass(frozen=True)
class KVModel:
    """How many bytes a request's stored tokens occupy, and the pool they come from."""

    basis: KVBasis
    block_size: int
    block_size_stated: bool
    per_request: SequenceBytes | None
    bytes_per_token: float | None
    bytes_per_block: int | None
    pool_blocks: int | None
    pool_tokens: int | None
    pool_bytes: int | None
    statement: str
    notes: tuple[str, ...] = ()
    # figure -> where it came from ("block_size", "pool_blocks", "bytes_per_block")
    sources: Mapping[str, str] = field(default_factory=dict)

    @property
    def has_bytes(self) -> bool:
        return self.per_request is not None

    def blocks_expr(self, tokens: pl.Expr) -> pl.Expr:
        return blocks_expr(tokens, self.block_size)

    def bytes_expr(self, tokens: pl.Expr) -> pl.Expr:
        """Int64 bytes for a tokens expression; null when no bytes model exists."""
        if self.per_request is None:
            return pl.lit(None, dtype=pl.Int64)
        return self.per_request.sequence_bytes_expr(tokens, self.block_size).cast(pl.Int64)

    def to_json(self) -> dict[str, Any]:
        return {
            "basis": self.basis,
            "block_size": self.block_size,
            "block_size_stated": self.block_size_stated,
            "bytes_per_token": None
            if self.bytes_per_token is None
            else round(self.bytes_per_token),
            "bytes_per_block": self.bytes_per_block,
            "pool_blocks": self.pool_blocks,
            "pool_tokens": self.pool_tokens,
            "pool_bytes": self.pool_bytes,
            "statement": self.statement,
            "notes": list(self.notes),
            "sources": dict(self.sources),
        }


def _int(config: dict[str, Any], key: str) -> int | None:
    value = config.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return None
    return int(value)


def _sample_max(samples: pl.DataFrame, metric: str) -> int | None:
    values = samples.filter(pl.col("metric") == metric)["value"]
    return None if values.is_empty() else int(values.max())  # type: ignore[arg-type]


@dataclass(frozen=True)
class _Pool:
    """What the trace says about the pool, before any bytes model."""

    block_size: int
    block_size_stated: bool
    blocks: int | None
    tokens: int | None
    available: int | None
    notes: tuple[str, ...]
    sources: Mapping[str, str]


def stated_by(config: Mapping[str, Any], key: str, default: str) -> str:
    """Where ``engine_config[key]`` came from (``engine_config["stated_by"]``), else ``default``."""
    by = config.get("stated_by")
    source = by.get(key) if isinstance(by, Mapping) else None
    return source if isinstance(source, str) else default


def _block_size(config: dict[str, Any], engine: str) -> tuple[int, bool, str, tuple[str, ...]]:
    """(block size, stated, its source, notes): the engine's own, its figures, its argument, a
    default, in that order (see the module docstring)."""
    stated = _int(config, "block_size")
    own = isinstance(config.get("stated_by"), Mapping) and "block_size" in config["stated_by"]
    by = stated_by(config, "block_size", "the engine's arguments")
    tokens, blocks = _int(config, "kv_cache_tokens"), _int(config, "num_gpu_blocks")
    figures = tokens // blocks if tokens and blocks and tokens % blocks == 0 else None
    if stated is not None and (own or figures in (None, stated)):
        return stated, True, by, ()
    if figures is not None and tokens and blocks:
        source = f"the engine's figures: {tokens:,} tokens in {blocks:,} blocks"
        notes: tuple[str, ...] = ()
        if stated is not None:
            notes = (f"{by} say block size {stated}, {source} say {figures}: used {figures}",)
        return figures, True, source, notes
    default = 1 if engine == "sglang" else DEFAULT_BLOCK_SIZE
    why = "SGLang pages one token" if engine == "sglang" else "the vLLM default"
    return (
        default,
        False,
        f"assumed ({why})",
        (f"block size not stated; assumed {default} ({why})",),
    )


def _pool(manifest: Manifest, samples: pl.DataFrame) -> _Pool:
    config = manifest.engine_config
    engine = str(manifest.engine.get("name", "")).lower()
    block_size, block_stated, block_source, notes = _block_size(config, engine)
    sources = {"block_size": block_source}
    null_block = _keeps_null_block(manifest)
    blocks = _int(config, "num_gpu_blocks")
    if blocks is not None:
        sources["pool_blocks"] = stated_by(config, "num_gpu_blocks", "the engine's start-up lines")
        if null_block and blocks > 1:
            blocks -= 1
            sources["pool_blocks"] += f", {_NULL_BLOCK}"
    else:
        blocks = _sample_max(samples, "kv_blocks_total")
        if blocks is not None:
            sources["pool_blocks"] = "the engine's metrics (kv_blocks_total)"
    tokens = _int(config, "kv_cache_tokens")
    if tokens is not None and null_block and tokens > block_size:
        tokens -= block_size  # the stated size counts the null block's slots too
        sources["pool_tokens"] = f"the engine's KV cache size in tokens, {_NULL_BLOCK}"
    tokens = tokens or _sample_max(samples, "kv_tokens_total")
    if blocks is None and tokens is not None:
        blocks = tokens // block_size
        sources["pool_blocks"] = f"{tokens:,} tokens of the KV cache in blocks of {block_size}"
    if tokens is None and blocks is not None:
        tokens = blocks * block_size
    available = _int(config, "available_kv_cache_bytes")
    return _Pool(block_size, block_stated, blocks, tokens, available, notes, sources)


_NULL_BLOCK = (
    "less block 0, the null block vLLM V1 never hands to a request (its usage figure leaves it "
    "out too)"
)


def _keeps_null_block(manifest: Manifest) -> bool:
    """vLLM V1's block pool reserves its first block as a placeholder (``BlockPool.null_block``
    in ``vllm/v1/core/block_pool.py``) and reports usage over the others; V0 and other engines
    hand out every block."""
    engine = manifest.engine
    if str(engine.get("name", "")).lower() != "vllm":
        return False
    family = str(engine.get("version_family", ""))
    return family.startswith("v1") or (not family and bool(engine.get("version")))


def kv_model(
    manifest: Manifest,
    samples: pl.DataFrame,
    *,
    spec: SequenceBytes | None = None,
    spec_label: str = "architecture",
) -> KVModel:
    """The KV model of a trace: the architecture's ``spec`` when given, else the engine's
    statements, else no bytes at all (tokens and blocks only), each with its explanation."""
    pool = _pool(manifest, samples)
    engine_model = _engine_block_bytes(manifest.engine_config, pool)
    if spec is not None:
        return _architecture_model(pool, spec, spec_label, engine_model)
    if engine_model is None:
        note = (
            "no bytes per token: pass --config with the model's config.json, or give a trace "
            "whose engine log states the available KV cache memory and its blocks or tokens"
        )
        return KVModel(
            "none",
            pool.block_size,
            pool.block_size_stated,
            None,
            None,
            None,
            pool.blocks,
            pool.tokens,
            None,
            "no KV bytes model: figures are in tokens and blocks only",
            (*pool.notes, note),
            pool.sources,
        )
    per_block, basis, statement = engine_model
    notes = pool.notes
    if pool.available is not None and basis != "engine_groups":
        rounding = (
            "engines print the available KV memory rounded (vLLM and SGLang to 0.01 GiB): bytes "
            f"per block are within about ±{_PRINTED_GIB_ERROR / pool.available:.2%}"
        )
        notes += (rounding,)
    return KVModel(
        basis,
        pool.block_size,
        pool.block_size_stated,
        BlockBytes(per_block),
        per_block / pool.block_size,
        per_block,
        pool.blocks,
        pool.tokens,
        pool.blocks * per_block if pool.blocks else pool.available,
        statement,
        notes,
        {**pool.sources, "bytes_per_block": statement},
    )


def _architecture_model(
    pool: _Pool,
    spec: SequenceBytes,
    label: str,
    engine_model: tuple[int, KVBasis, str] | None,
) -> KVModel:
    per_token = getattr(spec, "kv_bytes_per_token", None)
    bytes_per_token = float(per_token) if isinstance(per_token, int | float) else None
    pool_bytes = pool.available or (
        round(pool.tokens * bytes_per_token) if pool.tokens and bytes_per_token else None
    )
    statement = f"bytes per token from the model {label}"
    notes = pool.notes
    if bytes_per_token is not None:
        statement += f": {format_bytes(round(bytes_per_token))} per token"
    if engine_model is not None and bytes_per_token:
        engine_bpt = engine_model[0] / pool.block_size
        drift = engine_bpt / bytes_per_token - 1
        implied = (
            f"the engine's statements imply {format_bytes(round(engine_bpt))} per token "
            f"({drift:+.1%} against the {label})"
        )
        notes += (implied,)
    return KVModel(
        "architecture",
        pool.block_size,
        pool.block_size_stated,
        spec,
        bytes_per_token,
        round(bytes_per_token * pool.block_size) if bytes_per_token else None,
        pool.blocks,
        pool.tokens,
        pool_bytes,
        statement,
        notes,
        {**pool.sources, "bytes_per_block": statement},
    )


def _engine_block_bytes(config: dict[str, Any], pool: _Pool) -> tuple[int, KVBasis, str] | None:
    available, block_size = pool.available, pool.block_size
    exact = _int(config, "kv_bytes_per_block")
    if exact is not None:
        by = stated_by(config, "kv_bytes_per_block", "the engine")
        text = (
            f"{by}: {format_bytes(exact)} per block of {block_size} tokens, summed over its KV "
            "cache groups"
        )
        return exact, "engine_groups", text
    if available is None:
        return None
    stated_tokens = _int(config, "kv_cache_tokens")
    blocks = _int(config, "num_gpu_blocks") or (pool.blocks if not stated_tokens else None)
    if blocks:
        per_block = round(available / blocks)
        text = (
            f"engine statements: available KV cache {format_bytes(available)} ÷ {blocks:,} "
            f"blocks = {format_bytes(per_block)} per block of {block_size} tokens"
        )
        return per_block, "engine_blocks", text
    # the memory set aside holds every slot the engine stated, the null block's too
    slots = stated_tokens or pool.tokens
    if slots:
        per_block = round(available * block_size / slots)
        text = (
            f"engine statements: available KV cache {format_bytes(available)} ÷ "
            f"{slots:,} tokens = {format_bytes(round(available / slots))} per token"
        )
        if block_size != 1:
            text += f", {format_bytes(per_block)} per block of {block_size} tokens"
        return per_block, "engine_tokens", text
    return None


def architecture_spec(
    config: Path,
    manifest: Manifest,
    *,
    kv_cache_dtype: str = "auto",
    tensor_parallel: int | None = None,
) -> tuple[KVSpec, str]:
    """The KV rule of the model in ``config`` (a ``config.json`` or its directory), per GPU, and
    a label saying where it came from. The tensor-parallel size defaults to the one the trace's
    engine stated (else 1). Raises :class:`~oomtrace.errors.ConfigError` for a config the budget
    module cannot read."""
    engine = manifest.engine_config
    stated = engine.get("tensor_parallel_size")
    tp = tensor_parallel or (stated if isinstance(stated, int) and stated > 0 else 1)
    arch = load_architecture(config)
    # The dtype the engine ran with (its start-up line, or the plugin) beats the config's
    # torch_dtype: a server started with --dtype float32 stores 4-byte KV from a bfloat16 config.
    ran = canonical_model_dtype(str(engine.get("dtype", "")))
    dtype_note = ""
    if ran is not None and ran != arch.dtype:
        by = stated_by(engine, "dtype", "the engine's start-up lines")
        dtype_note = f", dtype {ran} from {by} (config: {arch.dtype or 'not stated'})"
        arch = replace(arch, dtype=ran, dtype_source=by)
    if kv_cache_dtype == "auto":
        ran_kv = str(engine.get("kv_cache_dtype", "auto"))
        if ran_kv != "auto" and ran_kv in KV_CACHE_DTYPES:
            kv_cache_dtype = ran_kv
            by = stated_by(engine, "kv_cache_dtype", "the engine's start-up lines")
            dtype_note += f", KV cache dtype {ran_kv} from {by}"
    spec = kv_spec(arch, kv_cache_dtype=kv_cache_dtype, tensor_parallel=tp)
    label = f"architecture ({arch.name}, KV {spec.kv_dtype}, tensor parallel {tp}{dtype_note})"
    return spec, label
