"""The engine settings the ``pytorch-log`` reader takes from a log written out for a test."""

from __future__ import annotations

from pathlib import Path

from oomtrace.ingest import IngestOptions, ingest_paths


def engine_config_of(tmp_path: Path, text: str) -> dict[str, object]:
    """``text`` ingested as a file: its engine configuration (the reader checked first)."""
    path = tmp_path / "server.log"
    path.write_text(text)
    trace = ingest_paths([path], IngestOptions())
    assert trace.manifest.sources[0].parser == "pytorch-log"
    return trace.manifest.engine_config
