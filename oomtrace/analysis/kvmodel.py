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

from oomtrace.budget import kv_spec, load_architecture
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


def kv_model(
    manifest: Manifest,
    samples: pl.DataFrame,
    *,
    spec: SequenceBytes | None = None,
    spec_label: str = "architecture",
) -> KVModel:
    """The KV model of a trace: the architecture's ``spec`` when given, else the engine's
    statements, else no bytes at all (tokens and blocks only), each with its explanation."""
    config = manifest.engine_config
    notes: list[str] = []
    stated_block = _int(config, "block_size")
    engine = str(manifest.engine.get("name", "")).lower()
    block_size = stated_block or (1 if engine == "sglang" else DEFAULT_BLOCK_SIZE)
    if stated_block is None:
        notes.append(
            f"block size not stated; assumed {block_size} "
            f"({'SGLang pages one token' if engine == 'sglang' else 'the vLLM default'})"
        )
    pool_blocks = _int(config, "num_gpu_blocks") or _sample_max(samples, "kv_blocks_total")
    pool_tokens = _int(config, "kv_cache_tokens") or _sample_max(samples, "kv_tokens_total")
    if pool_blocks is None and pool_tokens is not None:
        pool_blocks = pool_tokens // block_size
    if pool_tokens is None and pool_blocks is not None:
        pool_tokens = pool_blocks * block_size
    available = _int(config, "available_kv_cache_bytes")
    engine_model = _engine_block_bytes(config, available, block_size, pool_blocks, pool_tokens)

    if spec is not None:
        per_token = getattr(spec, "kv_bytes_per_token", None)
        bytes_per_token = float(per_token) if isinstance(per_token, int | float) else None
        pool_bytes = available or (
            round(pool_tokens * bytes_per_token) if pool_tokens and bytes_per_token else None
        )
        statement = f"bytes per token from the model {spec_label}"
        if bytes_per_token is not None:
            statement += f": {format_bytes(round(bytes_per_token))} per token"
        if engine_model is not None and bytes_per_token:
            engine_bpt = engine_model[0] / block_size
            drift = engine_bpt / bytes_per_token - 1
            notes.append(
                f"the engine's statements imply {format_bytes(round(engine_bpt))} per token "
                f"({drift:+.1%} against the {spec_label})"
            )
        return KVModel(
            "architecture",
            block_size,
            stated_block is not None,
            spec,
            bytes_per_token,
            round(bytes_per_token * block_size) if bytes_per_token else None,
            pool_blocks,
            pool_tokens,
            pool_bytes,
            statement,
            tuple(notes),
        )
    if engine_model is None:
        notes.append(
            "no bytes per token: pass --config with the model's config.json, or give a trace "
            "whose engine log states the available KV cache memory and its blocks or tokens"
        )
        return KVModel(
            "none",
            block_size,
            stated_block is not None,
            None,
            None,
            None,
            pool_blocks,
            pool_tokens,
            None,
            "no KV bytes model: figures are in tokens and blocks only",
            tuple(notes),
        )
    per_block, basis, statement = engine_model
    if available is not None and available < 100 * GiB:
        notes.append(
            "the engine prints the available KV memory rounded to 0.01 GiB: bytes per block are "
            f"within ±{_PRINTED_GIB_ERROR / available:.2%}"
        )
    return KVModel(
        basis,
        block_size,
        stated_block is not None,
        BlockBytes(per_block),
        per_block / block_size,
        per_block,
        pool_blocks,
        pool_tokens,
        pool_blocks * per_block if pool_blocks else available,
        statement,
        tuple(notes),
    )


def _engine_block_bytes(
    config: dict[str, Any],
    available: int | None,
    block_size: int,
    pool_blocks: int | None,
    pool_tokens: int | None,
) -> tuple[int, KVBasis, str] | None:
    if available is None:
        return None
    stated_blocks = _int(config, "num_gpu_blocks")
    stated_tokens = _int(config, "kv_cache_tokens")
    blocks = stated_blocks or (pool_blocks if not stated_tokens else None)
    if blocks:
        per_block = round(available / blocks)
        text = (
            f"engine statements: available KV cache {format_bytes(available)} ÷ {blocks:,} "
            f"blocks = {format_bytes(per_block)} per block of {block_size} tokens"
        )
        return per_block, "engine_blocks", text
    if pool_tokens:
        per_block = round(available * block_size / pool_tokens)
        text = (
            f"engine statements: available KV cache {format_bytes(available)} ÷ {pool_tokens:,} "
            f"tokens x {block_size} = {format_bytes(per_block)} per block of {block_size} tokens"
        )
        return per_block, "engine_tokens", text
    return None


def architecture_spec(
    config: Path,
    manifest: Manifest,
    *,
    kv_cache_dtype: str = "auto",
    tensor_parallel: int | None = None,
) -> tuple[SequenceBytes, str]:
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
