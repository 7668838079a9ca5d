"""Bytes of model weights: from a parameter count, an exact count computed from the config of a
dense decoder, or the tensor sizes in a checkpoint's safetensors headers.

A safetensors file starts with an 8-byte little-endian header length and a JSON header mapping
each tensor to its dtype, shape and byte offsets; only that header is read, never the data.
"""

from __future__ import annotations

import json
import math
import re
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Final

from oomtrace.errors import InputError, UsageError

SAFETENSORS_DTYPE_BYTES: Final[dict[str, int]] = {
    "F64": 8,
    "F32": 4,
    "F16": 2,
    "BF16": 2,
    "I64": 8,
    "I32": 4,
    "I16": 2,
    "I8": 1,
    "U64": 8,
    "U32": 4,
    "U16": 2,
    "U8": 1,
    "BOOL": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "F8_E8M0": 1,
    "C64": 8,
}
_FLOAT_DTYPES: Final = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}
MAX_HEADER_BYTES: Final = 100 * 2**20  # real headers are a few MiB even for 1T-parameter models
INDEX_FILE: Final = "model.safetensors.index.json"
_COUNT = re.compile(
    r"^\s*(?P<number>\d[\d_,]*(?:\.\d*)?(?:[eE][+-]?\d+)?)\s*(?P<suffix>[KMBT]?)\s*$"
)
_SUFFIX: Final = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}
# Dense decoders whose parameter count follows from config.json alone (no experts, no vision).
DENSE_TYPES: Final = frozenset({"llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "phi3"})
_TIED_BY_DEFAULT: Final = frozenset({"gemma", "gemma2"})


def parse_param_count(text: str) -> int:
    """``"7e9"``, ``"7B"``, ``"70.6B"``, ``"8,030,261,248"`` -> a whole number of parameters.
    Suffixes are decimal counts (K 1e3, M 1e6, B 1e9, T 1e12)."""
    match = _COUNT.match(text.upper())
    if match is None:
        raise UsageError(f"--params {text!r} is not a parameter count; write e.g. 7e9 or 7B")
    try:
        number = Decimal(match.group("number").replace(",", "").replace("_", ""))
    except InvalidOperation as err:  # pragma: no cover - the regex admits only decimals
        raise UsageError(f"--params {text!r} is not a number") from err
    value = number * _SUFFIX[match.group("suffix")]
    if value < 1 or value != value.to_integral_value():
        raise UsageError(f"--params {text!r} must be a whole number of parameters, at least 1")
    return int(value)


@dataclass(frozen=True)
class CheckpointTensors:
    """What a checkpoint's headers say: total tensor bytes and their split by stored dtype."""

    total_bytes: int
    by_dtype: tuple[tuple[str, int], ...]
    tensors: int
    source: str

    def dominant_float_dtype(self) -> str | None:
        """The float dtype holding the most bytes (``{BF16, U8}`` -> bfloat16, as vLLM infers a
        model dtype for checkpoints whose config states none)."""
        floats = [(n, d) for d, n in self.by_dtype if d in _FLOAT_DTYPES]
        return _FLOAT_DTYPES[max(floats)[1]] if floats else None


def read_safetensors_header(path: Path) -> Mapping[str, Any]:
    """The JSON header of one .safetensors file, without reading any tensor data."""
    try:
        with path.open("rb") as handle:
            prefix = handle.read(8)
            if len(prefix) < 8:
                raise InputError(f"{path}: too short for a safetensors file (no header length)")
            (length,) = struct.unpack("<Q", prefix)
            if length > MAX_HEADER_BYTES:
                raise InputError(
                    f"{path}: header length {length} bytes is implausible for safetensors; "
                    "is this file a safetensors checkpoint?"
                )
            raw = handle.read(length)
    except OSError as err:
        raise InputError(f"{path}: cannot be read ({err})") from err
    if len(raw) < length:
        raise InputError(f"{path}: header is cut short ({len(raw)} of {length} bytes)")
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(f"{path}: safetensors header is not valid JSON ({err})") from err
    if not isinstance(header, dict):
        raise InputError(f"{path}: safetensors header is not a JSON object")
    return header


def _tensor_bytes(path: Path, name: str, entry: Any) -> tuple[str, int]:
    """(dtype, bytes) of one header entry, checked against its own offsets."""
    if not isinstance(entry, dict):
        raise InputError(f"{path}: tensor {name!r} has no dtype/shape/offsets entry")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if (
        not isinstance(dtype, str)
        or not isinstance(shape, list)
        or not all(isinstance(d, int) and d >= 0 for d in shape)
        or not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) for o in offsets)
        or offsets[1] < offsets[0]
    ):
        raise InputError(f"{path}: tensor {name!r} has a malformed header entry")
    size = offsets[1] - offsets[0]
    itemsize = SAFETENSORS_DTYPE_BYTES.get(dtype)
    if itemsize is not None and math.prod(shape) * itemsize != size:
        raise InputError(
            f"{path}: tensor {name!r} is {dtype} {shape} but its offsets span {size} bytes"
        )
    return dtype, size


