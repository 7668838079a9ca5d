"""What each cache-bearing layer of a model keeps per sequence, independent of dtype and of the
engine: attention layers (full, sliding window, chunked local, MLA latent) and recurrent layers
(Mamba-1, Mamba-2, Gated DeltaNet). See ``docs/kv-math.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from oomtrace.errors import UsageError

AttentionKind = Literal["full", "sliding", "chunked", "mla"]
RecurrentKind = Literal["mamba1", "mamba2", "gdn"]


def _divide(total: int, parts: int, what: str) -> int:
    if total % parts:
        raise UsageError(
            f"--tensor-parallel {parts} does not divide the model's {total} {what}; "
            "choose a tensor-parallel size that divides it"
        )
    return total // parts


def kv_heads_per_rank(kv_heads: int, tensor_parallel: int) -> int:
    """KV heads one GPU stores. With more ranks than KV heads the heads are replicated, so a GPU
    never holds less than one (vLLM ``get_num_kv_heads``); otherwise TP must divide them."""
    if kv_heads >= tensor_parallel:
        return _divide(kv_heads, tensor_parallel, "KV heads")
    if tensor_parallel % kv_heads:
        raise UsageError(
            f"--tensor-parallel {tensor_parallel} is not a multiple of the model's {kv_heads} "
            "KV heads; choose a size that divides them or that they divide"
        )
    return 1


@dataclass(frozen=True)
class AttentionLayer:
    """One attention layer. ``window`` is the sliding window W (``sliding``) or the chunk size C
    (``chunked``). An MLA layer stores one latent of ``head_dim`` = kv_lora_rank +
    qk_rope_head_dim elements per token, shared by all heads: ``kv_heads`` 1, ``head_dim_v`` 0."""

    index: int
    kind: AttentionKind
    kv_heads: int
    head_dim: int
    head_dim_v: int
    window: int | None = None

    def bytes_per_token(self, element_bytes: int, tensor_parallel: int = 1) -> int:
        if self.kind == "mla":
            # Every TP rank keeps the whole latent (vLLM MLA: num_kv_heads = 1 on each rank).
            return (self.head_dim + self.head_dim_v) * element_bytes
        heads = kv_heads_per_rank(self.kv_heads, tensor_parallel)
        return heads * (self.head_dim + self.head_dim_v) * element_bytes


@dataclass(frozen=True)
class RecurrentLayer:
    """One recurrent layer: a fixed state per sequence, whatever its length.

    ``mamba1``: d_inner, d_state. ``mamba2``: d_inner, n_groups, d_state, n_heads, head_dim.
    ``gdn`` (Gated DeltaNet): key_heads, key_head_dim, value_heads, value_head_dim.
    """

    index: int
    kind: RecurrentKind
    conv_kernel: int
    d_inner: int = 0
    d_state: int = 0
    n_groups: int = 0
    n_heads: int = 0
    head_dim: int = 0
    key_heads: int = 0
    key_head_dim: int = 0
    value_heads: int = 0
    value_head_dim: int = 0

    def state_elements(self, tensor_parallel: int = 1) -> tuple[int, int]:
        """(conv-state elements, SSM/recurrent-state elements) on one GPU, following vLLM's
        ``MambaStateShapeCalculator`` (no speculative-decoding slots)."""
        tp = tensor_parallel
        history = self.conv_kernel - 1
        if self.kind == "mamba1":
            inner = _divide(self.d_inner, tp, "Mamba channels")
            return history * inner, inner * self.d_state
        if self.kind == "mamba2":
            # Groups are replicated up to the TP size when they do not divide it.
            groups = self.n_groups if self.n_groups % tp == 0 else tp
            conv_dim = _divide(self.d_inner + 2 * groups * self.d_state, tp, "Mamba channels")
            heads = _divide(self.n_heads, tp, "Mamba heads")
            return history * conv_dim, heads * self.head_dim * self.d_state
        conv_dim = 2 * self.key_heads * self.key_head_dim + self.value_heads * self.value_head_dim
        heads = _divide(self.value_heads, tp, "linear-attention value heads")
        return (
            history * _divide(conv_dim, tp, "linear-attention channels"),
            heads * self.value_head_dim * self.key_head_dim,
        )


@dataclass(frozen=True)
class ModelArchitecture:
    """A model as the cache sees it. Built by :func:`oomtrace.budget.load_architecture` from a
    config.json; ``notes`` are the assumptions the reader made (defaults applied, fields ignored),
    which the worksheet prints."""

    name: str
    model_type: str
    family: str
    num_layers: int
    attention: tuple[AttentionLayer, ...]
    recurrent: tuple[RecurrentLayer, ...] = ()
    dtype: str | None = None
    dtype_source: str = "not stated"
    state_dtype: str | None = None
    state_dtype_source: str = ""
    context_tokens: int | None = None
    notes: tuple[str, ...] = ()
    source: Path | None = None
    multimodal: bool = False
    config: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def describe_layers(self) -> str:
        """``"48 layers: 12 full attention, 36 chunked attention (C=8192)"``."""
        counts: dict[str, int] = {}
        for layer in self.attention:
            label = {
                "full": "full attention",
                "sliding": f"sliding window (W={layer.window})",
                "chunked": f"chunked local attention (C={layer.window})",
                "mla": "MLA latent",
            }[layer.kind]
            counts[label] = counts.get(label, 0) + 1
        for rec in self.recurrent:
            label = {"mamba1": "Mamba-1", "mamba2": "Mamba-2", "gdn": "Gated DeltaNet"}[rec.kind]
            counts[label] = counts.get(label, 0) + 1
        parts = [f"{n} {label}" for label, n in counts.items()]
        cached = {layer.index for layer in self.attention} | {r.index for r in self.recurrent}
        if len(cached) < self.num_layers:
            parts.append(f"{self.num_layers - len(cached)} without cache (MLP/MoE blocks)")
        return (
            f"{self.num_layers} layers: {', '.join(parts)}"
            if parts
            else f"{self.num_layers} layers"
        )
