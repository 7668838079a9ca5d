"""Element sizes for weights, KV cache and recurrent state, with the spellings engines accept.

Weights and the KV cache are separate choices: an fp8 KV cache halves attention and MLA bytes but
leaves recurrent state alone (vLLM sizes that from ``mamba_cache_dtype`` /
``mamba_ssm_cache_dtype``, whose ``auto`` is the model dtype).
"""

from __future__ import annotations

from fractions import Fraction
from typing import Final, Literal, get_args

KVCacheDtype = Literal[
    "auto", "bfloat16", "float16", "half", "float32", "float", "fp8", "fp8_e4m3", "fp8_e5m2"
]
WeightDtype = Literal[
    "auto", "bfloat16", "float16", "half", "float32", "float", "fp8", "int8", "int4"
]
StateDtype = Literal["auto", "bfloat16", "float16", "float32"]

KV_CACHE_DTYPES: Final = get_args(KVCacheDtype)
WEIGHT_DTYPES: Final = get_args(WeightDtype)
STATE_DTYPES: Final = get_args(StateDtype)

# Model (activation) dtypes a config.json may state, by canonical name.
MODEL_DTYPE_BYTES: Final[dict[str, int]] = {"bfloat16": 2, "float16": 2, "float32": 4}
_MODEL_ALIASES: Final[dict[str, str]] = {
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "fp16": "float16",
    "half": "float16",
    "float32": "float32",
    "fp32": "float32",
    "float": "float32",
}
# What a KV-cache setting stores per element. fp8 variants are one byte (vLLM keeps them as uint8).
_KV_BYTES: Final[dict[str, tuple[str, int]]] = {
    "bfloat16": ("bfloat16", 2),
    "float16": ("float16", 2),
    "half": ("float16", 2),
    "float32": ("float32", 4),
    "float": ("float32", 4),
    "fp8": ("fp8", 1),
    "fp8_e4m3": ("fp8_e4m3", 1),
    "fp8_e5m2": ("fp8_e5m2", 1),
}
# Bytes per weight for a parameter count; int4 packs two weights per byte (scales not counted).
_WEIGHT_BYTES: Final[dict[str, tuple[str, Fraction]]] = {
    "bfloat16": ("bfloat16", Fraction(2)),
    "float16": ("float16", Fraction(2)),
    "half": ("float16", Fraction(2)),
    "float32": ("float32", Fraction(4)),
    "float": ("float32", Fraction(4)),
    "fp8": ("fp8", Fraction(1)),
    "int8": ("int8", Fraction(1)),
    "int4": ("int4", Fraction(1, 2)),
}
# The dtype assumed when neither the config nor a checkpoint states one: every recent published
# checkpoint this project checked is bfloat16, and fp32 (vLLM's last resort) would double the KV.
ASSUMED_MODEL_DTYPE: Final = "bfloat16"


def canonical_model_dtype(name: str) -> str | None:
    """``"torch.bfloat16"``, ``"bf16"``, ``"half"`` -> canonical name, or None if unknown."""
    key = name.strip().lower().removeprefix("torch.")
    return _MODEL_ALIASES.get(key)


def kv_element(kv_cache_dtype: str, model_dtype: str) -> tuple[str, int]:
    """(stored dtype, bytes per element) for a KV-cache setting; ``auto`` is the model dtype."""
    if kv_cache_dtype == "auto":
        return model_dtype, MODEL_DTYPE_BYTES[model_dtype]
    return _KV_BYTES[kv_cache_dtype]


def weight_bytes_per_param(weight_dtype: str, model_dtype: str) -> tuple[str, Fraction]:
    """(dtype, bytes per weight) for a weight setting; ``auto`` is the model dtype."""
    if weight_dtype == "auto":
        return model_dtype, Fraction(MODEL_DTYPE_BYTES[model_dtype])
    return _WEIGHT_BYTES[weight_dtype]


def state_element(state_dtype: str) -> tuple[str, int]:
    """(canonical dtype, bytes) for a recurrent-state dtype (a canonical model dtype name)."""
    canonical = canonical_model_dtype(state_dtype)
    if canonical is None:
        raise ValueError(f"unknown state dtype {state_dtype!r}")
    return canonical, MODEL_DTYPE_BYTES[canonical]
