"""Standard attention layers (MHA/GQA/MQA) and which of them are full, sliding-window or
chunked-local, by each family's convention (docs/kv-math.md §2, §4, §6)."""

from __future__ import annotations

from oomtrace.budget.hf_config import ConfigView
from oomtrace.budget.layers import AttentionKind, AttentionLayer

Kinds = list[tuple[AttentionKind, int | None]]

QWEN_TYPES = frozenset({"qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "qwen3_next"})
# transformers config-class defaults for keys that published multimodal Gemma configs omit.
_DEFAULTS: dict[str, dict[str, int]] = {
    "gemma2": {"num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256},
    "gemma3_text": {"num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256},
}


def _int_with_default(view: ConfigView, key: str, model_type: str, notes: list[str]) -> int:
    default = _DEFAULTS.get(model_type, {}).get(key)
    if not view.has(key) and default is not None:
        notes.append(f"{view.name(key)} absent: transformers' {model_type} default {default}")
    return view.need_int(key, default=default)


def attention_shape(view: ConfigView, model_type: str, notes: list[str]) -> tuple[int, int]:
    """(KV heads, head dim) by vLLM's precedence: legacy Falcon ``multi_query`` means one KV head;
    explicit ``head_dim`` wins over hidden_size / heads (Qwen3-32B: 128, not 80)."""
    heads_key = view.first_int(("num_attention_heads", "n_head"))
    heads = (
        heads_key[1]
        if heads_key
        else _int_with_default(view, "num_attention_heads", model_type, notes)
    )
    if view.flag("multi_query") and not view.flag("new_decoder_architecture"):
        kv_heads = 1
    else:
        found = view.first_int(
            ("n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num")
        )
        if found is None and model_type in _DEFAULTS:
            kv_heads = _int_with_default(view, "num_key_value_heads", model_type, notes)
        else:
            kv_heads = found[1] if found else heads
    explicit = view.first_int(("head_dim", "hidden_size_per_head", "attention_head_dim"))
    if explicit is not None:
        return kv_heads, explicit[1]
    if model_type in _DEFAULTS:
        return kv_heads, _int_with_default(view, "head_dim", model_type, notes)
    hidden = view.need_int("hidden_size")
    if hidden % heads:
        raise view.error("hidden_size", f"is {hidden}, not a multiple of the {heads} heads")
    return kv_heads, hidden // heads


def num_layers(view: ConfigView) -> int:
    found = view.first_int(("num_hidden_layers", "n_layer", "num_layers"))
    if found is None:
        raise view.error("num_hidden_layers", "is missing")
    return found[1]


def _window(view: ConfigView, notes: list[str], model_type: str) -> int:
    window = view.opt_int("sliding_window")
    if window is None and model_type in ("gemma2", "gemma3_text"):
        notes.append(f"{view.name('sliding_window')} absent: transformers' default 4096")
        return 4096
    if window is None:
        raise view.error("sliding_window", "is missing but layers slide")
    return window


def _from_layer_types(
    view: ConfigView, types: list[str], n: int, notes: list[str], mt: str
) -> Kinds:
    if len(types) != n:
        raise view.error("layer_types", f"lists {len(types)} layers, but the model has {n}")
    kinds: Kinds = []
    for i, name in enumerate(types):
        if name == "full_attention":
            kinds.append(("full", None))
        elif name == "sliding_attention":
            kinds.append(("sliding", _window(view, notes, mt)))
        elif name == "chunked_attention":
            kinds.append(("chunked", view.need_int("attention_chunk_size")))
        else:
            raise view.error(
                "layer_types", f"has {name!r} at layer {i}, a kind oomtrace does not size"
            )
    return kinds


def standard_kinds(view: ConfigView, model_type: str, n: int, notes: list[str]) -> Kinds:
    """Which attention layers are full, sliding or chunked (docs/kv-math.md §4)."""
    if model_type in QWEN_TYPES and not view.flag("use_sliding_window"):
        if view.has("sliding_window") or view.has("layer_types"):
            notes.append("use_sliding_window is false: every layer keeps all tokens")
        return [("full", None)] * n
    types = view.str_list("layer_types")
    if types is not None:
        return _from_layer_types(view, types, n, notes, model_type)
    if model_type == "gemma2":
        w = _window(view, notes, model_type)
        notes.append("Gemma-2 alternation: even layers slide, odd layers are global")
        return [("sliding", w) if i % 2 == 0 else ("full", None) for i in range(n)]
    if model_type == "gemma3_text":
        found = view.first_int(("sliding_window_pattern", "_sliding_window_pattern"))
        pattern = found[1] if found else 6
        w = _window(view, notes, model_type)
        notes.append(f"Gemma-3 pattern {pattern}: layer i is global when (i+1) % {pattern} == 0")
        return [("full", None) if (i + 1) % pattern == 0 else ("sliding", w) for i in range(n)]
    if model_type == "llama4_text":
        return _llama4_kinds(view, n, notes)
    if model_type in QWEN_TYPES:
        first = view.need_int("max_window_layers", minimum=0, default=28)
        w = view.need_int("sliding_window")
        return [("sliding", w) if i >= first else ("full", None) for i in range(n)]
    window = view.opt_int("sliding_window")
    if window is not None:
        notes.append(f"sliding_window {window} with no layer_types: every layer slides (as vLLM)")
        return [("sliding", window)] * n
    return [("full", None)] * n


def _llama4_kinds(view: ConfigView, n: int, notes: list[str]) -> Kinds:
    chunk = view.opt_int("attention_chunk_size")
    if chunk is None:
        return [("full", None)] * n
    flags = view.int_list("no_rope_layers")
    if flags:
        if len(flags) != n:
            raise view.error("no_rope_layers", f"lists {len(flags)} layers, the model has {n}")
    else:
        every = view.need_int("no_rope_layer_interval", default=4)
        notes.append(
            f"no_rope_layers empty or absent: every {every}th layer is a global NoPE layer"
        )
        flags = [int((i + 1) % every != 0) for i in range(n)]
    # A RoPE layer (flag 1) attends within its chunk; a NoPE layer (flag 0) attends globally.
    return [("chunked", chunk) if flag else ("full", None) for flag in flags]


def attention_layers(
    view: ConfigView,
    model_type: str,
    indexed: list[tuple[int, AttentionKind, int | None]],
    notes: list[str],
) -> list[AttentionLayer]:
    kv_heads, head_dim = attention_shape(view, model_type, notes)
    return [AttentionLayer(i, kind, kv_heads, head_dim, head_dim, w) for i, kind, w in indexed]


def attention_family(view: ConfigView, layer: AttentionLayer) -> str:
    heads = _heads(view)
    style = "MQA" if layer.kv_heads == 1 else "GQA" if layer.kv_heads < heads else "MHA"
    return f"{style}, {layer.kv_heads} KV heads x head dim {layer.head_dim}"


def _heads(view: ConfigView) -> int:
    found = view.first_int(("num_attention_heads", "n_head"))
    return found[1] if found else 0
