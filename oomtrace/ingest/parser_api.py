"""The parser plug point: what a parser is given and what it returns.

A parser is any object with ``name``, ``description``, ``sniff`` and ``parse`` (the
:class:`Parser` protocol); :mod:`oomtrace.ingest.parser_registry` holds them by name. Each engine's
version-dependent patterns live in tables in its subpackage, each with the sample that
exercises it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

import polars as pl

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.ingest.text.input_file import InputFile


@dataclass(frozen=True)
class ClockOptions:
    """How to place year-less or zone-less timestamps in time (``--year``, ``--tz``)."""

    year: int | None = None
    tz: str | None = None


@dataclass(frozen=True)
class ParseContext:
    """What a parser is told about its input besides the bytes. ``mtime`` is the input's
    modification time (UTC): the last moment it was written, the anchor for year-less logs."""

    clock: ClockOptions = ClockOptions()
    mtime: datetime | None = None


@dataclass
class ParseResult:
    """What one input contributed. Frames may omit ``node`` and ``source`` (the orchestrator adds
    them) and any nullable column; they are conformed to the canonical schema afterwards. A
    ``source`` column a parser does give is a qualifier that keeps apart series the input holds
    side by side (``engine=1`` under data parallel): the orchestrator appends it to the source
    name after a ``#``."""

    samples: pl.DataFrame | None = None
    requests: pl.DataFrame | None = None
    events: pl.DataFrame | None = None
    engine: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    engine_config: dict[str, Any] = field(default_factory=dict)
    clock: dict[str, Any] = field(default_factory=dict)
    # The host the input itself names (journald, DCGM Hostname label), if any.
    host: str | None = None
    # GPU identifiers (UUID ``GPU-...``, PCI bus id) this input ties to a device index. Rows of
    # any input of the incident that name their GPU only by identifier (a ``device_ref`` column
    # in ``samples`` or ``events``, e.g. nvidia-smi --query-compute-apps with gpu_uuid) are
    # placed on that device by the orchestrator; the column is dropped afterwards.
    device_index: dict[str, int] = field(default_factory=dict)


@runtime_checkable
class Parser(Protocol):
    """A source format. ``sniff`` returns a confidence in [0, 1] from the decompressed head of
    the input (0: not this format); ``parse`` reads the whole input."""

    name: str
    description: str

    def sniff(self, head: str, name: str) -> float: ...

    def parse(
        self, source: InputFile, ctx: ParseContext, diag: SourceDiagnostics
    ) -> ParseResult: ...


@runtime_checkable
class LineParser(Parser, Protocol):
    """A log parser that can also take lines that arrive one by one (the collector's log tail).

    ``lines`` has a ``line`` column (str) and may have ``arrival_ts`` (``Datetime("ns", "UTC")``),
    the moment the collector read the line; where present it fixes the year-less,
    second-resolution timestamps engines print, and the parser uses it.
    """

    def parse_lines(
        self, lines: pl.DataFrame, ctx: ParseContext, diag: SourceDiagnostics
    ) -> ParseResult: ...


@runtime_checkable
class SeriesParser(Parser, Protocol):
    """A format often saved one piece per file (``curl -s host:8000/metrics >
    scrape-$(date +%s).txt``): the files of one series are read together, as one source, so
    that what accumulates across them (a counter's increase) is one series'.

    ``series_key`` names the series a file belongs to (None: it stands alone); files of one
    parser with equal keys go to one ``parse_series`` call, in name order."""

    def series_key(self, source: InputFile, head: str) -> str | None: ...

    def parse_series(
        self, sources: Sequence[InputFile], ctx: ParseContext, diag: SourceDiagnostics
    ) -> ParseResult: ...
