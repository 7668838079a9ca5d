"""Bytes of KV cache per request, and where that figure comes from.

A request holding ``N`` stored tokens occupies whole blocks: ``ceil(N / block_size)`` blocks of
``bytes_per_block`` each (per GPU: every tensor-parallel worker holds its share of each block).
Bytes per block come from one of two places, and the findings say which:

* the model architecture (``oomtrace.budget.kv_spec``, from ``--config config.json``), which knows
  sliding windows, MLA and recurrent state: it plugs in through :class:`SequenceBytes`;
* the engine's own startup statements in ``manifest.engine_config``: the memory it set aside for
  the cache divided by the blocks (``available_kv_cache_bytes / num_gpu_blocks``) or by the token
  slots (``available_kv_cache_bytes / kv_cache_tokens x block_size``) it carved from it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import polars as pl

from oomtrace.budget import KVSpec, kv_spec, load_architecture
from oomtrace.trace import Manifest
from oomtrace.units import GiB, format_bytes

KVBasis = Literal["architecture", "engine_blocks", "engine_tokens", "none"]

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


def _pool(manifest: Manifest, samples: pl.DataFrame) -> _Pool:
    config = manifest.engine_config
    stated_block = _int(config, "block_size")
    engine = str(manifest.engine.get("name", "")).lower()
    block_size = stated_block or (1 if engine == "sglang" else DEFAULT_BLOCK_SIZE)
    notes = []
    if stated_block is None:
        why = "SGLang pages one token" if engine == "sglang" else "the vLLM default"
        notes.append(f"block size not stated; assumed {block_size} ({why})")
    blocks = _int(config, "num_gpu_blocks") or _sample_max(samples, "kv_blocks_total")
    tokens = _int(config, "kv_cache_tokens") or _sample_max(samples, "kv_tokens_total")
    if blocks is None and tokens is not None:
        blocks = tokens // block_size
    if tokens is None and blocks is not None:
        tokens = blocks * block_size
    available = _int(config, "available_kv_cache_bytes")
    return _Pool(block_size, stated_block is not None, blocks, tokens, available, tuple(notes))


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
        )
    per_block, basis, statement = engine_model
    notes = pool.notes
    if pool.available is not None:
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
    )


def _engine_block_bytes(config: dict[str, Any], pool: _Pool) -> tuple[int, KVBasis, str] | None:
    available, block_size = pool.available, pool.block_size
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
    if pool.tokens:
        per_block = round(available * block_size / pool.tokens)
        text = (
            f"engine statements: available KV cache {format_bytes(available)} ÷ "
            f"{pool.tokens:,} tokens = {format_bytes(round(available / pool.tokens))} per token"
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
    stated = manifest.engine_config.get("tensor_parallel_size")
    tp = tensor_parallel or (stated if isinstance(stated, int) and stated > 0 else 1)
    arch = load_architecture(config)
    spec = kv_spec(arch, kv_cache_dtype=kv_cache_dtype, tensor_parallel=tp)
    label = f"architecture ({arch.name}, KV {spec.kv_dtype}, tensor parallel {tp})"
    return spec, label
