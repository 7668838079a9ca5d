"""Ingest one field excerpt written to a file, as the field tests of this package do."""

from __future__ import annotations

from pathlib import Path

from oomtrace.ingest import IngestOptions, ingest_paths
from oomtrace.trace import Trace


def vllm_trace(tmp_path: Path, text: str, name: str = "vllm.log") -> Trace:
    """``text`` written to ``tmp_path / name`` and ingested (year 2026); the vLLM reader must
    be the one that read it."""
    path = tmp_path / name
    path.write_text(text)
    trace = ingest_paths([path], IngestOptions(year=2026))
    assert trace.manifest.sources[0].parser == "vllm-log"
    return trace
