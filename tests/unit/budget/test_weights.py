"""Weights: parameter counts as typed, exact counts from dense configs (checked against the
published parameter counts), and safetensors headers read without their data."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from oomtrace.budget.architecture import explicit_architecture, load_architecture
from oomtrace.budget.layers import ModelArchitecture
from oomtrace.budget.weights import (
    checkpoint_tensors,
    count_dense_parameters,
    parse_param_count,
    read_safetensors_header,
)
from oomtrace.budget.worksheet import resolve_weights
from oomtrace.errors import ConfigError, InputError, UsageError
from tests.unit.budget.factories import CONFIGS, arch, write_config, write_safetensors


@pytest.mark.parametrize(
    ("text", "count"),
    [
        ("7e9", 7_000_000_000),
        ("7B", 7_000_000_000),
        ("70.6b", 70_600_000_000),
        ("8,030,261,248", 8_030_261_248),
        ("405M", 405_000_000),
        ("1.5T", 1_500_000_000_000),
    ],
)
def test_parameter_counts_read_as_people_write_them(text: str, count: int) -> None:
    assert parse_param_count(text) == count


@pytest.mark.parametrize("text", ["seven", "7G", "1e-3", "0", "7.5"])
def test_a_parameter_count_that_is_not_a_whole_number_is_refused(text: str) -> None:
    with pytest.raises(UsageError, match=f"--params '{text}'"):
        parse_param_count(text)


@pytest.mark.parametrize(
    ("model", "params"),
    [
        # embeddings 128,256 x 4,096 x 2 (untied) + 32 x (attention 41,943,040 + MLP
        # 3 x 4,096 x 14,336 + 2 norms x 4,096) + final norm 4,096
        ("llama-3.1-8b", 2 * 128_256 * 4096 + 32 * (41_943_040 + 3 * 4096 * 14_336 + 8192) + 4096),
        ("llama-3.1-70b", 70_553_706_496),
        ("mistral-7b-v0.1", 7_241_732_096),
        # qkv biases 3,584 + 2 x 512 per layer
        ("qwen2.5-7b-instruct", 7_615_616_512),
        # q_norm and k_norm (128 each) per layer
        ("qwen3-32b", 32_762_123_264),
        # tied embeddings, four norms per layer
        ("gemma-2-9b-it", 9_241_705_984),
        # 3,821,079,552: the count keras-hub publishes for Phi-3-mini
        ("phi-3-mini-4k-instruct", 3_821_079_552),
    ],
)
def test_dense_decoders_are_counted_exactly_from_their_config(model: str, params: int) -> None:
    loaded = arch(model)
    assert count_dense_parameters(loaded.model_type, loaded.config) == params


def test_the_llama_8b_count_is_its_published_8_03_billion() -> None:
    loaded = arch("llama-3.1-8b")
    assert count_dense_parameters(loaded.model_type, loaded.config) == 8_030_261_248


@pytest.mark.parametrize("model", ["deepseek-v3", "mixtral-8x7b", "jamba-v0.1", "gemma-3-27b-it"])
def test_models_that_cannot_be_counted_from_config_ask_for_params(model: str) -> None:
    with pytest.raises(ConfigError, match="pass --params"):
        resolve_weights(
            arch=arch(model),
            params=None,
            weights_bytes=None,
            weight_dtype="auto",
            tensor_parallel=1,
        )


def _weights(model: ModelArchitecture, **options: object) -> tuple[int, int, str]:
    base: dict[str, object] = {
        "params": None,
        "weights_bytes": None,
        "weight_dtype": "auto",
        "tensor_parallel": 1,
    }
    base.update(options)
    w = resolve_weights(arch=model, **base)  # type: ignore[arg-type]
    return w.total_bytes, w.per_gpu_bytes, w.basis


def test_params_times_bytes_per_weight_and_tensor_parallel_shards_it() -> None:
    model = explicit_architecture(layers=32, kv_heads=8, head_dim=128)
    assert _weights(model, params=7_000_000_000)[:2] == (14_000_000_000, 14_000_000_000)
    assert _weights(model, params=7_000_000_000, weight_dtype="int4")[0] == 3_500_000_000
    assert _weights(model, params=7_000_000_001, weight_dtype="int4")[0] == 3_500_000_001
    assert _weights(model, params=7_000_000_000, tensor_parallel=4)[1] == 3_500_000_000


def test_explicit_architecture_without_weights_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="no weights: give --params"):
        _weights(explicit_architecture(layers=1, kv_heads=1, head_dim=1))


def test_params_and_weights_bytes_together_are_refused() -> None:
    with pytest.raises(UsageError, match="either --params or --weights-bytes"):
        _weights(arch("llama-3.1-8b"), params=1, weights_bytes=1)


def test_safetensors_headers_are_summed_by_dtype(tmp_path: Path) -> None:
    # GIVEN a two-file checkpoint: BF16 and F32 tensors, and fp8 weights with F32 scales
    write_safetensors(
        tmp_path / "a.safetensors",
        {"w": ("BF16", [1024, 512], 1024 * 512 * 2), "n": ("F32", [512], 2048)},
    )
    write_safetensors(
        tmp_path / "b.safetensors",
        {"q": ("F8_E4M3", [4096, 128], 4096 * 128), "s": ("F32", [32], 128)},
    )
    # WHEN the headers are read
    tensors = checkpoint_tensors(tmp_path)
    # THEN the bytes are the tensors' own sizes, split by stored dtype, largest first
    assert tensors is not None
    assert tensors.total_bytes == 1_048_576 + 2048 + 524_288 + 128
    assert tensors.by_dtype == (("BF16", 1_048_576), ("F8_E4M3", 524_288), ("F32", 2176))
    assert tensors.tensors == 4
    assert tensors.dominant_float_dtype() == "bfloat16"


def test_the_header_is_read_without_reading_tensor_data(tmp_path: Path) -> None:
    # GIVEN a file whose data region is absent (only the header is there)
    header = json.dumps({"w": {"dtype": "F16", "shape": [2**20], "data_offsets": [0, 2**21]}})
    path = tmp_path / "x.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header.encode())
    # THEN the 2 MiB tensor is still counted from the header alone
    assert read_safetensors_header(path)["w"]["shape"] == [2**20]
    assert checkpoint_tensors(tmp_path).total_bytes == 2**21  # type: ignore[union-attr]


def test_a_header_whose_offsets_disagree_with_its_shape_is_refused(tmp_path: Path) -> None:
    header = json.dumps({"w": {"dtype": "F16", "shape": [10], "data_offsets": [0, 10]}})
    path = tmp_path / "bad.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header.encode())
    with pytest.raises(InputError, match=r"tensor 'w' is F16 \[10\] but its offsets span 10"):
        checkpoint_tensors(tmp_path)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"\x01\x02", "too short"),
        (struct.pack("<Q", 2**40), "implausible"),
        (struct.pack("<Q", 100) + b"{}", "cut short"),
        (struct.pack("<Q", 4) + b"nope", "not valid JSON"),
    ],
)
def test_a_file_that_is_not_safetensors_is_refused(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    path = tmp_path / "model.safetensors"
    path.write_bytes(content)
    with pytest.raises(InputError, match=problem):
        read_safetensors_header(path)


def test_the_index_total_size_is_used_when_shards_are_absent(tmp_path: Path) -> None:
    index = {
        "metadata": {"total_size": 16_060_522_496},
        "weight_map": {
            "a": "model-00001-of-00002.safetensors",
            "b": "model-00002-of-00002.safetensors",
        },
    }
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index), encoding="utf-8")
    tensors = checkpoint_tensors(tmp_path)
    assert tensors is not None
    assert tensors.total_bytes == 16_060_522_496
    assert (
        tensors.source == "model.safetensors.index.json metadata.total_size (0 of 2 shards present)"
    )


def test_a_config_directory_with_a_checkpoint_is_weighed_from_its_headers(tmp_path: Path) -> None:
    write_config(tmp_path)
    write_safetensors(tmp_path / "model.safetensors", {"w": ("BF16", [1000], 2000)})
    model = load_architecture(tmp_path)
    total, _, basis = _weights(model)
    assert (total, basis) == (2000, "checkpoint tensors (header of 1 file)")
    with pytest.raises(UsageError, match="--weight-dtype int4 applies to a parameter count"):
        _weights(model, weight_dtype="int4")


def test_exact_count_path_states_its_basis() -> None:
    total, _, basis = _weights(load_architecture(CONFIGS / "llama-3.1-8b"))
    assert total == 8_030_261_248 * 2
    assert basis == "8,030,261,248 params (exact, from config.json) x 2 B (bfloat16)"
