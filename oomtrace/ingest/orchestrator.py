"""Turn what a server left behind into one canonical trace.

``ingest_paths`` sniffs each input's format (or takes ``--format``), runs its parser, and merges
everything of one incident into one :class:`~oomtrace.trace.Trace`. ``load_any`` is what the
analysis commands call: a trace directory is read as it is, anything else is ingested on the fly.

A file named on the command line that no parser recognises is an error; one found inside a
directory is recorded as a gap and skipped, so that a folder of mixed files still gives a trace.
The files of one series (a ``/metrics`` scrape per file) are read together as one source when
their parser says they belong together (:class:`~oomtrace.ingest.parser_api.SeriesParser`).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.errors import InputError, UsageError
from oomtrace.ingest.alignment import align
from oomtrace.ingest.options import IngestOptions
from oomtrace.ingest.parser_api import ParseContext, Parser, SeriesParser
from oomtrace.ingest.sniffing import Sniffed, expand_inputs, series_name, sniff, unrecognised
from oomtrace.ingest.text.input_file import InputFile
from oomtrace.ingest.trace_merge import Parsed, merge
from oomtrace.trace import Trace, is_trace_dir, read_trace

log = logging.getLogger(__name__)


def load_any(
    paths: Sequence[Path],
    options: IngestOptions | None = None,
    parsers: Mapping[str, Parser] | None = None,
    *,
    sample_metrics: Collection[str] | None = None,
) -> Trace:
    """A trace directory as it is, or the trace ingested from raw files and folders. With
    ``sample_metrics``, a trace directory's samples are read for those metrics only."""
    paths = [Path(p) for p in paths]
    if not paths:
        raise UsageError("no input given; pass a trace directory or the files of the incident")
    traces = [p for p in paths if is_trace_dir(p)]
    if traces and len(paths) > 1:
        raise UsageError(
            f"{traces[0]} is a trace directory; analyse it alone, or pass only raw files"
        )
    if traces:
        return read_trace(traces[0], sample_metrics=sample_metrics)
    return ingest_paths(paths, options or IngestOptions(), parsers)


def ingest_paths(
    paths: Sequence[Path], options: IngestOptions, parsers: Mapping[str, Parser] | None = None
) -> Trace:
    """Parse every input and merge them into one trace. ``parsers`` defaults to the registry."""
    sniffed = [sniff(s, explicit, options.format, parsers) for s, explicit in expand_inputs(paths)]
    for item in sniffed:
        if item.parser is None and item.explicit:
            raise InputError(unrecognised(item))
    results: list[Parsed] = []
    skipped: list[SourceDiagnostics] = []
    for item, members in _series(sniffed):
        if item.parser is None:
            diag = SourceDiagnostics(item.source.name, "unrecognised", options.node or "")
            diag.note(
                f"no parser recognised this file (tried: {', '.join(item.tried)}); skipped",
                lost=True,
            )
            skipped.append(diag)
            continue
        for member in members:
            if not member.path.is_dir():
                member.check_size(options.max_input_bytes)
        diag = SourceDiagnostics(item.source.name, item.parser.name, options.node or "")
        ctx = ParseContext(clock=options.clock, mtime=item.source.mtime)
        if len(members) > 1 and isinstance(item.parser, SeriesParser):
            result = item.parser.parse_series(members, ctx, diag)
        else:
            result = item.parser.parse(item.source, ctx, diag)
        results.append((item.source, result, diag))
    if not results:
        raise InputError(
            f"{', '.join(str(p) for p in paths)}: no file that oomtrace can read; "
            "pass the engine log, nvidia-smi CSV or metrics export, or --format"
        )
    # Before merging: every input on one clock, or set apart (docs/formats/
    # log-prefixes-and-times.md, "Aligning the inputs of one incident").
    align(results, options.clock)
    return merge(results, skipped, options.node, options.clock)


def _series(sniffed: list[Sniffed]) -> list[tuple[Sniffed, list[InputFile]]]:
    """Each input with the files it stands for: itself, or, for the first file of a series, every
    file of it (named by the series' pattern); the series' other files are not listed again."""
    keys: dict[int, tuple[str, str]] = {}
    members: dict[tuple[str, str], list[InputFile]] = {}
    for i, item in enumerate(sniffed):
        parser = item.parser
        if not isinstance(parser, SeriesParser) or not item.source.path.is_file():
            continue
        key = parser.series_key(item.source, item.source.head())
        if key is not None:
            keys[i] = (parser.name, key)
            members.setdefault(keys[i], []).append(item.source)
    out: list[tuple[Sniffed, list[InputFile]]] = []
    seen: set[tuple[str, str]] = set()
    for i, item in enumerate(sniffed):
        group = members.get(keys[i], []) if i in keys else []
        if len(group) < 2:
            out.append((item, [item.source]))
            continue
        if keys[i] in seen:
            continue
        seen.add(keys[i])
        ordered = sorted(group, key=lambda source: source.name)
        name = series_name([source.name for source in ordered])
        out.append((replace(item, source=InputFile(ordered[0].path, name)), ordered))
    return out


def inspect_path(
    path: Path, options: IngestOptions, parsers: Mapping[str, Parser] | None = None
) -> tuple[Sniffed, Trace]:
    """Which parser recognises ``path`` and what it extracts (for ``oomtrace inspect``)."""
    inputs = expand_inputs([path])
    if len(inputs) != 1 or not inputs[0][1]:
        raise UsageError(f"{path}: inspect takes one file; for a folder use `oomtrace ingest`")
    item = sniff(inputs[0][0], True, options.format, parsers)
    if item.parser is None:
        raise InputError(unrecognised(item))
    return item, ingest_paths([path], options, parsers)
