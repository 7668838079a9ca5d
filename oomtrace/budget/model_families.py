"""Which layers of a model keep what, family by family, from its config.json.

Each family's rules are in ``docs/kv-math.md`` §2-§6 (checked against vLLM and transformers).
A model this module does not understand is refused with the field that makes it different,
never sized with the standard formula by default.
"""

from __future__ import annotations

from collections.abc import Callable

from oomtrace.budget.attention import (
    attention_family,
    attention_layers,
    num_layers,
    standard_kinds,
)
from oomtrace.budget.hf_config import LoadedConfig
from oomtrace.budget.hybrids import (
    Parsed,
    parse_falcon_h1,
    parse_gated_deltanet,
    parse_jamba,
    parse_mamba,
    parse_nemotron_h,
)
from oomtrace.budget.layers import AttentionLayer
from oomtrace.errors import ConfigError

_EXPLICIT = "give the architecture with --layers, --kv-heads and --head-dim"

# Fields that change what the cache stores in ways this calculator does not model.
UNSUPPORTED_FIELDS: tuple[tuple[str, str], ...] = (
    ("global_head_dim", "a different head size on global layers, as in Gemma-4"),
    ("num_global_key_value_heads", "a different KV-head count on global layers"),
    ("attention_k_eq_v", "keys reused as values"),
    ("num_kv_shared_layers", "layers that share another layer's KV cache"),
    ("index_topk", "a sparse-attention indexer cache, as in DeepSeek-V3.2"),
)
STANDARD_TYPES = frozenset(
    {
        "llama",
        "mistral",
        "mixtral",
        "qwen2",
        "qwen2_moe",
        "qwen3",
        "qwen3_moe",
        "gemma",
        "gemma2",
        "gemma3",
        "gemma3_text",
        "phi3",
        "falcon",
        "RefinedWeb",
        "RefinedWebModel",
        "gpt_oss",
        "llama4",
        "llama4_text",
    }
)
MLA_TYPES = frozenset({"deepseek_v2", "deepseek_v3", "kimi_k2"})


def check_supported(cfg: LoadedConfig) -> None:
    for key, what in UNSUPPORTED_FIELDS:
        if cfg.text.truthy(key):
            raise ConfigError(
                f"{cfg.file}: field '{cfg.text.name(key)}' ({what}) changes the KV cache in a way "
                f"oomtrace does not model; {_EXPLICIT} if your engine stores every layer in full"
            )


def parse_standard(cfg: LoadedConfig, model_type: str, notes: list[str]) -> Parsed:
    view = cfg.text
    n = num_layers(view)
    kinds = standard_kinds(view, model_type, n, notes)
    layers = attention_layers(
        view, model_type, [(i, k, w) for i, (k, w) in enumerate(kinds)], notes
    )
    return attention_family(view, layers[0]), n, layers, []


def parse_mla(cfg: LoadedConfig, model_type: str, notes: list[str]) -> Parsed:
    view = cfg.text
    n = num_layers(view)
    rank = view.need_int("kv_lora_rank")
    rope = view.need_int("qk_rope_head_dim")
    mtp = view.opt_int("num_nextn_predict_layers", minimum=0)
    if mtp:
        notes.append(
            f"num_nextn_predict_layers {mtp}: MTP speculative decoding adds {mtp} more MLA "
            "layer(s) when enabled; not counted"
        )
    layers = [AttentionLayer(i, "mla", 1, rank + rope, 0) for i in range(n)]
    return f"MLA, latent {rank} + rope {rope} per token, shared by all heads", n, layers, []


PARSERS: dict[str, Callable[[LoadedConfig, str, list[str]], Parsed]] = {
    **dict.fromkeys(STANDARD_TYPES, parse_standard),
    **dict.fromkeys(MLA_TYPES, parse_mla),
    "jamba": parse_jamba,
    "mamba": parse_mamba,
    "mamba2": parse_mamba,
    "nemotron_h": parse_nemotron_h,
    "falcon_h1": parse_falcon_h1,
    **dict.fromkeys(
        ("qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"),
        parse_gated_deltanet,
    ),
}


def parse_layers(cfg: LoadedConfig, notes: list[str]) -> tuple[str, Parsed]:
    """(model_type, parsed layers) or a :class:`ConfigError` naming what is not understood."""
    check_supported(cfg)
    model_type = cfg.model_type
    if model_type is None:
        raise ConfigError(
            f"{cfg.file}: has no 'model_type' field, so its layout is unknown; {_EXPLICIT}"
        )
    parser = PARSERS.get(model_type)
    if parser is None:
        if cfg.text.truthy("kv_lora_rank"):
            raise ConfigError(
                f"{cfg.file}: field '{cfg.text.name('kv_lora_rank')}' (latent attention) in "
                f"model_type '{model_type}', which oomtrace does not know; the standard formula "
                f"would be wrong for it, so it is not applied; {_EXPLICIT}"
            )
        raise ConfigError(
            f"{cfg.file}: model_type '{model_type}' is not one oomtrace knows how to size; "
            f"{_EXPLICIT}"
        )
    if parser is not parse_mla and cfg.text.truthy("kv_lora_rank"):
        raise ConfigError(
            f"{cfg.file}: field '{cfg.text.name('kv_lora_rank')}' (latent attention) in a "
            f"{model_type} config; oomtrace does not know how this model stores it; {_EXPLICIT}"
        )
    return model_type, parser(cfg, model_type, notes)
