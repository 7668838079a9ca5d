"""vLLM's admission view: the reservation per request, reproduced from docs/kv-math.md §1.7's worked
examples (max_model_len 32,768, block size 16), with the arithmetic written out."""

from __future__ import annotations

import pytest

from oomtrace.budget import KVSpec, vllm_view
from tests.unit.budget.factories import spec

GiB = 2**30


def test_full_attention_reserves_what_is_resident_and_logs_5x_on_20_gib() -> None:
    llama = KVSpec.from_explicit(layers=32, kv_heads=8, head_dim=128, dtype_bytes=2)
    view = vllm_view(llama, 32768, 20 * GiB)
    # page = 16 x 2 x 8 x 128 x 2 = 65,536 B per layer; cdiv(32768, 16) = 2,048 blocks
    assert view.reserved_bytes_per_sequence == 32 * 2048 * 65_536 == llama.sequence_bytes(32768)
    # num_blocks = 20 GiB // 65,536 // 32 = 10,240; 10,240 / 2,048 = 5
    assert view.max_sequences == 5
    assert vllm_view(llama, 131_072, 20 * GiB).max_sequences == 1  # 10,240 / 8,192 = 1.25


@pytest.mark.parametrize(("batched", "expected"), [(2048, 807_403_520), (8192, 1_612_709_888)])
def test_mistral_sliding_layers_reserve_the_window_plus_one_prefill_step(
    batched: int, expected: int
) -> None:
    view = vllm_view(spec("mistral-7b-v0.1"), 32768, 40 * GiB, max_num_batched_tokens=batched)
    # (cdiv(min(4095 + T, 32768), 16) + 1) blocks x 65,536 B x 32 layers
    assert view.reserved_bytes_per_sequence == (-(-(4095 + batched) // 16) + 1) * 65_536 * 32
    assert view.reserved_bytes_per_sequence == expected
    assert expected > 536_870_912  # what is resident once the window is full


@pytest.mark.parametrize(("batched", "expected"), [(2048, 859_176_960), (8192, 1_010_171_904)])
def test_gpt_oss_two_groups_of_12(batched: int, expected: int) -> None:
    view = vllm_view(spec("gpt-oss-20b"), 32768, 40 * GiB, max_num_batched_tokens=batched)
    # 12 x 32,768 B x (2,048 full blocks + cdiv(min(127 + T, L), 16) + 1 sliding blocks)
    assert view.reserved_bytes_per_sequence == 12 * 32_768 * (2048 + -(-(127 + batched) // 16) + 1)
    assert view.reserved_bytes_per_sequence == expected
    assert (view.group_size, view.padding_layers) == (12, 0)


@pytest.mark.parametrize(("batched", "expected"), [(2048, 4_202_168_320), (8192, 7_222_067_200)])
def test_gemma_3_groups_of_10_pad_the_sliding_layers(batched: int, expected: int) -> None:
    view = vllm_view(spec("gemma-3-27b-it"), 32768, 80 * GiB, max_num_batched_tokens=batched)
    # 52 >= 1.5 x 10 -> groups of 10; sliding bucket cut into 6 groups (8 empty slots)
    sliding_blocks = -(-min(1023 + batched, 32768) // 16) + 1
    assert view.reserved_bytes_per_sequence == 10 * 131_072 * (2048 + 6 * sliding_blocks)
    assert view.reserved_bytes_per_sequence == expected
    assert (view.group_size, view.padding_layers) == (10, 8)
    assert any("8 padding layer slots" in note for note in view.notes)


def test_jamba_attention_blocks_are_raised_to_hold_one_mamba_state() -> None:
    view = vllm_view(spec("jamba-v0.1"), 32768, 80 * GiB)
    # attention 4,096 B/token; Mamba page 311,296 B -> 16 x cdiv(311,296, 65,536) = 80 tokens,
    # page 327,680 B; 1 attention group + 7 Mamba groups of 4
    assert view.block_size == 80
    assert view.reserved_bytes_per_sequence == 4 * 327_680 * (-(-32768 // 80) + 7) == 546_570_240


def test_a_pure_mamba_model_reserves_one_state_page_per_layer() -> None:
    codestral = spec("mamba-codestral-7b")
    view = vllm_view(codestral, 1_000_000, 10 * GiB)
    assert view.reserved_bytes_per_sequence == 64 * 2_158_592
    assert view.max_sequences == 10 * GiB // (64 * 2_158_592)
