"""Byte quantities: parse what real tools print, format for humans at the edge.

Binary units (KiB, MiB, GiB, TiB, PiB: powers of 2**10) and decimal units (KB, MB, GB, TB, PB:
powers of 10**3) are different statements and are never mixed. A single-letter unit (``24G``)
or an unknown word (``24 gigs``) is refused with the spellings to use instead.

Some sources print a decimal symbol for a binary quantity (vLLM's "Loading model weights took
9.0970 GB" is GiB). A parser that knows its source's convention says so with
``decimal_means_binary=True``; nothing else ever reinterprets a unit.
"""

from __future__ import annotations

import re
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from typing import Final, Literal

import polars as pl

from oomtrace.errors import UnitError

KiB: Final = 1 << 10
MiB: Final = 1 << 20
GiB: Final = 1 << 30
TiB: Final = 1 << 40
PiB: Final = 1 << 50
# No device, process or allocation holds more: a larger size is damage, not a measurement.
MAX_BYTES: Final = PiB

BINARY_UNITS: Final[dict[str, int]] = {"KiB": KiB, "MiB": MiB, "GiB": GiB, "TiB": TiB, "PiB": PiB}
DECIMAL_UNITS: Final[dict[str, int]] = {
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "PB": 10**15,
}
_BYTE_WORDS: Final = {"b": 1, "byte": 1, "bytes": 1}

# Canonical spelling for each accepted spelling, case-insensitive ("kB" and "KB" are the same
# decimal kilobyte; "gib" is GiB). Single letters (K, M, G, T) are deliberately absent.
_CANONICAL: Final[dict[str, str]] = {
    **{u.lower(): u for u in BINARY_UNITS},
    **{u.lower(): u for u in DECIMAL_UNITS},
}
_BINARY_OF_DECIMAL: Final = {d: d[0] + "iB" for d in DECIMAL_UNITS}

_QUANTITY = re.compile(
    r"""^\s*
    (?P<number>[+-]?(?:\d[\d,_]*(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)
    \s*
    (?:[(\[]\s*(?P<bracketed>[A-Za-z]+)\s*[)\]]|(?P<unit>[A-Za-z]+))?
    \s*$""",
    re.VERBOSE,
)

Family = Literal["binary", "decimal"]


def unit_size(unit: str, *, decimal_means_binary: bool = False) -> int:
    """Bytes in one ``unit`` (``"GiB"`` -> 2**30). Raises :class:`UnitError` for an unknown or
    ambiguous unit."""
    word = unit.strip()
    if word.lower() in _BYTE_WORDS:
        return 1
    canonical = _CANONICAL.get(word.lower())
    if canonical is None:
        raise UnitError(f"unknown unit {word!r}: {_suggest(word)}")
    if canonical in BINARY_UNITS:
        return BINARY_UNITS[canonical]
    if decimal_means_binary:
        return BINARY_UNITS[_BINARY_OF_DECIMAL[canonical]]
    return DECIMAL_UNITS[canonical]


def parse_bytes(
    text: str,
    *,
    decimal_means_binary: bool = False,
    allow_negative: bool = False,
    what: str = "byte quantity",
) -> int:
    """Parse ``"13.04 GiB"``, ``"12569 (MiB)"``, ``"0 bytes"``, ``"24GiB"`` into integer bytes.

    Fractions are rounded half-to-even to whole bytes: a printed "13.04 GiB" is itself rounded,
    so the result is the nearest byte count to what was printed. ``what`` names the input in the
    error message (for example ``"--device-memory"``).
    """
    match = _QUANTITY.match(text)
    if match is None:
        raise UnitError(
            f"{what} {text!r} is not a number with a unit; write e.g. '24GiB' or '80GB'"
        )
    unit = match.group("bracketed") or match.group("unit")
    if unit is None:
        raise UnitError(
            f"{what} {text!r} has no unit; write it with one, e.g. '{match.group('number')}GiB' "
            f"(binary, 2**30) or '{match.group('number')}GB' (decimal, 10**9) or "
            f"'{match.group('number')}B'"
        )
    try:
        size = unit_size(unit, decimal_means_binary=decimal_means_binary)
    except UnitError as err:
        raise UnitError(f"{what} {text!r}: {err}") from err
    try:
        number = Decimal(match.group("number").replace(",", "").replace("_", ""))
    except InvalidOperation as err:  # pragma: no cover - the regex admits only valid decimals
        raise UnitError(f"{what} {text!r} is not a number") from err
    value = int((number * size).to_integral_value(rounding=ROUND_HALF_EVEN))
    if value < 0 and not allow_negative:
        raise UnitError(f"{what} {text!r} is negative; give a size of zero or more")
    return value


