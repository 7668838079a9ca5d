"""Fixed formats for the findings document: timestamps to the microsecond (written by
:func:`oomtrace.isotime.iso_time`) and rounded numbers."""

from __future__ import annotations

import math
from typing import Final

# Decimals of the second in the findings document's timestamps.
TIME_DIGITS: Final = 6
WHOLE_UNITS: Final = frozenset({"bytes", "blocks", "tokens", "count"})


def number(value: float | None, unit: str) -> int | float | None:
    """Integers for whole units, six decimals for ratios and everything else; NaN is null."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return None
    if unit in WHOLE_UNITS:
        return round(value)
    return round(float(value), 6)


def share(value: float | None) -> float | None:
    """A share or ratio, six decimals."""
    return number(value, "ratio")
