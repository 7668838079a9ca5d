"""Byte quantities: what real tools print parses to exact bytes; ambiguity is refused."""

from __future__ import annotations

import contextlib

import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from oomtrace.errors import UnitError
from oomtrace.units import GiB, KiB, MiB, bytes_expr, format_bytes, format_gib, parse_bytes


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("24GiB", 24 * GiB),
        ("24 GiB", 24 * GiB),
        ("13.04 GiB", 14_001_593_385),  # 13.04 * 2**30 = 14,001,593,384.96
        ("12569 MiB", 12569 * MiB),
        ("12569 (MiB)", 12569 * MiB),
        ("0 bytes", 0),
        ("605.88 MiB", 635_311_227),  # 605.88 * 2**20 = 635,311,226.88
        ("9.0970 GB", 9_097_000_000),
        ("80GB", 80 * 10**9),
        ("1,024 KiB", 1024 * KiB),
        ("512 B", 512),
        ("1.5 kB", 1500),
        ("2 gib", 2 * GiB),
    ],
)
def test_parse_bytes_accepts_the_spellings_tools_print(text: str, expected: int) -> None:
    assert parse_bytes(text) == expected


def test_decimal_symbol_is_read_as_binary_only_when_the_source_convention_says_so() -> None:
    assert parse_bytes("9.0970 GB") == 9_097_000_000
    assert parse_bytes("9.0970 GB", decimal_means_binary=True) == round(9.097 * GiB)


@pytest.mark.parametrize(
    ("text", "hint"),
    [
        ("24G", "write GiB for binary (2**30) or GB for decimal (10**9)"),
        ("24 gigs", "unknown unit 'gigs': write GiB for binary"),
        ("24 lumps", "use B, KiB, MiB, GiB, TiB (binary) or KB, MB, GB, TB (decimal)"),
        ("24", "has no unit; write it with one, e.g. '24GiB'"),
        ("lots", "is not a number with a unit"),
        ("-1 GiB", "is negative"),
    ],
)
def test_parse_bytes_refuses_ambiguous_input_and_says_what_to_write(text: str, hint: str) -> None:
    with pytest.raises(UnitError) as err:
        parse_bytes(text, what="--device-memory")
    assert hint in str(err.value)
    assert "--device-memory" in str(err.value)


def test_negative_sizes_parse_when_the_caller_allows_them() -> None:
    assert parse_bytes("-0.50 GiB", allow_negative=True) == -GiB // 2


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (14_001_593_385, "13.04 GiB"),
        (131_072, "128.00 KiB"),
        (0, "0 B"),
        (512, "512 B"),
        (GiB // 2, "512.00 MiB"),
    ],
)
def test_format_bytes_uses_the_largest_binary_unit(value: int, text: str) -> None:
    assert format_bytes(value) == text


def test_format_bytes_exact_picks_a_unit_that_divides() -> None:
    assert format_bytes(131_072, precision=None) == "128 KiB"
    assert format_bytes(GiB + 1, precision=None) == "1,073,741,825 B"
    assert format_bytes(80 * 10**9, family="decimal", precision=None) == "80 GB"


def test_format_gib_lines_up_in_one_unit() -> None:
    assert format_gib(GiB // 2) == "0.50 GiB"


@given(st.integers(min_value=-(2**62), max_value=2**62))
def test_exact_format_round_trips(value: int) -> None:
    assert parse_bytes(format_bytes(value, precision=None), allow_negative=True) == value


@given(
    st.integers(min_value=0, max_value=2**60),
    st.sampled_from(["binary", "decimal"]),
    st.integers(min_value=0, max_value=4),
)
def test_rounded_format_round_trips_within_half_a_printed_digit(
    value: int, family: str, precision: int
) -> None:
    text = format_bytes(value, family=family, precision=precision)  # type: ignore[arg-type]
    unit = text.split()[-1]
    size = 1 if unit == "B" else parse_bytes(f"1 {unit}")
    tolerance = size * 10**-precision / 2 if size > 1 else 0
    assert abs(parse_bytes(text) - value) <= tolerance + 1


@given(st.text(max_size=40))
def test_parse_bytes_never_raises_anything_but_unit_error(text: str) -> None:
    with contextlib.suppress(UnitError):
        parse_bytes(text)


def test_bytes_expr_vectorises_the_same_rules() -> None:
    frame = pl.DataFrame({"n": ["13.04", "605.88", "9.0970", "3"], "u": ["GiB", "MiB", "GB", "G"]})
    out = frame.select(b=bytes_expr(pl.col("n"), pl.col("u"), decimal_means_binary=True))
    assert out["b"].to_list() == [14_001_593_385, 635_311_227, round(9.097 * GiB), None]
