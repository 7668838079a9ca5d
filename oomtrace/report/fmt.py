"""Fixed formats for every value a report shows, so that golden reports are stable and the
formats agree. Bytes carry a binary unit (:func:`oomtrace.units.format_bytes`), times are
ISO 8601 in UTC to the millisecond (:func:`oomtrace.isotime.iso_time`), shares are percent with
one decimal."""

from __future__ import annotations

from datetime import datetime

from oomtrace.isotime import iso_time
from oomtrace.report.document import Kind, Value
from oomtrace.units import format_bytes

MISSING = "n/a"


def value_text(value: Value, kind: Kind) -> str:  # noqa: PLR0911 - one format per kind
    """The plain text of one value (not yet escaped for any output)."""
    if value is None:
        return MISSING
    if kind == "time":
        return iso_time(value) if isinstance(value, datetime) else str(value)
    if isinstance(value, str | datetime):
        return str(value)
    number: int | float = value
    if kind == "bytes":
        return format_bytes(int(number))
    if kind == "share":
        return f"{100 * float(number):.1f}%"
    if kind == "seconds":
        return f"{float(number):.3f} s"
    if kind in ("tokens", "blocks", "count"):
        unit = {"tokens": " tokens", "blocks": " blocks", "count": ""}[kind]
        return f"{int(number):,}{unit}"
    if isinstance(number, float):
        return f"{number:.4g}"
    return str(number)


def cell_text(value: Value, kind: Kind) -> str:
    """Like :func:`value_text` but without the unit word for tokens and blocks (the column
    title carries it)."""
    if kind in ("tokens", "blocks") and isinstance(value, int | float):
        return f"{int(value):,}"
    return value_text(value, kind)


def json_value(value: Value, kind: Kind) -> object:
    """The JSON form: numbers stay numbers (bytes are integers), times are ISO strings."""
    if isinstance(value, datetime):
        return iso_time(value)
    if value is None or isinstance(value, str):
        return value
    if kind in ("bytes", "tokens", "blocks", "count"):
        return int(value)
    if isinstance(value, float):
        return round(value, 6)
    return value


def lane_text(request_id: str, rank: int | None) -> str:
    """``#1 cmpl-...`` for a culprit, the id alone for a request shown for context (the same
    label in every chart)."""
    return request_id if rank is None else f"#{rank} {request_id}"
