"""The report's header: what the incident happened on, in the words the server used.

The engine is named with the version it printed at start-up (``vLLM 0.13.0``; the version
family oomtrace matched its formats against is a detail of ingest, said only when no version
was printed), the model it served, the node and the GPU (its name where a source gave one, and
its memory).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final

import polars as pl

from oomtrace.isotime import iso_time
from oomtrace.report.document import Figure
from oomtrace.trace import Manifest
from oomtrace.units import format_bytes

ENGINE_NAMES: Final[dict[str, str]] = {
    "vllm": "vLLM",
    "sglang": "SGLang",
    "tgi": "TGI",
    "llama.cpp": "llama.cpp",
    "llamacpp": "llama.cpp",
}


def engine_text(engine: Mapping[str, Any]) -> str:
    """``vLLM 0.13.0``; ``SGLang (version not printed; formats of 0.5.0-0.5.3)``."""
    name = str(engine.get("name") or "")
    if not name:
        return ""
    shown = ENGINE_NAMES.get(name.lower(), name)
    version = engine.get("version")
    if version:
        return f"{shown} {version}"
    family = engine.get("version_family")
    # a family ingest could not place ("unknown") says nothing a reader can use
    known = family and str(family).lower() != "unknown"
    return f"{shown} (version not printed" + (f"; formats of {family})" if known else ")")


def model_text(manifest: Manifest) -> str:
    config = manifest.engine_config
    for value in (
        manifest.model.get("name"),
        config.get("served_model_name"),
        config.get("model"),
        manifest.model.get("architecture"),
    ):
        if value:
            return str(value)
    return ""


def gpu_text(manifest: Manifest, memory: pl.DataFrame) -> str:
    """``GPU 0 NVIDIA L40S, 44.99 GiB``: the devices the trace sampled, with their names where
    a source stated one, and the installed memory."""
    names = manifest.engine_config.get("gpu_names") or manifest.engine_config.get("gpu_name")
    totals = memory.filter(pl.col("series").str.ends_with("device total"))["value"]
    size = format_bytes(int(totals.max())) if totals.len() else ""  # type: ignore[arg-type]
    label = ", ".join(str(n) for n in names) if isinstance(names, list) else str(names or "")
    return ", ".join(p for p in (label, size) if p)


def header_figures(
    manifest: Manifest, memory: pl.DataFrame, extent: tuple[datetime, datetime] | None
) -> tuple[Figure, ...]:
    figures = [
        Figure("engine", "engine", engine_text(manifest.engine) or None, "text"),
        Figure("model", "model", model_text(manifest) or None, "text"),
        Figure("node", "node", ", ".join(sorted(manifest.nodes)) or None, "text"),
        Figure("gpu", "GPU", gpu_text(manifest, memory) or None, "text"),
    ]
    if extent is not None:
        figures += [
            Figure("trace_start", "trace from", extent[0], "time"),
            Figure("trace_end", "trace to", extent[1], "time"),
        ]
    return tuple(f for f in figures if f.value is not None)


def title_of(manifest: Manifest) -> str:
    nodes = ", ".join(sorted(manifest.nodes)) or "unknown node"
    return f"GPU memory incident report: {nodes}"


def subtitle_of(figures: tuple[Figure, ...]) -> str:
    """The header in one line: ``vLLM 0.13.0 · model · node · GPU · from .. to ..``."""
    values = {f.key: f.value for f in figures}
    parts = [str(values[k]) for k in ("engine", "model") if values.get(k)]
    if values.get("node"):
        parts.append(f"node {values['node']}")
    if values.get("gpu"):
        parts.append(f"GPU {values['gpu']}")
    start, end = values.get("trace_start"), values.get("trace_end")
    if isinstance(start, datetime) and isinstance(end, datetime):
        parts.append(f"{iso_time(start)} to {iso_time(end)}")
    return " · ".join(parts)