def _suggest(word: str) -> str:
    letter = word[:1].upper()
    if letter in "KMGTP" and word.lower() not in _CANONICAL:
        binary = "K" if letter == "K" else letter
        return (
            f"write {binary}iB for binary (2**{10 * ('KMGTP'.index(letter) + 1)}) or "
            f"{letter}B for decimal (10**{3 * ('KMGTP'.index(letter) + 1)}); "
            "the two are different amounts"
        )
    return "use B, KiB, MiB, GiB, TiB (binary) or KB, MB, GB, TB (decimal)"


def format_bytes(
    value: int,
    *,
    family: Family = "binary",
    precision: int | None = 2,
    unit: str | None = None,
) -> str:
    """Format integer bytes for a person: ``13.04 GiB``, ``128 KiB``, ``0 B``.

    ``precision=None`` picks the largest unit that divides ``value`` exactly, so the text parses
    back to the same integer; otherwise the largest unit not above ``value`` is used with that
    many decimals. ``unit`` forces a unit of the chosen family.
    """
    units = BINARY_UNITS if family == "binary" else DECIMAL_UNITS
    sign = "-" if value < 0 else ""
    magnitude = abs(value)
    if unit is not None:
        size = unit_size(unit)
        if unit not in units and unit.lower() not in _BYTE_WORDS:
            raise UnitError(f"unit {unit!r} is not a {family} unit")
        name = "B" if size == 1 else unit
    elif precision is None:
        name, size = "B", 1
        for candidate, candidate_size in units.items():
            if magnitude and magnitude % candidate_size == 0:
                name, size = candidate, candidate_size
    else:
        name, size = "B", 1
        for candidate, candidate_size in units.items():
            if magnitude >= candidate_size:
                name, size = candidate, candidate_size
    if size == 1:
        return f"{sign}{magnitude:,} B" if magnitude >= 10_000 else f"{sign}{magnitude} B"
    if precision is None:
        return f"{sign}{magnitude // size} {name}"
    return f"{sign}{magnitude / size:.{precision}f} {name}"


def format_gib(value: int, precision: int = 2) -> str:
    """Always in GiB, for columns that must line up (``0.50 GiB``)."""
    return format_bytes(value, unit="GiB", precision=precision)


def bytes_expr(number: pl.Expr, unit: pl.Expr, *, decimal_means_binary: bool = False) -> pl.Expr:
    """Vectorised :func:`parse_bytes` for parsers: integer bytes from a numeric column and a unit
    column. Unknown units give null (the parser reports them as skipped), never a guess; so does
    a size beyond :data:`MAX_BYTES` (:func:`bytes_beyond_range` finds those)."""
    value = number.cast(pl.Float64) * _multiplier(unit, decimal_means_binary)
    return pl.when(value.abs() <= MAX_BYTES).then(value.round(0)).cast(pl.Int64)


def bytes_beyond_range(
    number: pl.Expr, unit: pl.Expr, *, decimal_means_binary: bool = False
) -> pl.Expr:
    """Where :func:`bytes_expr` gives null for a stated size beyond :data:`MAX_BYTES` (or not
    finite), so that a parser can count what it left out."""
    value = number.cast(pl.Float64) * _multiplier(unit, decimal_means_binary)
    return value.is_not_null() & ~(value.abs() <= MAX_BYTES).fill_null(value=False)


def _multiplier(unit: pl.Expr, decimal_means_binary: bool) -> pl.Expr:
    table: dict[str, int] = dict.fromkeys(_BYTE_WORDS, 1)
    for spelling, canonical in _CANONICAL.items():
        table[spelling] = unit_size(canonical, decimal_means_binary=decimal_means_binary)
    return (
        unit.str.strip_chars()
        .str.to_lowercase()
        .replace_strict(table, default=None, return_dtype=pl.Int64)
    )
