"""Evidence: the canonical rows (or manifest entries) a finding cites, and their constructors."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Literal

from oomtrace.analysis.jsonfmt import TIME_DIGITS
from oomtrace.isotime import iso_time

EvidenceTable = Literal["samples", "events", "requests", "manifest"]
Scalar = str | int | float | bool | None


@dataclass(frozen=True)
class Evidence:
    """One row of a canonical table (or of the manifest) that a finding rests on."""

    table: EvidenceTable
    ts: datetime | None
    node: str | None
    source: str | None
    values: tuple[tuple[str, Scalar], ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "ts": iso_time(self.ts, TIME_DIGITS),
            "node": self.node,
            "source": self.source,
            "values": {k: scalar(v) for k, v in self.values},
        }


def scalar(value: Scalar) -> Scalar:
    """A value as the JSON document writes it: a whole float as an integer."""
    if isinstance(value, float):
        return value if value != round(value) else round(value)
    return value


_EVENT_FIELDS: Final = (
    "kind",
    "device",
    "pid",
    "requested_bytes",
    "total_bytes",
    "free_bytes",
    "allocated_bytes",
    "reserved_unallocated_bytes",
    "process_bytes",
    "detail",
)
_REQUEST_FIELDS: Final = (
    "request_id",
    "event",
    "prompt_tokens",
    "max_tokens",
    "output_tokens",
    "cached_tokens",
    "logprobs",
    "prompt_logprobs",
)
# Stated on nearly every request as 1: cited only when they ask for more than one sequence.
_SEQUENCE_FIELDS: Final = ("n", "best_of")


def _values(row: dict[str, Any], fields: tuple[str, ...]) -> tuple[tuple[str, Scalar], ...]:
    return tuple((k, row[k]) for k in fields if row.get(k) is not None)


def sample(row: dict[str, Any]) -> Evidence:
    """A row of a series frame, cited as the ``samples`` row it came from (an observed-KV row
    keeps its raw metric and value, with the derived bytes and pool share beside them)."""
    values: list[tuple[str, Scalar]] = []
    if row.get("raw_metric") is not None:
        values += [("metric", row["raw_metric"]), ("value", row["raw_value"])]
        if row.get("unit") == "bytes":
            values.append(("kv_bytes", round(row["value"])))
        if row.get("ratio") is not None:
            values.append(("pool_share", round(float(row["ratio"]), 6)))
    else:
        values += [("metric", row["metric"]), ("value", row["value"])]
    values += [(k, row[k]) for k in ("device", "pid") if row.get(k) is not None]
    return Evidence("samples", row["ts"], row.get("node"), row.get("source"), tuple(values))


def event(row: dict[str, Any]) -> Evidence:
    return Evidence(
        "events", row["ts"], row.get("node"), row.get("source"), _values(row, _EVENT_FIELDS)
    )


def request(row: dict[str, Any]) -> Evidence:
    many = tuple((k, row[k]) for k in _SEQUENCE_FIELDS if (row.get(k) or 1) > 1)
    return Evidence(
        "requests",
        row["ts"],
        row.get("node"),
        row.get("source"),
        _values(row, _REQUEST_FIELDS) + many,
    )


def manifest(values: dict[str, Any]) -> Evidence:
    """Entries of ``manifest.engine_config`` the finding rests on."""
    kept = tuple(
        (k, v) for k, v in sorted(values.items()) if isinstance(v, str | int | float | bool)
    )
    return Evidence("manifest", None, None, "engine_config", kept)
