"""Tables from the records of a findings or worksheet document.

The analysis and the budget worksheet publish rows as JSON objects whose keys carry their unit
(``*_bytes``, ``*_tokens``, ``*_ts``, ``share``), as the project's naming rule says. The report
turns such records into typed :class:`~oomtrace.report.document.Table` s by that rule, so a new
column in the findings shows up in every format without a change here, with its unit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from oomtrace.report.document import Column, Kind, Table, Value
from oomtrace.report.fmt import value_text

TIME_KEYS = ("start", "end", "peak", "arrived", "admitted", "finished", "window_start")
# The bounds of a stored-token figure (the findings name them without the unit suffix).
TOKEN_KEYS = ("stored_low", "stored_high", "tokens_low", "tokens_high")
_TITLES = {
    "request_id": "request",
    "share": "share",
    "reason": "reason",
    "ts": "time (UTC)",
    "preemptions": "preempted",
    "growth_tokens": "grew",  # tokens gained while the pool filled (what a plateau ranks by)
}


def kind_of(key: str) -> Kind:  # noqa: PLR0911 - one rule per unit suffix
    """The display kind of a record key, by the naming rule (units in names)."""
    if key == "request_id" or key.endswith("_id"):
        return "id"
    if key.endswith("_bytes") or key == "bytes" or "_bytes_per_" in key:
        return "bytes"
    if key.endswith("_tokens") or key == "tokens" or key in TOKEN_KEYS:
        return "tokens"
    if key.endswith("_blocks") or key == "blocks":
        return "blocks"
    if key == "ts" or key.endswith(("_ts", "_at", "_since", "_until")) or key in TIME_KEYS:
        return "time"
    if key in ("share", "coverage") or key.endswith(("_share", "_ratio", "_fraction")):
        return "share"
    if key.endswith(("_s", "_seconds")):
        return "seconds"
    if key.startswith(("n_", "num_")) or key.endswith(
        ("_count", "_total", "requests", "points", "preemptions")
    ):
        return "count"
    return "text"


def title_of(key: str) -> str:
    """``prompt_tokens`` -> ``prompt tokens``; the unit stays in the title where it helps."""
    if key in _TITLES:
        return _TITLES[key]
    words = key.removesuffix("_ts").replace("_", " ")
    return f"{words} (UTC)" if kind_of(key) == "time" and key != "ts" else words


def parse_time(value: Any) -> datetime | None:
    """ISO 8601 text (``...Z`` or with an offset) or a datetime, else None."""
    if isinstance(value, datetime):
        return value
    if isinstance(value, str) and value:
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            return None
    return None


def coerce(value: Any, kind: Kind) -> Value:
    """A record value as the report holds it: times as datetimes, numbers as numbers, anything
    nested as compact text."""
    if value is None:
        return None
    if kind == "time":
        return parse_time(value) or str(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float | str):
        return value
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={v}" for k, v in sorted(value.items()))
    if isinstance(value, Iterable):
        return ", ".join(str(v) for v in value)
    return str(value)


def table_from_records(
    records: Sequence[Mapping[str, Any]],
    *,
    order: Sequence[str] = (),
    drop: Sequence[str] = (),
    note: str = "",
) -> Table:
    """Columns in ``order`` first, then the others sorted by name (the same columns whether the
    records came from an object or from a JSON document with sorted keys); ``drop`` leaves keys
    out (nested detail shown elsewhere)."""
    keys: list[str] = [k for k in order if any(k in r for r in records)]
    rest = {k for r in records for k in r if k not in keys and k not in drop}
    keys.extend(sorted(rest))
    columns = tuple(Column(k, title_of(k), kind_of(k)) for k in keys)
    rows = tuple(tuple(coerce(r.get(c.key), c.kind) for c in columns) for r in records)
    return Table(columns, rows, note)


def table_from_mapping(
    mapping: Mapping[str, Any], *, note: str = "", order: Sequence[str] = ()
) -> Table:
    """A two-column ``item, value`` table from a flat mapping, the keys of ``order`` first in
    that order, then the others sorted, each value shown with its kind (the value column is
    text: kinds differ per row)."""
    rank = {k: i for i, k in enumerate(order)}
    keys = sorted(mapping, key=lambda k: (rank.get(k, len(rank)), k))
    rows = tuple(
        (title_of(k), value_text(coerce(mapping[k], kind_of(k)), kind_of(k)))
        for k in keys
        if not isinstance(mapping[k], Mapping | list)
    )
    return Table((Column("item", "item", "text"), Column("value", "value", "text")), rows, note)
