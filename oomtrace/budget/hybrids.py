"""Recurrent and hybrid families: Jamba (Mamba-1), Mamba, Mamba-2, Nemotron-H, Falcon-H1 and
Gated DeltaNet (Qwen3-Next, Qwen3.5), docs/kv-math.md §5."""

from __future__ import annotations

from dataclasses import replace

from oomtrace.budget.attention import attention_family, attention_layers, num_layers
from oomtrace.budget.hf_config import ConfigView, LoadedConfig
from oomtrace.budget.layers import AttentionLayer, RecurrentLayer

Parsed = tuple[str, int, list[AttentionLayer], list[RecurrentLayer]]


def _mamba2(
    view: ConfigView,
    index: int,
    *,
    inner: int,
    heads: str,
    head_dim: str,
    groups: str,
    state: str,
    conv: str,
) -> RecurrentLayer:
    return RecurrentLayer(
        index,
        "mamba2",
        view.need_int(conv),
        d_inner=inner,
        n_groups=view.need_int(groups),
        n_heads=view.need_int(heads),
        head_dim=view.need_int(head_dim),
        d_state=view.need_int(state),
    )


def parse_jamba(cfg: LoadedConfig, model_type: str, notes: list[str]) -> Parsed:
    view = cfg.text
    n = num_layers(view)
    types = view.str_list("layers_block_type")
    if types is None:
        period = view.need_int("attn_layer_period", default=8)
        offset = view.need_int("attn_layer_offset", minimum=0, default=4)
        types = ["attention" if i % period == offset else "mamba" for i in range(n)]
    elif len(types) != n or set(types) - {"attention", "mamba"}:
        raise view.error("layers_block_type", "must list 'attention' or 'mamba' for every layer")
    inner = view.need_int("mamba_expand", default=2) * view.need_int("hidden_size")
    d_state, d_conv = (
        view.need_int("mamba_d_state", default=16),
        view.need_int("mamba_d_conv", default=4),
    )
    attention = attention_layers(
        view,
        model_type,
        [(i, "full", None) for i, t in enumerate(types) if t == "attention"],
        notes,
    )
    recurrent = [
        RecurrentLayer(i, "mamba1", d_conv, d_inner=inner, d_state=d_state)
        for i, t in enumerate(types)
        if t == "mamba"
    ]
    family = f"hybrid: {attention_family(view, attention[0])} + Mamba-1" if attention else "Mamba-1"
    return family, n, attention, recurrent


def parse_mamba(cfg: LoadedConfig, model_type: str, notes: list[str]) -> Parsed:
    view = cfg.text
    n = num_layers(view)
    if model_type == "mamba":
        inner = view.opt_int("intermediate_size") or view.need_int(
            "expand", default=2
        ) * view.need_int("hidden_size")
        layer = RecurrentLayer(
            0,
            "mamba1",
            view.need_int("conv_kernel", default=4),
            d_inner=inner,
            d_state=view.need_int("state_size", default=16),
        )
        return "Mamba-1 (attention-free)", n, [], [_at(layer, i) for i in range(n)]
    inner = view.need_int("expand", default=2) * view.need_int("hidden_size")
    layer = _mamba2(
        view,
        0,
        inner=inner,
        heads="num_heads",
        head_dim="head_dim",
        groups="n_groups",
        state="state_size",
        conv="conv_kernel",
    )
    return "Mamba-2 (attention-free)", n, [], [_at(layer, i) for i in range(n)]


def _at(layer: RecurrentLayer, index: int) -> RecurrentLayer:
    return replace(layer, index=index)


def parse_nemotron_h(cfg: LoadedConfig, model_type: str, notes: list[str]) -> Parsed:
    view = cfg.text
    n = num_layers(view)
    pattern = view.text("hybrid_override_pattern")
    if pattern is None:
        raise view.error("hybrid_override_pattern", "is missing")
    if len(pattern) != n:
        raise view.error("hybrid_override_pattern", f"has {len(pattern)} blocks, the model {n}")
    unknown = sorted(set(pattern) - set("M*-E"))
    if unknown:
        raise view.error(
            "hybrid_override_pattern", f"has block type {unknown[0]!r} (known: M * - E)"
        )
    inner = view.need_int("mamba_num_heads") * view.need_int("mamba_head_dim")
    mamba = _mamba2(
        view,
        0,
        inner=inner,
        heads="mamba_num_heads",
        head_dim="mamba_head_dim",
        groups="n_groups",
        state="ssm_state_size",
        conv="conv_kernel",
    )
    attention = attention_layers(
        view, model_type, [(i, "full", None) for i, c in enumerate(pattern) if c == "*"], notes
    )
    recurrent = [_at(mamba, i) for i, c in enumerate(pattern) if c == "M"]
    family = f"hybrid: {attention_family(view, attention[0])} + Mamba-2" if attention else "Mamba-2"
    return family, n, attention, recurrent


def parse_falcon_h1(cfg: LoadedConfig, model_type: str, notes: list[str]) -> Parsed:
    view = cfg.text
    n = num_layers(view)
    inner = view.opt_int("mamba_d_ssm") or view.need_int("mamba_expand") * view.need_int(
        "hidden_size"
    )
    mamba = _mamba2(
        view,
        0,
        inner=inner,
        heads="mamba_n_heads",
        head_dim="mamba_d_head",
        groups="mamba_n_groups",
        state="mamba_d_state",
        conv="mamba_d_conv",
    )
    notes.append("Falcon-H1 runs attention and a Mamba-2 mixer in every layer: both are counted")
    attention = attention_layers(view, model_type, [(i, "full", None) for i in range(n)], notes)
    family = f"parallel: {attention_family(view, attention[0])} + Mamba-2 in every layer"
    return family, n, attention, [_at(mamba, i) for i in range(n)]


def parse_gated_deltanet(cfg: LoadedConfig, model_type: str, notes: list[str]) -> Parsed:
    view = cfg.text
    n = num_layers(view)
    types = view.str_list("layer_types")
    if types is None:
        every = view.need_int("full_attention_interval", default=4)
        types = ["full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(n)]
    if len(types) != n:
        raise view.error("layer_types", f"lists {len(types)} layers, but the model has {n}")
    for i, name in enumerate(types):
        if name not in ("full_attention", "linear_attention"):
            raise view.error(
                "layer_types", f"has {name!r} at layer {i}, a kind oomtrace does not size"
            )
    gdn = RecurrentLayer(
        0,
        "gdn",
        view.need_int("linear_conv_kernel_dim"),
        key_heads=view.need_int("linear_num_key_heads"),
        key_head_dim=view.need_int("linear_key_head_dim"),
        value_heads=view.need_int("linear_num_value_heads"),
        value_head_dim=view.need_int("linear_value_head_dim"),
    )
    attention = attention_layers(
        view,
        model_type,
        [(i, "full", None) for i, t in enumerate(types) if t == "full_attention"],
        notes,
    )
    recurrent = [_at(gdn, i) for i, t in enumerate(types) if t == "linear_attention"]
    mtp = view.opt_int("mtp_num_hidden_layers", minimum=0)
    if mtp:
        notes.append(
            f"mtp_num_hidden_layers {mtp}: MTP drafting adds attention layers when enabled; "
            "not counted"
        )
    family = "Gated DeltaNet"
    if attention:
        family = f"hybrid: {attention_family(view, attention[0])} + Gated DeltaNet"
    return family, n, attention, recurrent
