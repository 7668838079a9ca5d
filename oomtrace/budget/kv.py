"""KV bytes per stored token and bytes per sequence, for one GPU, with a dtype and a TP size.

``KVSpec`` groups identical layers. ``sequence_bytes(N)`` is what one sequence holding N stored
tokens has resident: full and MLA layers keep N tokens, sliding layers ``min(N, W)``, chunked
layers ``((N-1) mod C) + 1``, each layer rounded up to whole blocks, plus a constant state per
recurrent layer. ``peak_sequence_bytes(N)`` is the most a sequence holds at any point on its way
to N tokens, which is what a budget must cover (they differ only for chunked layers, whose
resident tokens drop when a new chunk starts). ``*_expr`` are the same rules as Polars
expressions, for many requests at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

from oomtrace.budget.dtypes import ASSUMED_MODEL_DTYPE, kv_element, state_element
from oomtrace.budget.layers import (
    AttentionKind,
    ModelArchitecture,
    RecurrentKind,
    kv_heads_per_rank,
)


def _round_up(tokens: int, block: int) -> int:
    return -(-tokens // block) * block


def _round_up_expr(tokens: pl.Expr, block: int) -> pl.Expr:
    return ((tokens + (block - 1)) // block) * block


@dataclass(frozen=True)
class KVGroup:
    """``layers`` attention layers that store ``bytes_per_token`` each per resident token.
    ``window`` is W for sliding layers and C for chunked ones."""

    kind: AttentionKind
    layers: int
    bytes_per_token: int
    window: int | None = None

    def resident_tokens(self, tokens: int) -> int:
        if self.kind == "sliding" and self.window is not None:
            return min(tokens, self.window)
        if self.kind == "chunked" and self.window is not None:
            return (tokens - 1) % self.window + 1 if tokens > 0 else 0
        return tokens

    def resident_expr(self, tokens: pl.Expr) -> pl.Expr:
        if self.kind == "sliding" and self.window is not None:
            return pl.min_horizontal(tokens, pl.lit(self.window, dtype=pl.Int64))
        if self.kind == "chunked" and self.window is not None:
            return pl.when(tokens > 0).then((tokens - 1) % self.window + 1).otherwise(0)
        return tokens


@dataclass(frozen=True)
class StateGroup:
    """``layers`` recurrent layers, each holding one conv state and one SSM/recurrent state."""

    kind: RecurrentKind
    layers: int
    conv_bytes: int
    ssm_bytes: int

    @property
    def bytes_per_layer(self) -> int:
        return self.conv_bytes + self.ssm_bytes


@dataclass(frozen=True)
class KVSpec:
    """The cache one GPU keeps per sequence. Build it with :func:`kv_spec` or
    :meth:`KVSpec.from_explicit`."""

    groups: tuple[KVGroup, ...]
    state_groups: tuple[StateGroup, ...] = ()
    kv_dtype: str = ASSUMED_MODEL_DTYPE
    kv_element_bytes: int = 2
    conv_state_dtype: str | None = None
    ssm_state_dtype: str | None = None
    tensor_parallel: int = 1
    assumptions: tuple[str, ...] = ()
    kv_bytes_per_token: int = field(init=False)
    unbounded_kv_bytes_per_token: int = field(init=False)
    state_bytes_per_sequence: int = field(init=False)

    def __post_init__(self) -> None:
        chunks = sorted({g.window or 0 for g in self.groups if g.kind == "chunked"})
        if len(chunks) > 1:
            raise ValueError(f"one chunk size per model is supported, got {chunks}")
        per_token = sum(g.layers * g.bytes_per_token for g in self.groups)
        unbounded = sum(
            g.layers * g.bytes_per_token for g in self.groups if g.kind in ("full", "mla")
        )
        state = sum(g.layers * g.bytes_per_layer for g in self.state_groups)
        object.__setattr__(self, "kv_bytes_per_token", per_token)
        object.__setattr__(self, "unbounded_kv_bytes_per_token", unbounded)
        object.__setattr__(self, "state_bytes_per_sequence", state)

    @classmethod
    def from_explicit(
        cls,
        *,
        layers: int,
        kv_heads: int,
        head_dim: int,
        dtype_bytes: int,
        tensor_parallel: int = 1,
        dtype_name: str | None = None,
    ) -> KVSpec:
        """Every layer full attention: 2 (K, V) x KV heads x head dim x bytes, per layer."""
        for name, value in (("layers", layers), ("kv_heads", kv_heads), ("head_dim", head_dim)):
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        heads = kv_heads_per_rank(kv_heads, tensor_parallel)
        group = KVGroup("full", layers, 2 * heads * head_dim * dtype_bytes)
        name = dtype_name or {1: "fp8", 2: "bfloat16", 4: "float32"}.get(dtype_bytes, "custom")
        return cls(
            (group,), kv_dtype=name, kv_element_bytes=dtype_bytes, tensor_parallel=tensor_parallel
        )

    @property
    def chunk_size(self) -> int | None:
        return next((g.window for g in self.groups if g.kind == "chunked"), None)

    def sequence_bytes(self, tokens: int, block_size: int = 16) -> int:
        """Bytes resident for one sequence holding ``tokens`` stored tokens."""
        if tokens < 0 or block_size < 1:
            raise ValueError(f"tokens must be >= 0 and block_size >= 1, got {tokens}, {block_size}")
        kv = sum(
            g.layers * g.bytes_per_token * _round_up(g.resident_tokens(tokens), block_size)
            for g in self.groups
        )
        return kv + self.state_bytes_per_sequence

    def peak_sequence_bytes(self, tokens: int, block_size: int = 16) -> int:
        """The most one sequence holds at any point while growing to ``tokens``."""
        now = self.sequence_bytes(tokens, block_size)
        chunk = self.chunk_size
        if chunk is None or tokens <= chunk:
            return now
        return max(now, self.sequence_bytes(tokens // chunk * chunk, block_size))

    def sequence_bytes_expr(self, tokens: pl.Expr, block_size: int = 16) -> pl.Expr:
        """:meth:`sequence_bytes` for a column of stored-token counts (Int64 bytes; null where
        the count is null or negative)."""
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        n = tokens.cast(pl.Int64)
        total: pl.Expr = pl.lit(self.state_bytes_per_sequence, dtype=pl.Int64)
        for g in self.groups:
            resident = _round_up_expr(g.resident_expr(n), block_size)
            total = total + resident * (g.layers * g.bytes_per_token)
        return pl.when(n >= 0).then(total).otherwise(None)

    def peak_sequence_bytes_expr(self, tokens: pl.Expr, block_size: int = 16) -> pl.Expr:
        """:meth:`peak_sequence_bytes` for a column of stored-token counts."""
        now = self.sequence_bytes_expr(tokens, block_size)
        chunk = self.chunk_size
        if chunk is None:
            return now
        n = tokens.cast(pl.Int64)
        last_full_chunk = self.sequence_bytes_expr(n // chunk * chunk, block_size)
        return pl.when(n > chunk).then(pl.max_horizontal(now, last_full_chunk)).otherwise(now)


def _state_dtypes(arch: ModelArchitecture, ssm_setting: str, notes: list[str]) -> tuple[str, str]:
    conv = arch.dtype or ASSUMED_MODEL_DTYPE
    if ssm_setting != "auto":
        return conv, ssm_setting
    if arch.state_dtype is not None:
        notes.append(f"SSM state in {arch.state_dtype}: {arch.state_dtype_source}")
        return conv, arch.state_dtype
    return conv, conv


def kv_spec(
    arch: ModelArchitecture,
    *,
    kv_cache_dtype: str = "auto",
    tensor_parallel: int = 1,
    mamba_ssm_cache_dtype: str = "auto",
) -> KVSpec:
    """The per-GPU cache of ``arch`` with a KV-cache dtype (``auto`` = model dtype; fp8 halves
    attention and MLA bytes, never recurrent state) and a tensor-parallel size."""
    if tensor_parallel < 1:
        raise ValueError(f"tensor_parallel must be >= 1, got {tensor_parallel}")
    notes: list[str] = []
    model_dtype = arch.dtype
    if model_dtype is None:
        model_dtype = ASSUMED_MODEL_DTYPE
    if arch.dtype is None and (kv_cache_dtype == "auto" or arch.recurrent):
        notes.append(
            f"model dtype not stated: assumed {ASSUMED_MODEL_DTYPE}; pass --kv-cache-dtype "
            "and --weight-dtype to state it"
        )
    dtype, element = kv_element(kv_cache_dtype, model_dtype)
    groups: dict[tuple[AttentionKind, int, int | None], int] = {}
    for layer in arch.attention:
        key = (layer.kind, layer.bytes_per_token(element, tensor_parallel), layer.window)
        groups[key] = groups.get(key, 0) + 1
    states: dict[tuple[RecurrentKind, int, int], int] = {}
    conv_dtype = ssm_dtype = None
    if arch.recurrent:
        conv_dtype, ssm_dtype = _state_dtypes(arch, mamba_ssm_cache_dtype, notes)
        conv_bytes, ssm_bytes = state_element(conv_dtype)[1], state_element(ssm_dtype)[1]
        for rec in arch.recurrent:
            conv, ssm = rec.state_elements(tensor_parallel)
            skey = (rec.kind, conv * conv_bytes, ssm * ssm_bytes)
            states[skey] = states.get(skey, 0) + 1
    return KVSpec(
        groups=tuple(KVGroup(kind, n, bpt, w) for (kind, bpt, w), n in groups.items()),
        state_groups=tuple(StateGroup(kind, n, c, s) for (kind, c, s), n in states.items()),
        kv_dtype=dtype,
        kv_element_bytes=element,
        conv_state_dtype=conv_dtype,
        ssm_state_dtype=ssm_dtype,
        tensor_parallel=tensor_parallel,
        assumptions=tuple(notes),
    )
