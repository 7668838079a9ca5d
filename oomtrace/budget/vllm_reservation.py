"""vLLM's admission view: what the engine *reserves* per request, which can exceed what is
resident (docs/kv-math.md §1.3-§1.5, §1.7).

A sliding-window layer is reserved ``cdiv(min(W - 1 + T, L), B) + 1`` blocks (the window, one
chunked-prefill step of T = max_num_batched_tokens tokens, and one block for misalignment);
a chunked layer ``cdiv(min(C + T, L), B)``; a recurrent layer one state page. Hybrid models are
cut into groups of equal size, the last ones padded with empty slots, and every group is charged
as many layers as the largest. Attention + Mamba hybrids use the older page-alignment rule
(attention blocks raised until an attention page holds a Mamba state). These rules were read at
the vLLM versions docs/kv-math.md lists and change between releases: the view is labelled as such.
"""

from __future__ import annotations

from dataclasses import dataclass

from oomtrace.budget.kv import KVSpec


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class EngineView:
    """Per-request reservation and the concurrency it allows on ``available`` bytes."""

    reserved_bytes_per_sequence: int
    max_sequences: int
    block_size: int
    max_num_batched_tokens: int
    group_size: int
    padding_layers: int
    notes: tuple[str, ...]


@dataclass(frozen=True)
class _Bucket:
    kind: str
    layers: int
    page: int  # bytes of one block of this layer
    block: int  # tokens per block
    window: int | None = None

    def reserve(self, tokens: int, batched: int) -> int:
        """Bytes one request may need in one layer of this bucket (``max_memory_usage_bytes``)."""
        if self.kind == "state":
            return self.page
        if self.kind == "sliding" and self.window is not None:
            return (_cdiv(min(self.window - 1 + batched, tokens), self.block) + 1) * self.page
        if self.kind == "chunked" and self.window is not None:
            return _cdiv(min(self.window + batched, tokens), self.block) * self.page
        return _cdiv(tokens, self.block) * self.page


def _buckets(spec: KVSpec, block_size: int, notes: list[str]) -> list[_Bucket]:
    attention = [
        _Bucket(g.kind, g.layers, g.bytes_per_token * block_size, block_size, g.window)
        for g in spec.groups
    ]
    states = [_Bucket("state", s.layers, s.bytes_per_layer, 1) for s in spec.state_groups]
    if attention and states:
        # Older HybridAttentionMambaModelConfig: raise the attention block size (a multiple of
        # 16) until one attention page can hold a Mamba state, then pad the state to that page.
        per_token = max(g.bytes_per_token for g in spec.groups)
        state_page = max(s.page for s in states)
        block = max(block_size, 16 * _cdiv(state_page, 16 * per_token))
        page = block * per_token
        notes.append(
            f"attention blocks raised to {block} tokens so a page ({page:,} B) holds one "
            f"recurrent state ({state_page:,} B), as vLLM aligns hybrid models"
        )
        attention = [_Bucket(b.kind, b.layers, page, block, b.window) for b in attention]
        states = [_Bucket("state", s.layers, page, block) for s in states]
    buckets = attention + states
    largest = max(b.page for b in buckets)
    unified = []
    for b in buckets:
        # Smaller pages get proportionally larger blocks (unify_kv_cache_spec_page_size).
        scale = largest // b.page if b.kind != "state" and largest % b.page == 0 else 1
        unified.append(_Bucket(b.kind, b.layers, b.page * scale, b.block * scale, b.window))
    return unified


def vllm_view(
    spec: KVSpec,
    tokens: int,
    available_bytes: int,
    *,
    block_size: int = 16,
    max_num_batched_tokens: int = 2048,
) -> EngineView:
    """vLLM's reservation for one request of ``tokens`` tokens (as if max_model_len = tokens)
    and how many such requests ``available_bytes`` admits."""
    notes: list[str] = []
    buckets = _buckets(spec, block_size, notes)
    if not buckets:
        return EngineView(0, 0, block_size, max_num_batched_tokens, 0, 0, tuple(notes))
    counts = [b.layers for b in buckets]
    if len(buckets) == 1:
        group_size, groups = counts[0], [1]
    else:
        smallest, largest = min(counts), max(counts)
        group_size = largest if largest < 1.5 * smallest else smallest
        groups = [_cdiv(n, group_size) for n in counts]
    padding = sum(g * group_size for g in groups) - sum(counts)
    if padding:
        notes.append(f"{padding} padding layer slots: groups of {group_size} layers")
    per_request = group_size * sum(
        g * b.reserve(tokens, max_num_batched_tokens) for g, b in zip(groups, buckets, strict=True)
    )
    unit = max(b.page for b in buckets) * group_size
    blocks = max(available_bytes, 0) // unit
    sequences = blocks // _cdiv(per_request, unit) if per_request else 0
    block = max(b.block for b in buckets if b.kind != "state") if spec.groups else block_size
    return EngineView(
        per_request, sequences, block, max_num_batched_tokens, group_size, padding, tuple(notes)
    )
