"""Small factories for canonical rows, with defaults, so each test states only what matters."""

from __future__ import annotations

import os
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl

from oomtrace.ingest import IngestOptions, load_any
from oomtrace.schema import conform
from oomtrace.trace import Trace

T0 = datetime(2025, 3, 14, 9, 0, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    """A timestamp ``seconds`` after :data:`T0`."""
    return T0 + timedelta(seconds=seconds)


def samples(*rows: dict[str, Any]) -> pl.DataFrame:
    base = {"node": "node-a", "source": "test", "device": 0, "pid": None}
    return conform("samples", pl.DataFrame([{**base, **r} for r in rows]))


def requests(*rows: dict[str, Any]) -> pl.DataFrame:
    base = {"node": "node-a", "source": "test"}
    return conform("requests", pl.DataFrame([{**base, **r} for r in rows]))


def events(*rows: dict[str, Any]) -> pl.DataFrame:
    base = {"node": "node-a", "source": "test", "device": 0}
    return conform("events", pl.DataFrame([{**base, **r} for r in rows]))


def file_at(
    path: Path, mtime: datetime, *, text: str | None = None, copy_of: Path | None = None
) -> Path:
    """``path`` written with ``text`` (or copied from ``copy_of``), last modified at ``mtime``:
    parsers read that time as when a file was written."""
    if copy_of is not None:
        shutil.copy(copy_of, path)
    else:
        path.write_text(text or "")
    os.utime(path, (mtime.timestamp(), mtime.timestamp()))
    return path


def text_trace(tmp_path: Path, name: str, text: str) -> Trace:
    """The trace ingest makes of ``text`` written to ``tmp_path / name`` (a log or an excerpt
    pasted from a thread)."""
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return load_any([path], IngestOptions())
