"""A trace directory: ``samples.parquet``, ``requests.parquet``, ``events.parquet`` and
``manifest.json``.

The Parquet files are plain (no oomtrace-specific metadata is needed to read them): DuckDB and
pandas read them as they are. The manifest is a small JSON document with sorted keys, so that two
ingests of the same inputs give byte-identical files.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import polars as pl

from oomtrace import __version__
from oomtrace.diagnostics import SourceDiagnostics, clock_sentence
from oomtrace.errors import InputError, SchemaError
from oomtrace.schema import (
    JOINED_CLOCKS,
    READABLE_VERSIONS,
    REQUIRED,
    SCHEMA_VERSION,
    TABLES,
    TableName,
    conform,
    empty,
)

MANIFEST = "manifest.json"
_T = TypeVar("_T")


@dataclass
class Manifest:
    """Everything about a trace that is not a row: where it came from and what was assumed.

    ``engine_config`` keys, where known: ``num_gpu_blocks``, ``block_size``, ``kv_cache_tokens``,
    ``max_concurrency``, ``max_concurrency_tokens``, ``max_model_len``,
    ``gpu_memory_utilization``, ``model_weights_bytes``, ``available_kv_cache_bytes``,
    ``cuda_graph_bytes`` (and others an engine states, such as ``max_num_seqs``), and
    ``gpu_names`` (the devices a collector capture's NVML inventory named, by index).
    ``engine`` holds ``name`` (``vllm``, ``sglang``, ...) and ``version_family``.
    ``clock`` records how year-less or zone-less timestamps were placed in time.
    """

    schema_version: int = SCHEMA_VERSION
    nodes: list[str] = field(default_factory=list)
    engine: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    engine_config: dict[str, Any] = field(default_factory=dict)
    clock: dict[str, Any] = field(default_factory=dict)
    sources: list[SourceDiagnostics] = field(default_factory=list)
    created_by: str = f"oomtrace {__version__}"
    # Tables the directory this manifest was read from lacks (ingest writes all three): a gap
    # the analysis reports, not part of the document.
    missing_tables: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "created_by": self.created_by,
            "nodes": sorted(self.nodes),
            "engine": self.engine,
            "model": self.model,
            "engine_config": self.engine_config,
            "clock": self.clock,
            "sources": [s.to_json() for s in self.sources],
        }

    @classmethod
    def from_json(cls, data: object, *, what: str = MANIFEST) -> Manifest:
        """The manifest in ``data`` (parsed JSON), or :class:`SchemaError` naming ``what`` when it
        is not one (``null``, a list, a field of the wrong type)."""
        if not isinstance(data, dict):
            raise SchemaError(
                f"{what}: not a manifest (a JSON {type(data).__name__}, not an object); re-run "
                "`oomtrace ingest` on the original files"
            )
        version = data.get("schema_version")
        if version not in READABLE_VERSIONS:
            readable = ", ".join(map(str, READABLE_VERSIONS))
            raise SchemaError(
                f"{what}: schema version {version!r} is not one this oomtrace reads ({readable}); "
                "re-run `oomtrace ingest` on the original files with this version of oomtrace"
            )
        try:
            return cls(
                # An older trace is read as a current one (version 1's rows get clock ``stated``).
                schema_version=SCHEMA_VERSION,
                nodes=[str(n) for n in _of(data, "nodes", list)],
                engine=_of(data, "engine", dict),
                model=_of(data, "model", dict),
                engine_config=_of(data, "engine_config", dict),
                clock=_of(data, "clock", dict),
                sources=[SourceDiagnostics.from_json(s) for s in _of(data, "sources", list)],
                created_by=str(data.get("created_by", "")),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise SchemaError(
                f"{what}: a field is damaged ({err!r}); re-run `oomtrace ingest`"
            ) from err


def _of(data: dict[str, Any], key: str, kind: type[_T]) -> _T:
    """``data[key]`` when it is a ``kind`` (an empty one when absent)."""
    value = data.get(key, kind())
    if not isinstance(value, kind):
        raise TypeError(f"{key} is a {type(value).__name__}, not a {kind.__name__}")
    return value


def trace_clock_sentence(manifest: Manifest) -> str:
    """The clock of a trace written before each source kept its own (``Manifest.clock`` only),
    as one sentence; "" for a newer trace, whose sources each have theirs."""
    if not manifest.clock or any(s.clock for s in manifest.sources):
        return ""
    return clock_sentence(manifest.clock)


def set_aside(manifest: Manifest) -> list[SourceDiagnostics]:
    """The sources whose rows (some or all) are not joined in time with the others: unaligned
    inputs, and logs without times whose rows nothing anchored."""
    return [s for s in manifest.sources if s.clock.get("status") in ("unaligned", "untimed")]


FrameT = TypeVar("FrameT", pl.DataFrame, pl.LazyFrame)


def in_time(frame: FrameT, manifest: Manifest) -> FrameT:
    """The rows of ``frame`` that share one clock (``clock`` in
    :data:`~oomtrace.schema.JOINED_CLOCKS`): what every analysis of time reads. The frame as it
    is when the manifest sets nothing aside (the usual case costs nothing)."""
    if not set_aside(manifest):
        return frame
    return frame.filter(pl.col("clock").is_in(JOINED_CLOCKS))


@dataclass
class Trace:
    """The canonical tables of one incident, already conformed to their schemas."""

    samples: pl.DataFrame = field(default_factory=lambda: empty("samples"))
    requests: pl.DataFrame = field(default_factory=lambda: empty("requests"))
    events: pl.DataFrame = field(default_factory=lambda: empty("events"))
    manifest: Manifest = field(default_factory=Manifest)

    def table(self, name: TableName) -> pl.DataFrame:
        frame: pl.DataFrame = getattr(self, name)
        return frame

    def in_time(self) -> Trace:
        """The trace without the rows set aside from the timeline (see :func:`in_time`)."""
        if not set_aside(self.manifest):
            return self
        samples, requests, events = (in_time(self.table(t), self.manifest) for t in TABLES)
        return Trace(samples, requests, events, self.manifest)


def write_trace(trace: Trace, out_dir: Path, *, overwrite: bool = False) -> None:
    """Write the trace; refuses to replace an existing trace unless ``overwrite``."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(f"{out_dir}: exists and is not a directory; choose another --out")
    if (out_dir / MANIFEST).exists() and not overwrite:
        raise InputError(f"{out_dir}: already holds a trace; pass --force to replace it")
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in TABLES:
        frame = conform(name, trace.table(name), what=str(out_dir))
        # zstd's level 1: half the CPU of its default level 3 on a day's requests (0.29 s against
        # 0.51 s, benchmarks/ingest_bench.py's log), and no larger there (24.6 MB against 26.3)
        frame.write_parquet(
            out_dir / f"{name}.parquet", compression="zstd", compression_level=1, statistics=True
        )
    text = json.dumps(trace.manifest.to_json(), indent=2, sort_keys=True, ensure_ascii=True)
    (out_dir / MANIFEST).write_text(text + "\n", encoding="utf-8")


def is_trace_dir(path: Path) -> bool:
    return Path(path).is_dir() and (Path(path) / MANIFEST).is_file()


def read_trace(
    path: Path,
    *,
    sample_metrics: Collection[str] | None = None,
    request_columns: Collection[str] | None = None,
) -> Trace:
    """Read a trace directory written by :func:`write_trace` (or by hand, in the same form).
    With ``sample_metrics``, only the samples of those metrics are read (the filter runs in the
    Parquet reader: a command that needs a few slow series skips a day of 100 Hz memory rows).
    With ``request_columns``, only those columns of the requests (and the required ones) are
    read; the others are null, as in a trace written without them."""
    path = Path(path)
    if not is_trace_dir(path):
        raise InputError(
            f"{path}: not a trace directory (no {MANIFEST}); create one with "
            "`oomtrace ingest FILE... --out DIR`"
        )
    try:
        manifest = Manifest.from_json(
            json.loads((path / MANIFEST).read_text(encoding="utf-8")), what=str(path / MANIFEST)
        )
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as err:
        raise InputError(f"{path / MANIFEST}: unreadable manifest ({err}); re-run ingest") from err
    tables: dict[str, pl.DataFrame] = {}
    for name in TABLES:
        file = path / f"{name}.parquet"
        if not file.exists():
            manifest.missing_tables.append(name)
            tables[name] = empty(name)
            continue
        try:
            frame = _read_table(
                file,
                name,
                sample_metrics if name == "samples" else None,
                request_columns if name == "requests" else None,
            )
        except (OSError, pl.exceptions.PolarsError) as err:
            raise InputError(f"{file}: unreadable Parquet ({err}); re-run ingest") from err
        tables[name] = conform(name, frame, what=str(file))
    return Trace(tables["samples"], tables["requests"], tables["events"], manifest)


def _read_table(
    file: Path, name: TableName, metrics: Collection[str] | None, columns: Collection[str] | None
) -> pl.DataFrame:
    if metrics is None and columns is None:
        return pl.read_parquet(file)
    frame = pl.scan_parquet(file)
    if metrics is not None:
        frame = frame.filter(pl.col("metric").is_in(list(metrics)))
    if columns is not None:
        # the required columns always (conform checks them); a column the file was written
        # without (an older trace) is left for conform to add
        wanted = {*columns, *REQUIRED[name], "clock"}
        frame = frame.select([c for c in frame.collect_schema().names() if c in wanted])
    return frame.collect()
