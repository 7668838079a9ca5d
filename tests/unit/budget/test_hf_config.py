"""Reading config.json: files and directories, the mess real configs contain, and refusals that
name the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from oomtrace.budget import kv_spec, load_architecture
from oomtrace.errors import ConfigError
from tests.unit.budget.factories import CONFIGS, write_config


def test_a_model_directory_and_its_config_file_load_the_same_model() -> None:
    by_dir = load_architecture(CONFIGS / "llama-3.1-8b")
    by_file = load_architecture(CONFIGS / "llama-3.1-8b" / "config.json")
    assert by_dir == by_file
    assert by_dir.name == "llama-3.1-8b"
    assert by_dir.context_tokens == 131072


def test_a_missing_path_is_refused_with_the_remedy(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as raised:
        load_architecture(tmp_path / "nope")
    assert str(raised.value) == (
        f"--config {tmp_path / 'nope'}: no such file or directory; pass a model's config.json "
        "or the directory that holds it"
    )


def test_a_directory_without_config_json_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"the directory has no config\.json"):
        load_architecture(tmp_path)


def test_malformed_json_names_the_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama",\n  "num_hidden_layers": 32,,\n}', encoding="utf-8")
    with pytest.raises(ConfigError) as raised:
        load_architecture(path)
    assert str(raised.value).startswith(f"{path}: not valid JSON (line 2 column 27: ")


def test_a_json_array_is_not_a_config(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(ConfigError, match="is a list, expected a JSON object"):
        load_architecture(path)


def test_infinity_and_nan_in_a_config_are_read_as_python_does(tmp_path: Path) -> None:
    path = write_config(tmp_path, time_step_limit=[0.0, float("inf")], rope_scaling=float("nan"))
    text = path.read_text(encoding="utf-8")
    assert "Infinity" in text
    assert "NaN" in text
    assert load_architecture(path).num_layers == 4


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("32", "'32' (a string)"),
        (True, "True (a boolean)"),
        (4.5, "4.5 (a number with a fraction)"),
    ],
)
def test_a_field_of_the_wrong_type_is_named_with_its_value(
    tmp_path: Path, value: object, shown: str
) -> None:
    path = write_config(tmp_path, num_hidden_layers=value)
    with pytest.raises(ConfigError) as raised:
        load_architecture(path)
    assert str(raised.value) == (
        f"{path}: field 'num_hidden_layers' is {shown}, expected a whole number; "
        "fix the file or give the architecture with --layers, --kv-heads and --head-dim"
    )


def test_an_integral_float_is_accepted(tmp_path: Path) -> None:
    model = load_architecture(write_config(tmp_path, num_hidden_layers=4.0))
    assert model.num_layers == 4


def test_a_zero_head_dim_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"field 'head_dim' is 0, expected a whole number >= 1"):
        load_architecture(write_config(tmp_path, head_dim=0))


def test_transformers_5_dtype_key_is_read(tmp_path: Path) -> None:
    model = load_architecture(write_config(tmp_path, torch_dtype=..., dtype="float16"))
    assert (model.dtype, model.dtype_source) == ("float16", "config 'dtype'")


def test_an_unknown_dtype_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="field 'torch_dtype' is 'bfloat17', not a dtype"):
        load_architecture(write_config(tmp_path, torch_dtype="bfloat17"))


def test_a_float32_model_caches_four_bytes_per_element(tmp_path: Path) -> None:
    model = load_architecture(write_config(tmp_path, torch_dtype="float32"))
    # 4 layers x 2 x 2 KV heads x (512/8 = 64) x 4 B
    assert kv_spec(model).kv_bytes_per_token == 4 * 2 * 2 * 64 * 4


def test_a_config_without_model_type_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="has no 'model_type' field"):
        load_architecture(write_config(tmp_path, model_type=...))


def test_an_unknown_model_type_is_refused_not_sized_with_the_standard_formula(
    tmp_path: Path,
) -> None:
    path = write_config(tmp_path, model_type="frobnicator")
    with pytest.raises(ConfigError) as raised:
        load_architecture(path)
    assert str(raised.value) == (
        f"{path}: model_type 'frobnicator' is not one oomtrace knows how to size; "
        "give the architecture with --layers, --kv-heads and --head-dim"
    )


def test_latent_attention_in_an_unknown_model_is_refused_naming_kv_lora_rank(
    tmp_path: Path,
) -> None:
    path = write_config(tmp_path, model_type="glm_moe_lite", kv_lora_rank=512, qk_rope_head_dim=64)
    with pytest.raises(ConfigError, match=r"field 'kv_lora_rank' .* not applied"):
        load_architecture(path)


def test_latent_attention_in_a_standard_family_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"field 'kv_lora_rank' .* in a llama config"):
        load_architecture(write_config(tmp_path, kv_lora_rank=512))


def test_an_unknown_layer_type_is_refused_with_its_position(tmp_path: Path) -> None:
    types = ["full_attention", "full_attention", "local_attention", "full_attention"]
    with pytest.raises(ConfigError, match="'layer_types' has 'local_attention' at layer 2"):
        load_architecture(write_config(tmp_path, layer_types=types))


def test_layer_types_must_cover_every_layer(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="lists 2 layers, but the model has 4"):
        load_architecture(write_config(tmp_path, layer_types=["full_attention"] * 2))


def test_sliding_layers_without_a_window_are_refused(tmp_path: Path) -> None:
    types = ["sliding_attention", "full_attention"] * 2
    with pytest.raises(ConfigError, match="'sliding_window' is missing but layers slide"):
        load_architecture(write_config(tmp_path, layer_types=types))


def test_qwen_with_sliding_enabled_slides_only_from_max_window_layers(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        model_type="qwen2",
        use_sliding_window=True,
        sliding_window=1024,
        max_window_layers=2,
    )
    kinds = [layer.kind for layer in load_architecture(path).attention]
    assert kinds == ["full", "full", "sliding", "sliding"]


def test_gemma_3_newer_spelling_of_the_pattern_is_read(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        model_type="gemma3_text",
        head_dim=256,
        sliding_window=512,
        _sliding_window_pattern=2,
    )
    kinds = [layer.kind for layer in load_architecture(path).attention]
    assert kinds == ["sliding", "full", "sliding", "full"]


def test_gemma_3_text_config_missing_head_counts_gets_transformers_defaults(
    tmp_path: Path,
) -> None:
    # GIVEN a multimodal Gemma-3 text_config that omits heads and head_dim (as gemma-3-4b-it does)
    path = write_config(
        tmp_path,
        model_type="gemma3",
        num_hidden_layers=...,
        num_attention_heads=...,
        num_key_value_heads=...,
        text_config={
            "model_type": "gemma3_text",
            "num_hidden_layers": 6,
            "hidden_size": 2560,
            "sliding_window": 1024,
        },
    )
    model = load_architecture(path)
    # THEN Gemma3TextConfig's defaults (4 KV heads of 256) apply, and the notes say so
    assert kv_spec(model).kv_bytes_per_token == 6 * 2 * 4 * 256 * 2
    assert any("text_config.num_key_value_heads absent" in n for n in model.notes)


def test_llama_4_explicit_no_rope_layers_decide_the_global_layers(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        model_type="llama4_text",
        attention_chunk_size=8192,
        head_dim=128,
        no_rope_layers=[1, 0, 1, 0],
    )
    kinds = [layer.kind for layer in load_architecture(path).attention]
    assert kinds == ["chunked", "full", "chunked", "full"]


def test_nemotron_h_unknown_block_character_is_refused(tmp_path: Path) -> None:
    path = write_config(
        tmp_path,
        model_type="nemotron_h",
        hybrid_override_pattern="M*X-",
        mamba_num_heads=8,
        mamba_head_dim=64,
        n_groups=1,
        ssm_state_size=16,
        conv_kernel=4,
    )
    with pytest.raises(ConfigError, match="block type 'X'"):
        load_architecture(path)
