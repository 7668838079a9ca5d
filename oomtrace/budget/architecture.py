"""``load_architecture``: a config.json (or model directory) to a :class:`ModelArchitecture`."""

from __future__ import annotations

import logging
from pathlib import Path

from oomtrace.budget.dtypes import canonical_model_dtype
from oomtrace.budget.hf_config import ConfigView, LoadedConfig, read_config
from oomtrace.budget.layers import AttentionLayer, ModelArchitecture
from oomtrace.budget.model_families import parse_layers
from oomtrace.budget.weights import checkpoint_tensors

logger = logging.getLogger(__name__)

_STATE_DTYPE_KEYS = ("mamba_ssm_cache_dtype", "mamba_ssm_dtype")
# vLLM's NemotronH hook sets an `auto` SSM-state dtype to the config's mamba_ssm_cache_dtype, or
# to float32 when the config has none ("only float32 is known to have no accuracy issues").
_STATE_DTYPE_DEFAULTS = {"nemotron_h": "float32"}


def load_architecture(path: Path) -> ModelArchitecture:
    """Read a Hugging Face config.json, or a model directory holding one (and perhaps the
    checkpoint's safetensors files, whose tensor dtypes stand in for a missing dtype key).

    Raises :class:`oomtrace.errors.ConfigError` for a missing or malformed file, a field of the
    wrong type, or a model whose cache layout oomtrace does not understand.
    """
    cfg = read_config(path)
    notes: list[str] = []
    model_type, (family, num_layers, attention, recurrent) = parse_layers(cfg, notes)
    dtype, dtype_source = _model_dtype(cfg, notes)
    state_dtype, state_source = _state_dtype(cfg, model_type) if recurrent else (None, "")
    context = cfg.context_tokens()
    _note_quantization(cfg, notes)
    name = cfg.file.parent.name if cfg.file.name == "config.json" else cfg.file.stem
    return ModelArchitecture(
        name=name or model_type,
        model_type=model_type,
        family=family,
        num_layers=num_layers,
        attention=tuple(attention),
        recurrent=tuple(recurrent),
        dtype=dtype,
        dtype_source=dtype_source,
        state_dtype=state_dtype,
        state_dtype_source=state_source,
        context_tokens=context[1] if context else None,
        notes=tuple(notes),
        source=cfg.file,
        multimodal=cfg.text is not cfg.root or "vision_config" in cfg.root.data,
        config=cfg.text.data,
    )


def explicit_architecture(*, layers: int, kv_heads: int, head_dim: int) -> ModelArchitecture:
    """An architecture stated on the command line: every layer full attention."""
    attention = tuple(
        AttentionLayer(i, "full", kv_heads, head_dim, head_dim) for i in range(layers)
    )
    return ModelArchitecture(
        name="explicit architecture",
        model_type="explicit",
        family=f"all full attention, {kv_heads} KV heads x head dim {head_dim}",
        num_layers=layers,
        attention=attention,
    )


def _model_dtype(cfg: LoadedConfig, notes: list[str]) -> tuple[str | None, str]:
    stated = cfg.model_dtype()
    if stated is not None:
        return stated[0], f"config '{stated[1]}'"
    if cfg.directory is not None:
        tensors = checkpoint_tensors(cfg.directory)
        dtype = tensors.dominant_float_dtype() if tensors else None
        if dtype is not None:
            notes.append(f"config.json states no dtype: {dtype} from the checkpoint's tensors")
            return dtype, "checkpoint tensors"
    logger.debug("no dtype in %s and no checkpoint tensors beside it", cfg.file)
    return None, "not stated"


def _state_dtype(cfg: LoadedConfig, model_type: str) -> tuple[str | None, str]:
    views: tuple[ConfigView, ...] = (
        (cfg.text, cfg.root) if cfg.text is not cfg.root else (cfg.root,)
    )
    for view in views:
        for key in _STATE_DTYPE_KEYS:
            raw = view.text(key)
            if raw is None:
                continue
            dtype = canonical_model_dtype(raw)
            if dtype is None:
                raise view.error(key, f"is {raw!r}, not a dtype oomtrace knows")
            return dtype, f"config '{view.name(key)}'"
    default = _STATE_DTYPE_DEFAULTS.get(model_type)
    if default is not None:
        return default, f"vLLM's {model_type} default (config has no mamba_ssm_cache_dtype)"
    return None, ""


def _note_quantization(cfg: LoadedConfig, notes: list[str]) -> None:
    quant = cfg.root.data.get("quantization_config")
    if not isinstance(quant, dict):
        return
    method = quant.get("quant_method", "unnamed")
    notes.append(
        f"quantization_config ({method}) quantizes weights; the KV cache stays in the model dtype "
        "unless --kv-cache-dtype says otherwise"
    )
