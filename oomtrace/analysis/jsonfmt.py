"""Fixed formats for the findings document: ISO 8601 UTC timestamps and rounded numbers."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Final

_WHOLE_UNITS: Final = frozenset({"bytes", "blocks", "tokens", "count"})


def iso(value: datetime | None) -> str | None:
    """``2025-03-14T09:00:00.000000Z``: fixed width, UTC."""
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def number(value: float | None, unit: str) -> int | float | None:
    """Integers for whole units, six decimals for ratios and everything else; NaN is null."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return None
    if unit in _WHOLE_UNITS:
        return round(value)
    return round(float(value), 6)


def share(value: float | None) -> float | None:
    """A share or ratio, six decimals."""
    return number(value, "ratio")
