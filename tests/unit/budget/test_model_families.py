"""Every attention/state family against real public config.json files (tests/data/configs, each
with its SOURCE.md). Expected numbers are written out by hand from docs/kv-math.md's rules, never
computed by the code under test. "seq(N)" below means one sequence of N stored tokens without
block rounding (block_size=1)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from oomtrace.budget import kv_spec, load_architecture
from oomtrace.errors import ConfigError
from tests.unit.budget.factories import CONFIGS, arch, spec, write_safetensors


def test_llama_3_1_8b_stores_8_kv_heads_not_32_query_heads() -> None:
    # GIVEN Llama-3.1-8B: 32 layers, 32 query heads, 8 KV heads, head dim 4096/32 = 128, bf16
    kv = spec("llama-3.1-8b")
    # THEN 2 (K,V) x 32 layers x 8 KV heads x 128 x 2 B
    assert kv.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2 == 131_072
    assert kv.sequence_bytes(4096, block_size=1) == 131_072 * 4096 == 536_870_912  # 0.5 GiB


def test_llama_3_1_70b_is_320_kib_per_token() -> None:
    assert spec("llama-3.1-70b").kv_bytes_per_token == 2 * 80 * 8 * 128 * 2 == 327_680


def test_qwen2_5_ignores_its_sliding_window_when_use_sliding_window_is_false() -> None:
    # GIVEN a config with sliding_window 131072 but use_sliding_window false
    model = arch("qwen2.5-7b-instruct")
    kv = kv_spec(model)
    # THEN every layer is full attention: 2 x 28 x 4 x 128 x 2
    assert {layer.kind for layer in model.attention} == {"full"}
    assert kv.kv_bytes_per_token == kv.unbounded_kv_bytes_per_token == 2 * 28 * 4 * 128 * 2
    assert any("use_sliding_window is false" in note for note in model.notes)


def test_qwen3_32b_uses_its_explicit_head_dim_not_hidden_over_heads() -> None:
    kv = spec("qwen3-32b")
    assert kv.kv_bytes_per_token == 2 * 64 * 8 * 128 * 2 == 262_144
    assert kv.kv_bytes_per_token != 2 * 64 * 8 * (5120 // 64) * 2  # the hidden/heads trap


def test_mistral_7b_v0_1_slides_every_layer_so_32k_costs_the_same_as_4k() -> None:
    kv = spec("mistral-7b-v0.1")
    assert kv.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2
    assert kv.unbounded_kv_bytes_per_token == 0
    assert kv.sequence_bytes(4096, 1) == kv.sequence_bytes(32768, 1) == 131_072 * 4096


def test_mixtral_with_a_null_sliding_window_keeps_every_token() -> None:
    kv = spec("mixtral-8x7b")
    assert kv.sequence_bytes(32768, 1) == 131_072 * 32768 == 4_294_967_296


def test_phi_3_mini_applies_its_2047_window_to_all_layers() -> None:
    kv = spec("phi-3-mini-4k-instruct")
    # MHA: 32 KV heads of 3072/32 = 96
    assert kv.kv_bytes_per_token == 2 * 32 * 32 * 96 * 2 == 393_216
    assert kv.sequence_bytes(4096, 1) == 393_216 * 2047 == 804_913_152
    assert kv.sequence_bytes(4096, 1) != 393_216 * 4096  # 1,610,612,736: window ignored


def test_gemma_2_alternates_sliding_and_global_starting_with_sliding() -> None:
    model = arch("gemma-2-9b-it")
    assert [layer.kind for layer in model.attention[:4]] == ["sliding", "full"] * 2
    kv = kv_spec(model)
    per_layer = 2 * 8 * 256 * 2  # 8,192 B
    assert kv.kv_bytes_per_token == 42 * per_layer
    assert kv.unbounded_kv_bytes_per_token == 21 * per_layer
    assert kv.sequence_bytes(4096, 1) == 42 * per_layer * 4096 == 1_409_286_144
    assert kv.sequence_bytes(32768, 1) == 21 * per_layer * (32768 + 4096) == 6_341_787_648


def test_gemma_3_multimodal_reads_text_config_and_the_root_dtype() -> None:
    model = arch("gemma-3-27b-it")
    assert model.model_type == "gemma3_text"
    assert (model.dtype, model.dtype_source) == ("bfloat16", "config 'torch_dtype'")
    globals_ = [layer.index for layer in model.attention if layer.kind == "full"]
    assert globals_ == list(range(5, 62, 6))  # i = 5, 11, ..., 59: 10 global layers
    kv = kv_spec(model)
    per_layer = 2 * 16 * 128 * 2  # 8,192 B
    assert kv.sequence_bytes(4096, 1) == 10 * per_layer * 4096 + 52 * per_layer * 1024
    assert kv.sequence_bytes(4096, 1) == 771_751_936
    assert kv.sequence_bytes(32768, 1) == 2_684_354_560 + 436_207_616 == 3_120_562_176
    assert kv.sequence_bytes(32768, 1) != 62 * per_layer * 32768  # naive 16,642,998,272


def test_gpt_oss_without_a_dtype_key_assumes_bfloat16_and_says_so() -> None:
    model = arch("gpt-oss-20b")
    assert model.dtype is None
    kv = kv_spec(model)
    assert kv.kv_dtype == "bfloat16"
    assert any("not stated: assumed bfloat16" in note for note in kv.assumptions)
    per_layer = 2 * 8 * 64 * 2  # 2,048 B
    assert kv.sequence_bytes(4096, 1) == 12 * per_layer * 4096 + 12 * per_layer * 128
    assert kv.sequence_bytes(4096, 1) == 103_809_024
    assert kv.sequence_bytes(32768, 1) == 808_452_096


def test_gpt_oss_takes_its_dtype_from_checkpoint_tensors_when_they_are_beside_it(
    tmp_path: Path,
) -> None:
    # GIVEN the real config next to a checkpoint whose bytes are mostly BF16 (plus MXFP4 as U8)
    model_dir = tmp_path / "gpt-oss-20b"
    shutil.copytree(CONFIGS / "gpt-oss-20b", model_dir)
    write_safetensors(
        model_dir / "model-00001-of-00001.safetensors",
        {"embed": ("BF16", [64, 32], 64 * 32 * 2), "blocks": ("U8", [1000], 1000)},
    )
    # WHEN it is loaded
    model = load_architecture(model_dir)
    # THEN the dtype is bfloat16, from the tensors, and the note says so
    assert (model.dtype, model.dtype_source) == ("bfloat16", "checkpoint tensors")
    assert kv_spec(model).assumptions == ()


def test_deepseek_v3_mla_caches_the_latent_once_without_heads_or_factor_two() -> None:
    kv = spec("deepseek-v3")
    assert kv.kv_bytes_per_token == 61 * (512 + 64) * 2 == 70_272
    assert kv.kv_bytes_per_token != 61 * 128 * (192 + 128) * 2  # GQA trap: 4,997,120
    assert kv.sequence_bytes(4096, 1) == 287_834_112
    assert spec("deepseek-v3", kv_cache_dtype="fp8").kv_bytes_per_token == 61 * 576 * 1
    # every TP rank keeps the whole latent
    assert spec("deepseek-v3", tensor_parallel=8).kv_bytes_per_token == 70_272


def test_deepseek_v3_mtp_layer_is_noted_not_counted() -> None:
    model = arch("deepseek-v3")
    assert len(model.attention) == 61
    assert any("num_nextn_predict_layers 1" in note for note in model.notes)


def test_kimi_k2_is_mla_with_the_same_ranks() -> None:
    assert spec("kimi-k2-instruct").kv_bytes_per_token == 61 * 576 * 2


def test_llama_4_scout_empty_no_rope_layers_means_every_fourth_layer_is_global() -> None:
    model = arch("llama-4-scout-17b-16e-instruct")
    assert [layer.index for layer in model.attention if layer.kind == "full"] == list(
        range(3, 48, 4)
    )
    kv = kv_spec(model)
    per_layer = 2 * 8 * 128 * 2  # 4,096 B
    assert kv.sequence_bytes(4096, 1) == 48 * per_layer * 4096 == 805_306_368
    assert kv.sequence_bytes(32768, 1) == 12 * per_layer * 32768 + 36 * per_layer * 8192
    assert kv.sequence_bytes(32768, 1) == 2_818_572_288


def test_llama_4_chunked_layers_peak_when_a_chunk_is_full_not_after_it_restarts() -> None:
    kv = spec("llama-4-scout-17b-16e-instruct")
    per_layer = 4096
    # at 10,000 tokens a chunked layer holds ((10000-1) mod 8192)+1 = 1,808 tokens ...
    now = 12 * per_layer * 10_000 + 36 * per_layer * 1808
    assert kv.sequence_bytes(10_000, 1) == now == 758_120_448
    # ... but on its way there, at 8,192 tokens, every layer held 8,192
    assert kv.peak_sequence_bytes(10_000, 1) == 48 * per_layer * 8192 == 1_610_612_736


def test_jamba_keeps_kv_in_4_attention_layers_and_mamba_1_state_in_28() -> None:
    model = arch("jamba-v0.1")
    assert [layer.index for layer in model.attention] == [4, 12, 20, 28]
    kv = kv_spec(model)
    assert kv.kv_bytes_per_token == 4 * 2 * 8 * 128 * 2 == 16_384
    # d_inner = 2 x 4096; conv (4-1) x 8192, ssm 8192 x 16, bf16
    assert kv.state_bytes_per_sequence == 28 * (3 * 8192 + 8192 * 16) * 2 == 8_716_288
    assert kv.sequence_bytes(4096, 1) == 16_384 * 4096 + 8_716_288 == 75_825_152


def test_fp8_halves_jamba_attention_but_not_its_mamba_state() -> None:
    kv = spec("jamba-v0.1", kv_cache_dtype="fp8")
    assert kv.kv_bytes_per_token == 16_384 // 2
    assert kv.state_bytes_per_sequence == 8_716_288


def test_a_float32_ssm_state_doubles_only_the_ssm_part() -> None:
    kv = spec("jamba-v0.1", mamba_ssm_cache_dtype="float32")
    assert kv.state_bytes_per_sequence == 28 * (3 * 8192 * 2 + 8192 * 16 * 4) == 16_056_320


def test_nemotron_h_reads_its_pattern_and_its_infinity() -> None:
    # GIVEN the real file, whose time_step_limit holds the non-JSON literal Infinity
    assert "Infinity" in (CONFIGS / "nemotron-h-56b" / "config.json").read_text()
    model = arch("nemotron-h-56b")
    assert (len(model.attention), len(model.recurrent), model.num_layers) == (10, 54, 118)
    kv = kv_spec(model, mamba_ssm_cache_dtype="bfloat16")
    assert kv.kv_bytes_per_token == 10 * 2 * 8 * 128 * 2 == 40_960
    # d_inner = 256 heads x 64; conv (4-1) x (16,384 + 2 x 8 groups x 256); ssm 256 x 64 x 256
    per_layer = (3 * (16_384 + 4_096) + 256 * 64 * 256) * 2
    assert kv.state_bytes_per_sequence == 54 * per_layer == 459_620_352


def test_nemotron_h_ssm_state_defaults_to_float32_as_vllm_does() -> None:
    model = arch("nemotron-h-56b")
    assert model.state_dtype == "float32"
    kv = kv_spec(model)
    assert kv.state_bytes_per_sequence == 54 * (3 * 20_480 * 2 + 256 * 64 * 256 * 4)
    assert kv.state_bytes_per_sequence == 912_605_184


def test_nemotron_3_nano_takes_its_ssm_dtype_from_the_config() -> None:
    model = arch("nemotron-3-nano-30b")
    assert (model.state_dtype, model.state_dtype_source) == (
        "float32",
        "config 'mamba_ssm_cache_dtype'",
    )
    kv = kv_spec(model)
    assert kv.kv_bytes_per_token == 6 * 2 * 2 * 128 * 2 == 6_144
    conv = 3 * (64 * 64 + 2 * 8 * 128) * 2  # bf16 conv state
    ssm = 64 * 64 * 128 * 4  # float32 SSM state
    assert kv.state_bytes_per_sequence == 23 * (conv + ssm) == 49_082_368


def test_falcon_h1_counts_attention_and_mamba_in_every_layer() -> None:
    model = arch("falcon-h1-0.5b-instruct")
    assert len(model.attention) == len(model.recurrent) == 36
    kv = kv_spec(model)
    assert kv.kv_bytes_per_token == 36 * 2 * 2 * 64 * 2 == 18_432
    per_layer = (3 * (1536 + 2 * 1 * 128) + 24 * 64 * 128) * 2  # 403,968 B
    assert kv.state_bytes_per_sequence == 36 * per_layer == 14_542_848


def test_qwen3_next_has_12_full_layers_and_36_gated_deltanet_states() -> None:
    model = arch("qwen3-next-80b-a3b")
    assert [layer.index for layer in model.attention] == list(range(3, 48, 4))
    kv = kv_spec(model)
    assert kv.kv_bytes_per_token == 12 * 2 * 2 * 256 * 2 == 24_576
    per_layer = (3 * (2 * 16 * 128 + 32 * 128) + 32 * 128 * 128) * 2  # 1,097,728 B
    assert kv.state_bytes_per_sequence == 36 * per_layer == 39_518_208
    assert kv.sequence_bytes(4096, 1) == 24_576 * 4096 + 39_518_208 == 140_181_504
    fp8 = kv_spec(model, kv_cache_dtype="fp8")
    assert (fp8.kv_bytes_per_token, fp8.state_bytes_per_sequence) == (12_288, 39_518_208)


def test_qwen3_5_nested_layer_types_and_float32_recurrent_state() -> None:
    model = arch("qwen3.5-27b")
    assert (len(model.attention), len(model.recurrent)) == (16, 48)
    kv = kv_spec(model)
    assert kv.kv_bytes_per_token == 16 * 2 * 4 * 256 * 2 == 65_536
    conv = 3 * (2 * 16 * 128 + 48 * 128) * 2
    recurrent = 48 * 128 * 128 * 4  # mamba_ssm_dtype float32
    assert kv.state_bytes_per_sequence == 48 * (conv + recurrent) == 153_944_064


def test_mamba_codestral_has_no_kv_only_a_constant_state() -> None:
    kv = spec("mamba-codestral-7b")
    per_layer = (3 * (8192 + 2 * 8 * 128) + 128 * 64 * 128) * 2  # 2,158,592 B
    assert kv.kv_bytes_per_token == 0
    assert kv.state_bytes_per_sequence == 64 * per_layer == 138_149_888
    assert kv.sequence_bytes(1, 1) == kv.sequence_bytes(1_000_000, 1) == 138_149_888


def test_falcon_7b_multi_query_is_one_kv_head_on_every_gpu() -> None:
    kv = spec("falcon-7b")
    assert kv.kv_bytes_per_token == 2 * 32 * 1 * (4544 // 71) * 2 == 8_192
    assert spec("falcon-7b", tensor_parallel=2).kv_bytes_per_token == 8_192  # replicated


def test_jamba_under_tensor_parallel_shards_heads_and_mamba_channels() -> None:
    kv = spec("jamba-v0.1", tensor_parallel=2)
    assert kv.kv_bytes_per_token == 4 * 2 * (8 // 2) * 128 * 2
    assert kv.state_bytes_per_sequence == 28 * (3 * 4096 + 4096 * 16) * 2


@pytest.mark.parametrize(
    ("model", "field"),
    [
        ("gemma-4-26b-a4b", "text_config.global_head_dim"),
        ("deepseek-v3.2", "index_topk"),
    ],
)
def test_models_with_caches_it_does_not_model_are_refused_naming_the_field(
    model: str, field: str
) -> None:
    with pytest.raises(ConfigError, match=f"field '{field}'") as raised:
        arch(model)
    assert "does not model" in str(raised.value)
