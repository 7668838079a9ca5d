"""Bytes per request and where they come from."""

from __future__ import annotations

import polars as pl
from polars.testing import assert_series_equal

from oomtrace.analysis.kvmodel import BlockBytes, KVModel, kv_model
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
