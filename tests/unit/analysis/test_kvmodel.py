"""Bytes per request and where they come from."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
from polars.testing import assert_series_equal

from oomtrace.analysis.kvmodel import BlockBytes, KVModel, architecture_spec, kv_model
from oomtrace.schema import empty
from oomtrace.trace import Manifest
from oomtrace.units import GiB, KiB, MiB
from tests.factories import at, samples


def bytes_for(model: KVModel, *tokens: int) -> list[int | None]:
    frame = pl.DataFrame({"tokens": list(tokens)})
    return frame.select(out=model.bytes_expr(pl.col("tokens")))["out"].to_list()


def test_engine_blocks_give_bytes_per_block_and_whole_blocks_per_request() -> None:
    # GIVEN vLLM's startup statements: 12 GiB available for 6,144 blocks of 16 tokens
    manifest = Manifest(
        engine_config={
            "available_kv_cache_bytes": 12 * GiB,
            "num_gpu_blocks": 6144,
            "block_size": 16,
        }
    )
    model = kv_model(manifest, empty("samples"))
    # THEN a block is 2 MiB, and 17 tokens occupy two whole blocks
    assert (model.basis, model.bytes_per_block, model.pool_bytes) == (
        "engine_blocks",
        2 * MiB,
        12 * GiB,
    )
    assert bytes_for(model, 0, 1, 16, 17) == [0, 2 * MiB, 2 * MiB, 4 * MiB]
    assert "÷ 6,144 blocks" in model.statement


def test_engine_tokens_give_bytes_per_token_times_block_size() -> None:
    # GIVEN V1's "GPU KV cache size: 98,304 tokens" and 12 GiB available
    manifest = Manifest(
        engine_config={
            "available_kv_cache_bytes": 12 * GiB,
            "kv_cache_tokens": 98304,
            "block_size": 16,
        }
    )
    model = kv_model(manifest, empty("samples"))
    assert (model.basis, model.bytes_per_token, model.pool_blocks) == (
        "engine_tokens",
        128 * KiB,
        6144,
    )


def test_vllm_v1s_null_block_is_not_part_of_the_pool_a_request_can_fill() -> None:
    # GIVEN vLLM 0.32 on CPU: "GPU KV cache size: 5,120 tokens" in 40 blocks of 128, where the
    # engine keeps block 0 as its null block and reports 100 % usage at 39 blocks in use
    config = {
        "available_kv_cache_bytes": 5 * MiB,
        "num_gpu_blocks": 40,
        "kv_cache_tokens": 5120,
        "block_size": 128,
    }
    v1 = kv_model(
        Manifest(engine={"name": "vllm", "version_family": "v1-0.30"}, engine_config=config),
        empty("samples"),
    )
    # THEN the pool a request can fill is 39 blocks (4,992 tokens), a block still 128 KiB
    assert (v1.pool_blocks, v1.pool_tokens, v1.bytes_per_block) == (39, 4992, 128 * KiB)
    assert "null block" in v1.sources["pool_blocks"]
    # AND V0, which hands out every block, keeps all 40
    v0 = kv_model(
        Manifest(engine={"name": "vllm", "version_family": "v0"}, engine_config=config),
        empty("samples"),
    )
    assert (v0.pool_blocks, v0.pool_tokens) == (40, 5120)


class SlidingWindowSpec:
    """A stand-in for oomtrace.budget's KVSpec: 64 KiB per token, a 4,096-token window."""

    kv_bytes_per_token = 64 * KiB

    def sequence_bytes_expr(self, tokens: pl.Expr, block_size: int) -> pl.Expr:
        kept = pl.min_horizontal(tokens, pl.lit(4096))
        return ((kept + block_size - 1) // block_size) * block_size * self.kv_bytes_per_token


def test_an_architecture_spec_plugs_in_and_wins_over_engine_statements() -> None:
    manifest = Manifest(
        engine_config={
            "available_kv_cache_bytes": 12 * GiB,
            "num_gpu_blocks": 6144,
            "block_size": 16,
        }
    )
    model = kv_model(manifest, empty("samples"), spec=SlidingWindowSpec(), spec_label="config.json")
    assert model.basis == "architecture"
    assert bytes_for(model, 10, 10_000) == [16 * 64 * KiB, 4096 * 64 * KiB]
    # AND the disagreement with the engine's own figure is stated
    assert any("engine's statements imply 128.00 KiB per token" in n for n in model.notes)


def test_without_statements_or_architecture_there_are_no_bytes_and_it_says_why() -> None:
    model = kv_model(Manifest(), empty("samples"))
    assert model.basis == "none"
    assert bytes_for(model, 100) == [None]
    assert any("pass --config" in n for n in model.notes)
    assert any("assumed 16" in n for n in model.notes)


def test_sglang_pages_are_one_token_unless_stated() -> None:
    model = kv_model(Manifest(engine={"name": "sglang"}), empty("samples"))
    assert model.block_size == 1


def test_the_pool_size_can_come_from_samples() -> None:
    observed = samples({"ts": at(0), "metric": "kv_blocks_total", "value": 500.0})
    model = kv_model(Manifest(engine_config={"available_kv_cache_bytes": 500 * MiB}), observed)
    assert (model.pool_blocks, model.bytes_per_block) == (500, MiB)


def test_block_bytes_round_up_to_whole_blocks() -> None:
    spec = BlockBytes(1000)
    got = pl.select(spec.sequence_bytes_expr(pl.Series([0, 15, 16, 33]), 16)).to_series()
    assert_series_equal(got, pl.Series([0, 1000, 1000, 3000]), check_names=False)


# --- what the engine states about itself wins ------------------------------------------------


def test_the_block_size_comes_from_the_engines_figures_and_says_so() -> None:
    # GIVEN vLLM 0.32.0's CPU build: "CPU KV cache size: 5,120 tokens" and the blocks override
    # to 40 blocks; no block size argument (vLLM's default would be 16)
    manifest = Manifest(
        engine={"name": "vllm"}, engine_config={"kv_cache_tokens": 5120, "num_gpu_blocks": 40}
    )
    model = kv_model(manifest, empty("samples"))
    assert (model.block_size, model.block_size_stated, model.pool_blocks) == (128, True, 40)
    assert model.sources["block_size"] == "the engine's figures: 5,120 tokens in 40 blocks"
    assert not any("assumed 16" in n for n in model.notes)


def test_the_engines_figures_beat_a_block_size_argument_that_disagrees() -> None:
    manifest = Manifest(
        engine_config={"block_size": 16, "kv_cache_tokens": 5120, "num_gpu_blocks": 40}
    )
    model = kv_model(manifest, empty("samples"))
    assert model.block_size == 128
    assert any("arguments say block size 16" in n and "used 128" in n for n in model.notes)


def test_the_plugins_figures_are_exact_and_named() -> None:
    # GIVEN the vLLM plugin's engine description: blocks of 128 tokens of 128 KiB over 2 layers
    plugin = "the vLLM plugin (engine core)"
    manifest = Manifest(
        engine_config={
            "block_size": 128,
            "num_gpu_blocks": 40,
            "kv_bytes_per_block": 128 * KiB,
            "available_kv_cache_bytes": round(0.02 * GiB),  # printed, rounded: not used
            "stated_by": dict.fromkeys(
                ("block_size", "num_gpu_blocks", "kv_bytes_per_block"), plugin
            ),
        }
    )
    model = kv_model(manifest, empty("samples"))
    assert (model.basis, model.bytes_per_block, model.pool_bytes) == (
        "engine_groups",
        128 * KiB,
        40 * 128 * KiB,
    )
    assert model.sources["block_size"] == model.sources["pool_blocks"] == plugin
    assert model.sources["bytes_per_block"].startswith(plugin)
    assert bytes_for(model, 1527) == [12 * 128 * KiB]


def test_with_a_config_the_dtype_the_engine_ran_with_wins(tmp_path: Path) -> None:
    # GIVEN a config.json saying bfloat16 and a server whose start-up said dtype float32
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY_LLAMA))
    ran = Manifest(
        engine_config={"dtype": "float32", "kv_cache_tokens": 5120, "num_gpu_blocks": 40}
    )
    spec, label = architecture_spec(config, ran)
    model = kv_model(ran, empty("samples"), spec=spec, spec_label=label)
    # THEN a token is 2 layers x 2 (K, V) x 2 heads x 32 dims x 4 bytes = 1 KiB, not 512 B
    assert model.bytes_per_token == 1024
    assert model.bytes_per_block == 128 * KiB
    assert "dtype float32 from the engine's start-up lines (config: bfloat16)" in label
    # AND without the engine's statement the config's dtype is what there is
    spec, _ = architecture_spec(config, Manifest())
    assert kv_model(Manifest(), empty("samples"), spec=spec).bytes_per_token == 512


TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
    "intermediate_size": 256, "vocab_size": 32000, "max_position_embeddings": 4096,
    "torch_dtype": "bfloat16",
}  # fmt: skip
