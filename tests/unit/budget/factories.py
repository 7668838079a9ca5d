"""Small helpers for budget tests: the committed real configs, and files written on the fly."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from oomtrace.budget import KVSpec, ModelArchitecture, kv_spec, load_architecture

CONFIGS = Path(__file__).resolve().parents[2] / "data" / "configs"
ROOT = Path(__file__).resolve().parents[3]


def arch(model: str) -> ModelArchitecture:
    """A committed real config, by its directory name under tests/data/configs."""
    return load_architecture(CONFIGS / model)


def spec(model: str, **options: Any) -> KVSpec:
    return kv_spec(arch(model), **options)


def write_config(directory: Path, **fields: Any) -> Path:
    """A config.json with a small Llama-like default that each test overrides."""
    base: dict[str, Any] = {
        "model_type": "llama",
        "num_hidden_layers": 4,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "hidden_size": 512,
        "torch_dtype": "bfloat16",
    }
    base.update(fields)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "config.json"
    path.write_text(json.dumps({k: v for k, v in base.items() if v is not ...}), encoding="utf-8")
    return path


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int], int]]) -> None:
    """A real safetensors file: 8-byte little-endian header length, JSON header, then zeroed
    data. ``tensors`` maps name -> (dtype, shape, bytes)."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape, size) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode("utf-8")
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset))