def _sum_headers(files: list[Path], source: str) -> CheckpointTensors:
    by_dtype: dict[str, int] = {}
    tensors = 0
    for path in files:
        for name, entry in read_safetensors_header(path).items():
            if name == "__metadata__":
                continue
            dtype, size = _tensor_bytes(path, name, entry)
            by_dtype[dtype] = by_dtype.get(dtype, 0) + size
            tensors += 1
    ranked = tuple(sorted(by_dtype.items(), key=lambda item: (-item[1], item[0])))
    return CheckpointTensors(sum(by_dtype.values()), ranked, tensors, source)


def checkpoint_tensors(directory: Path) -> CheckpointTensors | None:
    """Tensor bytes of the checkpoint in ``directory``: every ``*.safetensors`` header, or the
    index's ``metadata.total_size`` when the index is there but its shards are not. None when
    the directory holds neither."""
    files = sorted(directory.glob("*.safetensors"))
    index_path = directory / INDEX_FILE
    if index_path.is_file():
        index = _read_index(index_path)
        shards = sorted(set(index["weight_map"].values()))
        if shards and all((directory / s).is_file() for s in shards):
            return _sum_headers([directory / s for s in shards], f"headers of {len(shards)} shards")
        present = sum((directory / s).is_file() for s in shards)
        total = index["total_size"]
        return CheckpointTensors(
            total,
            (),
            len(index["weight_map"]),
            f"{INDEX_FILE} metadata.total_size ({present} of {len(shards)} shards present)",
        )
    if files:
        label = "header of 1 file" if len(files) == 1 else f"headers of {len(files)} files"
        return _sum_headers(files, label)
    return None


def _read_index(path: Path) -> dict[str, Any]:
    try:
        index = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(f"{path}: cannot be read as JSON ({err})") from err
    metadata = index.get("metadata") if isinstance(index, dict) else None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    total = metadata.get("total_size") if isinstance(metadata, dict) else None
    if isinstance(total, float) and total.is_integer():
        total = int(total)
    if not isinstance(weight_map, dict) or not isinstance(total, int) or total < 0:
        raise InputError(f"{path}: expected 'metadata.total_size' and 'weight_map' entries")
    return {"total_size": total, "weight_map": weight_map}


def _whole(config: Mapping[str, Any], key: str) -> int | None:
    value = config.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def count_dense_parameters(model_type: str, config: Mapping[str, Any]) -> int | None:
    """Exact parameters of a dense decoder from its config (embeddings, attention with its
    biases and QK norms, gated MLP, norms, LM head unless tied). None for other families or
    when a needed field is missing."""
    if model_type not in DENSE_TYPES:
        return None
    hidden, layers = _whole(config, "hidden_size"), _whole(config, "num_hidden_layers")
    vocab, heads = _whole(config, "vocab_size"), _whole(config, "num_attention_heads")
    inter = _whole(config, "intermediate_size")
    if hidden is None or layers is None or vocab is None or heads is None or inter is None:
        return None
    kv = _whole(config, "num_key_value_heads") or heads
    head_dim = _whole(config, "head_dim") or hidden // heads
    q, k = heads * head_dim, kv * head_dim
    attention = hidden * q + 2 * hidden * k + q * hidden
    biased = bool(config.get("attention_bias"))
    if model_type == "qwen2" or biased:
        attention += q + 2 * k + (hidden if biased else 0)
    if model_type == "qwen3":
        attention += 2 * head_dim  # q_norm and k_norm
    mlp = 3 * hidden * inter + ((2 * inter + hidden) if config.get("mlp_bias") else 0)
    norms = (4 if model_type == "gemma2" else 2) * hidden
    tied = config.get("tie_word_embeddings")
    tied = model_type in _TIED_BY_DEFAULT if tied is None else bool(tied)
    embeddings = vocab * hidden * (1 if tied else 2)
    return embeddings + layers * (attention + mlp + norms) + hidden
