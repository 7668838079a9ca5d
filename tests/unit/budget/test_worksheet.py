"""The worksheet from the library: issue 2's worked example, line by line, and the rules for the
reserve, the request contract and what does not fit."""

from __future__ import annotations

from typing import Any

import pytest

from oomtrace.budget import BudgetRequest, compute_budget
from oomtrace.budget.worksheet import Worksheet, check_fits
from oomtrace.errors import DoesNotFitError, UsageError
from oomtrace.units import format_bytes
from tests.unit.budget.factories import CONFIGS

GiB = 2**30


def worked(**changes: Any) -> Worksheet:
    """The worked example's model: 32 layers x 8 KV heads x head dim 128, 7e9 params, bf16."""
    base: dict[str, Any] = {
        "layers": 32,
        "kv_heads": 8,
        "head_dim": 128,
        "params": 7_000_000_000,
        "device_bytes": 24 * GiB,
        "reserve_bytes": 3 * GiB,
        "tokens": 4096,
    }
    base.update(changes)
    return compute_budget(BudgetRequest(**base))[0]


def test_worked_example_weights_are_13_04_gib() -> None:
    ws = worked()
    assert ws.weights.per_gpu_bytes == 7_000_000_000 * 2
    assert format_bytes(ws.weights.per_gpu_bytes) == "13.04 GiB"


def test_worked_example_kv_is_128_kib_per_token_and_half_a_gib_per_4096() -> None:
    ws = worked()
    assert ws.spec.kv_bytes_per_token == 32 * 8 * 128 * 2 * 2 == 131_072
    assert format_bytes(ws.spec.kv_bytes_per_token) == "128.00 KiB"
    assert ws.sequence_bytes == 131_072 * 4096 == GiB // 2


def test_worked_example_7_96_gib_remain_and_15_sequences_fit() -> None:
    ws = worked()
    assert ws.available_cache_bytes == 24 * GiB - 3 * GiB - 14_000_000_000 == 8_548_578_304
    assert format_bytes(ws.available_cache_bytes) == "7.96 GiB"
    assert ws.max_sequences == 8_548_578_304 // 536_870_912 == 15


def test_worked_example_4096_input_plus_1024_new_is_0_625_gib_and_12_fit() -> None:
    ws = worked(tokens=None, max_input_tokens=4096, max_new_tokens=1024)
    assert ws.contract.stored_tokens == 4096 + 1024
    assert ws.sequence_bytes == 5120 * 131_072 == GiB * 5 // 8  # 0.625 GiB
    assert ws.max_sequences == 12


def test_worked_example_on_32_gib_at_8192_tokens_15_fit() -> None:
    ws = worked(device_bytes=32 * GiB, tokens=8192)
    # (32 GiB - 3 GiB - 14e9 B) // 1 GiB = 17,138,512,896 // 1,073,741,824
    assert ws.max_sequences == 15


def test_worked_example_6_gib_of_cache_at_0_75_gib_per_request_gives_8() -> None:
    ws = worked(params=None, weights_bytes=15 * GiB, tokens=6144)
    assert ws.available_cache_bytes == 6 * GiB
    assert ws.sequence_bytes == 3 * GiB // 4
    assert ws.max_sequences == 8


def test_worked_example_four_kv_heads_halve_the_per_token_figure() -> None:
    assert worked(kv_heads=4).spec.kv_bytes_per_token * 2 == worked().spec.kv_bytes_per_token


def test_without_a_reserve_a_provisional_10_percent_is_used_and_labelled() -> None:
    ws = worked(reserve_bytes=None)
    assert ws.reserve.bytes == 24 * GiB // 10
    assert ws.reserve.kind == "provisional"
    assert "default 10% of device memory" in ws.reserve.basis


def test_a_measured_reserve_is_labelled_measured() -> None:
    ws = worked(reserve_bytes=None, reserve_measured_bytes=2 * GiB)
    assert (ws.reserve.bytes, ws.reserve.kind) == (2 * GiB, "measured")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"reserve_measured_bytes": GiB}, "either --reserve (a guess) or --reserve-measured"),
        ({"reserve_bytes": 24 * GiB}, "--reserve 24.00 GiB is not less than --device-memory"),
        ({"device_bytes": 0}, "--device-memory 0 B must be more than 0 bytes"),
        ({"tokens": None}, "no request contract: give --max-input N --max-new N"),
        ({"max_input_tokens": 10}, "either --tokens or --max-input with --max-new"),
        ({"tokens": None, "max_input_tokens": 10}, "--max-new is missing"),
        ({"tokens": None, "max_input_tokens": 0, "max_new_tokens": 0}, "is 0 tokens"),
        ({"layers": None}, "needs all of --layers, --kv-heads and --head-dim"),
        ({"config": CONFIGS / "llama-3.1-8b"}, "either --config or --layers"),
        ({"tensor_parallel": 3}, "--tensor-parallel 3 does not divide the model's 8 KV heads"),
    ],
)
def test_contradictory_or_impossible_options_are_usage_errors(
    changes: dict[str, Any], message: str
) -> None:
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        worked(**changes)


def test_weights_larger_than_the_device_do_not_fit() -> None:
    ws = worked(params=70_000_000_000)
    assert ws.available_cache_bytes < 0
    assert ws.max_sequences == 0
    with pytest.raises(DoesNotFitError, match=r"leave -.* GiB of 24\.00 GiB for the cache"):
        check_fits(ws)


def test_a_sequence_larger_than_the_cache_does_not_fit_and_says_by_how_much() -> None:
    ws = worked(tokens=131_072)  # 16 GiB per sequence, 7.96 GiB available
    with pytest.raises(DoesNotFitError) as raised:
        check_fits(ws)
    assert str(raised.value) == (
        "does not fit: one sequence of 131,072 tokens needs 16.00 GiB, only 7.96 GiB is left for "
        "the cache; short by 8.04 GiB"
    )


def test_a_concurrency_target_that_does_not_fit_says_by_how_much() -> None:
    ws = worked(concurrency=16)
    # 16 x 0.5 GiB = 8,589,934,592 B - 8,548,578,304 B = 41,356,288 B = 39.44 MiB
    assert ws.concurrency_shortfall_bytes == 16 * GiB // 2 - 8_548_578_304 == 41_356_288
    with pytest.raises(DoesNotFitError) as raised:
        check_fits(ws)
    assert str(raised.value) == (
        "--concurrency 16 does not fit: 16 sequences of 4,096 tokens need 8.00 GiB, 7.96 GiB is "
        "available; short by 39.44 MiB (fits 15)"
    )
    check_fits(worked(concurrency=15))  # fits exactly: no error


def test_tensor_parallel_figures_are_per_gpu() -> None:
    ws = worked(tensor_parallel=2)
    assert ws.weights.per_gpu_bytes == 7_000_000_000
    assert ws.spec.kv_bytes_per_token == 131_072 // 2
