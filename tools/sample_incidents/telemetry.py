"""Metrics and GPU files as people export them after an outage: Prometheus ``query_range`` JSON,
concatenated ``/metrics`` scrapes, nvidia-smi CSV, in the formats ``oomtrace.ingest`` reads
(``docs/formats/prometheus.md``, ``docs/formats/nvidia-smi.md``)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

MIB = 1 << 20


def go_float(value: float) -> str:
    """A float as Prometheus prints it in JSON (Go ``FormatFloat(v, 'f', -1, 64)``)."""
    if value == int(value):
        return str(int(value))
    text = repr(float(value))
    if "e" in text:
        text = f"{value:.17f}".rstrip("0")
    return text


def py_float(value: float) -> str:
    """A float as ``prometheus_client`` exposes it (Python ``repr``: ``48.0``, ``1.84e+06``)."""
    return repr(float(value))


@dataclass(frozen=True)
class Series:
    """One Prometheus series: its labels (``__name__`` included) and (unix seconds, value)."""

    labels: dict[str, str]
    points: Sequence[tuple[float, float]]


def query_range_json(series: Iterable[Series]) -> str:
    """The body of ``/api/v1/query_range`` as the server sends it (compact JSON)."""
    result = [
        {
            "metric": dict(sorted(s.labels.items())),
            "values": [[_stamp(t), go_float(v)] for t, v in s.points],
        }
        for s in series
    ]
    doc = {"status": "success", "data": {"resultType": "matrix", "result": result}}
    return json.dumps(doc, separators=(",", ":")) + "\n"


def _stamp(t: float) -> float | int:
    return int(t) if t == int(t) else round(t, 3)


def unix(ts: datetime) -> float:
    return ts.astimezone(UTC).timestamp()


def smi_stamp(ts: datetime, tz: ZoneInfo) -> str:
    """nvidia-smi's ``timestamp``: local time, ``YYYY/MM/DD HH:MM:SS.mmm``, no zone."""
    local = ts.astimezone(tz)
    return local.strftime("%Y/%m/%d %H:%M:%S") + f".{local.microsecond // 1000:03d}"


def mib(value_bytes: int) -> int:
    return value_bytes // MIB


GPU_HEADER = "timestamp, index, memory.used [MiB], memory.total [MiB]"
APPS_HEADER = "timestamp, gpu_uuid, pid, process_name, used_gpu_memory [MiB]"


def gpu_row(ts: datetime, tz: ZoneInfo, index: int, used_mib: int, total_mib: int) -> str:
    return f"{smi_stamp(ts, tz)}, {index}, {used_mib} MiB, {total_mib} MiB"


def app_row(ts: datetime, tz: ZoneInfo, uuid: str, pid: int, name: str, used_mib: int) -> str:
    return f"{smi_stamp(ts, tz)}, {uuid}, {pid}, {name}, {used_mib} MiB"
