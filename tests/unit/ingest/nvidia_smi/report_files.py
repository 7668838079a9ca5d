"""What the tests of nvidia-smi's reports (``-q`` as text and XML, gpustat) share: a report from
``tests/data/nvidia_smi`` (or given text) ingested as a file written at a fixed time, and a
metric's samples as rows."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from oomtrace.ingest import IngestOptions, ingest_paths
from oomtrace.trace import Trace
from tests.factories import file_at

DATA = Path(__file__).resolve().parents[3] / "data" / "nvidia_smi"
MiB = 1 << 20
MTIME = datetime(2026, 4, 1, 12, 0, tzinfo=UTC)


def ingest_report(tmp_path: Path, name: str, text: str | None = None, **options: object) -> Trace:
    """``name`` from the data folder (or ``text`` under that name), written at :data:`MTIME`."""
    path = file_at(tmp_path / name, MTIME, text=text) if text else None
    path = path or file_at(tmp_path / name, MTIME, copy_of=DATA / name)
    return ingest_paths([path], IngestOptions(**options))  # type: ignore[arg-type]


def metric_rows(trace: Trace, metric: str) -> list[tuple[object, ...]]:
    """``(ts, device, pid, value)`` of ``metric``'s samples, in that order."""
    frame = trace.samples.filter(pl.col("metric") == metric).sort("ts", "device", "pid")
    return frame.select("ts", "device", "pid", "value").rows()
