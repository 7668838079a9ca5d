"""Where an analysis reads its tables from: a trace in memory, or a trace directory scanned lazily.

A trace directory of a day at 100 Hz holds tens of millions of sample rows; read whole (as
:func:`oomtrace.trace.read_trace` does) they cost gigabytes before any analysis starts. Opened
with :func:`open_trace`, the analysis reads the samples in one streaming pass (only the memory
series are kept, one frame each), the requests once for the timeline (then lets them go), and
later only the lifecycle rows an incident cites, through Parquet scans that read the row groups
of the incident window.

The values are checked as :func:`oomtrace.schema.conform` checks them. A file written before a
nullable column was added to its schema (``requests.kv_blocks``) is still scanned, the column
added as nulls as ``conform`` adds it. Whenever something else is not as a trace written by
oomtrace would be (a column type, a value a check rejects, a file that cannot be scanned), the
directory is read the strict way, so that the error is the one
``read_trace`` gives.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import NoReturn, TypeVar

import polars as pl

from oomtrace.errors import OomtraceError
from oomtrace.schema import REQUIRED, SCHEMAS, TABLES, TableName, absent_column, conform
from oomtrace.trace import MANIFEST, Manifest, Trace, in_time, read_trace


@dataclass(frozen=True)
class TableFacts:
    """Totals of the tables one analysis read: rows of each, ``requests`` (how many), the first
    and last moment each node has in any of them (``spans``: ``node, first, last``), the sample
    metrics and the sources;
    ``first_request``: each node's first request event (before it the engine was starting, not
    serving)."""

    samples: int
    request_events: int
    events: int
    requests: int
    spans: pl.DataFrame
    metrics: frozenset[str]
    sources: frozenset[str]
    first_request: dict[str, datetime]


FrameT = TypeVar("FrameT", pl.DataFrame, pl.LazyFrame)


class ReadStrictly(Exception):  # noqa: N818 - a signal, not an error a user sees
    """The scanned directory must be read with :func:`read_trace` (which raises, normally)."""


@dataclass(frozen=True)
class TraceScan:
    """A trace directory opened for analysis: the manifest and the events read, the samples and
    requests left as Parquet scans."""

    path: Path
    manifest: Manifest
    events: pl.DataFrame
    files: dict[TableName, Path | None]
    # Nullable columns a newer schema added that a table's file was written without
    # (``requests.kv_blocks``): the scan adds them as nulls, as ``conform`` does.
    absent: dict[TableName, tuple[str, ...]] = field(default_factory=dict)

    def scan(self, table: TableName) -> pl.LazyFrame:
        file = self.files[table]
        if file is None:
            return pl.LazyFrame(schema=SCHEMAS[table])
        frame = pl.scan_parquet(file)
        absent = self.absent.get(table, ())
        if not absent:
            return frame
        schema = SCHEMAS[table]
        added = [absent_column(name, schema[name]) for name in absent]
        return frame.with_columns(added).select(schema.names())

    def read(self, table: TableName) -> pl.DataFrame:
        """One table read whole and checked (as ``read_trace`` reads it)."""
        file = self.files[table]
        if file is None:
            return pl.DataFrame(schema=SCHEMAS[table])
        try:
            return conform(table, pl.read_parquet(file), what=str(file))
        except (OSError, pl.exceptions.PolarsError, OomtraceError) as err:
            raise ReadStrictly from err


def open_trace(path: Path) -> TraceScan | Trace:
    """A trace directory for :func:`oomtrace.analysis.analyze`: scanned when its files are as
    oomtrace writes them, else read whole by :func:`read_trace` (with its errors)."""
    path = Path(path)
    try:
        return _open(path)
    except ReadStrictly:
        return read_trace(path)


def _open(path: Path) -> TraceScan:
    if not (path / MANIFEST).is_file():
        raise ReadStrictly
    files: dict[TableName, Path | None] = {}
    absent: dict[TableName, tuple[str, ...]] = {}
    for name in TABLES:
        file = path / f"{name}.parquet"
        if not file.exists():
            files[name] = None
            continue
        try:
            schema = pl.read_parquet_schema(file)
        except (OSError, pl.exceptions.PolarsError) as err:
            raise ReadStrictly from err
        absent[name] = _absent_columns(name, schema)
        files[name] = file
    manifest = read_trace_manifest(path)
    manifest.missing_tables = [name for name, file in files.items() if file is None]
    scan = TraceScan(path, manifest, pl.DataFrame(), files, absent)
    return TraceScan(path, manifest, scan.read("events"), files, absent)


def _absent_columns(table: TableName, written: dict[str, pl.DataType]) -> tuple[str, ...]:
    """The nullable columns of the table's schema that a file was written without (an older
    trace); raises :class:`ReadStrictly` when a column is of another type, unknown or required
    and missing: whatever ``conform`` would do more than add nulls."""
    expected = SCHEMAS[table]
    if any(expected.get(column) != dtype for column, dtype in written.items()):
        raise ReadStrictly
    absent = tuple(column for column in expected if column not in written)
    if any(column in REQUIRED[table] for column in absent):
        raise ReadStrictly
    return absent


def read_trace_manifest(path: Path) -> Manifest:
    """The manifest, with the errors ``read_trace`` gives for a bad one."""
    try:
        return Manifest.from_json(_json(path / MANIFEST), what=str(path / MANIFEST))
    except (OomtraceError, ValueError, KeyError, TypeError) as err:
        raise ReadStrictly from err


def _json(file: Path) -> dict[str, object]:
    import json  # noqa: PLC0415 - only here

    data = json.loads(file.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise TypeError(f"{file}: not an object")
    return data


@dataclass(frozen=True)
class Tables:
    """What one analysis reads, from a :class:`Trace` or a :class:`TraceScan`, on one node or
    all: the samples and the lifecycle as lazy frames, the events and the manifest in memory, and
    ``strict()``, called when a value fails a check: a scan is then read the strict way (raising
    its error); a trace in memory is analysed as it is."""

    samples: pl.LazyFrame
    requests: pl.LazyFrame
    events: pl.DataFrame
    manifest: Manifest
    strict: Callable[[], None]


def tables_of(source: Trace | TraceScan, node: str | None) -> Tables:
    def keep(frame: FrameT) -> FrameT:
        # Rows on one clock only: inputs that could not be aligned are not joined in time.
        frame = in_time(frame, source.manifest)
        return frame if node is None else frame.filter(pl.col("node") == node)

    if isinstance(source, Trace):

        def trusted() -> None:
            """A trace in memory is analysed as it is (it was conformed when it was built)."""

        return Tables(
            keep(source.samples.lazy()),
            keep(source.requests.lazy()),
            keep(source.events),
            source.manifest,
            trusted,
        )

    def strict() -> NoReturn:
        raise ReadStrictly

    return Tables(
        keep(source.scan("samples")),
        keep(source.scan("requests")),
        keep(source.events),
        source.manifest,
        strict,
    )


__all__ = [
    "ReadStrictly",
    "TableFacts",
    "Tables",
    "TraceScan",
    "open_trace",
    "read_trace",
    "tables_of",
]
