"""Instants as ISO 8601 text in UTC, the one way every output of oomtrace writes a time.

``iso_time(ts, 3)`` is ``2025-03-14T09:00:01.250Z``: always UTC, always the same width for one
precision (the fraction is cut, never rounded, so an instant never moves into the next second),
so golden outputs are stable and times sort as text. The precision is the number of decimals of
the second: 3 for what people read (reports, terminals), 6 for machine documents (findings,
replay results), 0 for none. A terminal line may use a space for the ``T`` and say ``UTC``
(``sep=" ", zone=" UTC"``); the digits are the same.

:func:`iso_time_expr` is the same text for a Polars column, for documents that write whole
columns at once. Naive datetimes are read as UTC (the canonical tables store UTC).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final, overload

import polars as pl

__all__ = ["iso_time", "iso_time_expr"]

# Python's datetime holds microseconds; Polars' nanosecond columns can say more, in the
# fractions chrono's strftime writes (``%.3f``, ``%.6f``, ``%.9f``).
_MAX_PYTHON: Final = 6
_POLARS_PRECISIONS: Final = (0, 3, 6, 9)


@overload
def iso_time(value: datetime, precision: int = 3, *, sep: str = "T", zone: str = "Z") -> str: ...


@overload
def iso_time(value: None, precision: int = 3, *, sep: str = "T", zone: str = "Z") -> None: ...


@overload
def iso_time(
    value: datetime | None, precision: int = 3, *, sep: str = "T", zone: str = "Z"
) -> str | None: ...


def iso_time(
    value: datetime | None, precision: int = 3, *, sep: str = "T", zone: str = "Z"
) -> str | None:
    """``value`` in UTC with ``precision`` decimals of the second (0 to 6); None stays None."""
    if value is None:
        return None
    if not 0 <= precision <= _MAX_PYTHON:
        raise ValueError(f"precision {precision} is not 0 to {_MAX_PYTHON} decimals")
    utc = value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC)
    text = utc.strftime(f"%Y-%m-%d{sep}%H:%M:%S")
    if precision:
        text += "." + f"{utc.microsecond:06d}"[:precision]
    return text + zone


def iso_time_expr(expr: pl.Expr, precision: int = 3) -> pl.Expr:
    """:func:`iso_time` for a time-zone-aware Polars column (0, 3, 6 or 9 decimals)."""
    if precision not in _POLARS_PRECISIONS:
        raise ValueError(f"precision {precision} is not one of {_POLARS_PRECISIONS} decimals")
    fraction = f"%.{precision}f" if precision else ""
    return expr.dt.convert_time_zone("UTC").dt.strftime(f"%Y-%m-%dT%H:%M:%S{fraction}Z")
