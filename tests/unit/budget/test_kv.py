"""KVSpec invariants (hypothesis) and the explicit, no-config path."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from oomtrace.budget import KVGroup, KVSpec, StateGroup, kv_spec
from oomtrace.budget.architecture import explicit_architecture
from oomtrace.budget.layers import kv_heads_per_rank
from oomtrace.errors import UsageError
from tests.unit.budget.factories import CONFIGS, arch

SUPPORTED = sorted(
    p.name for p in CONFIGS.iterdir() if p.name not in ("gemma-4-26b-a4b", "deepseek-v3.2")
)

groups = st.builds(
    KVGroup,
    kind=st.sampled_from(["full", "sliding", "mla"]),
    layers=st.integers(1, 80),
    bytes_per_token=st.integers(1, 100_000),
    window=st.integers(1, 50_000),
)
states = st.builds(
    StateGroup,
    kind=st.sampled_from(["mamba1", "mamba2", "gdn"]),
    layers=st.integers(1, 80),
    conv_bytes=st.integers(0, 100_000),
    ssm_bytes=st.integers(0, 10_000_000),
)


@st.composite
def specs(draw: st.DrawFn, *, chunked: bool = True) -> KVSpec:
    found = draw(st.lists(groups, min_size=0, max_size=4))
    if chunked and draw(st.booleans()):
        found.append(
            KVGroup(
                "chunked",
                draw(st.integers(1, 64)),
                draw(st.integers(1, 9000)),
                draw(st.integers(1, 9000)),
            )
        )
    return KVSpec(tuple(found), tuple(draw(st.lists(states, max_size=2))))


tokens = st.integers(0, 300_000)
blocks = st.sampled_from([1, 2, 16, 32, 64, 128])


@given(specs(chunked=False), tokens, st.integers(0, 100_000), blocks)
def test_resident_bytes_never_shrink_as_a_sequence_grows_without_chunked_layers(
    spec: KVSpec, n: int, more: int, block: int
) -> None:
    assert spec.sequence_bytes(n, block) <= spec.sequence_bytes(n + more, block)


@given(specs(), tokens, st.integers(0, 100_000), blocks)
def test_peak_bytes_never_shrink_as_a_sequence_grows(
    spec: KVSpec, n: int, more: int, block: int
) -> None:
    assert spec.peak_sequence_bytes(n, block) <= spec.peak_sequence_bytes(n + more, block)


@given(specs(), st.integers(0, 40_000), blocks)
@settings(max_examples=50)
def test_peak_is_the_largest_resident_size_on_the_way(spec: KVSpec, n: int, block: int) -> None:
    step = max(1, n // 400)
    seen = max(spec.sequence_bytes(k, block) for k in [*range(0, n + 1, step), n])
    assert spec.peak_sequence_bytes(n, block) >= seen
    assert spec.peak_sequence_bytes(n, block) >= spec.sequence_bytes(n, block)


@given(specs(), tokens, blocks)
def test_block_rounding_never_decreases_bytes(spec: KVSpec, n: int, block: int) -> None:
    assert spec.sequence_bytes(n, block) >= spec.sequence_bytes(n, 1)


@given(specs(), st.lists(st.one_of(st.none(), tokens), max_size=30), blocks)
def test_the_polars_expression_agrees_with_the_python_rule(
    spec: KVSpec, counts: list[int | None], block: int
) -> None:
    frame = pl.DataFrame({"tokens": counts}, schema={"tokens": pl.Int64})
    got = frame.select(
        spec.sequence_bytes_expr(pl.col("tokens"), block).alias("now"),
        spec.peak_sequence_bytes_expr(pl.col("tokens"), block).alias("peak"),
    )
    expected = pl.DataFrame(
        {
            "now": [None if n is None else spec.sequence_bytes(n, block) for n in counts],
            "peak": [None if n is None else spec.peak_sequence_bytes(n, block) for n in counts],
        },
        schema={"now": pl.Int64, "peak": pl.Int64},
    )
    assert_frame_equal(got, expected)


def test_a_negative_token_count_is_null_in_the_expression() -> None:
    spec = KVSpec.from_explicit(layers=1, kv_heads=1, head_dim=1, dtype_bytes=2)
    got = pl.DataFrame({"t": [-1, 0, 1]}).select(spec.sequence_bytes_expr(pl.col("t"), 1))
    assert got.to_series().to_list() == [None, 0, 4]


@pytest.mark.parametrize("model", SUPPORTED)
def test_fp8_halves_attention_and_mla_bytes_but_not_recurrent_state(model: str) -> None:
    base = kv_spec(arch(model), kv_cache_dtype="bfloat16")
    fp8 = kv_spec(arch(model), kv_cache_dtype="fp8")
    assert fp8.kv_bytes_per_token * 2 == base.kv_bytes_per_token
    assert fp8.unbounded_kv_bytes_per_token * 2 == base.unbounded_kv_bytes_per_token
    assert fp8.state_bytes_per_sequence == base.state_bytes_per_sequence


@given(st.integers(1, 128), st.integers(1, 128))
def test_tensor_parallel_divides_kv_heads_with_a_floor_of_one(kv_heads: int, tp: int) -> None:
    if kv_heads % tp == 0 or tp % kv_heads == 0:
        assert kv_heads_per_rank(kv_heads, tp) == max(1, kv_heads // tp)
    else:
        with pytest.raises(UsageError, match=f"--tensor-parallel {tp}"):
            kv_heads_per_rank(kv_heads, tp)


@given(st.integers(1, 128), st.sampled_from([1, 2, 4, 8, 16, 32, 64]))
def test_explicit_spec_and_explicit_architecture_agree(layers: int, tp: int) -> None:
    spec = KVSpec.from_explicit(
        layers=layers, kv_heads=8, head_dim=128, dtype_bytes=2, tensor_parallel=tp
    )
    via_arch = kv_spec(
        explicit_architecture(layers=layers, kv_heads=8, head_dim=128), tensor_parallel=tp
    )
    assert spec.kv_bytes_per_token == via_arch.kv_bytes_per_token
    assert spec.kv_bytes_per_token == layers * 2 * max(1, 8 // tp) * 128 * 2


def test_the_seed_example_per_token_and_per_sequence() -> None:
    spec = KVSpec.from_explicit(layers=32, kv_heads=8, head_dim=128, dtype_bytes=2)
    assert spec.kv_bytes_per_token == 32 * 8 * 128 * 2 * 2 == 131_072  # 128 KiB
    assert spec.sequence_bytes(4096) == 536_870_912  # 0.5 GiB, 4,096 is whole blocks
    halved = KVSpec.from_explicit(layers=32, kv_heads=4, head_dim=128, dtype_bytes=2)
    assert halved.kv_bytes_per_token * 2 == spec.kv_bytes_per_token


def test_block_rounding_is_per_layer_and_one_disables_it() -> None:
    spec = KVSpec.from_explicit(layers=32, kv_heads=8, head_dim=128, dtype_bytes=2)
    assert spec.sequence_bytes(4097, block_size=16) == 131_072 * 4112  # 257 blocks of 16
    assert spec.sequence_bytes(4097, block_size=1) == 131_072 * 4097


def test_sliding_layers_round_the_window_not_the_sequence() -> None:
    spec = KVSpec((KVGroup("sliding", 2, 100, window=1000),))
    # min(5000, 1000) = 1000 tokens, rounded to 63 blocks of 16 = 1,008
    assert spec.sequence_bytes(5000, 16) == 2 * 100 * 1008


def test_two_chunk_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="one chunk size"):
        KVSpec((KVGroup("chunked", 1, 1, 8), KVGroup("chunked", 1, 1, 16)))
