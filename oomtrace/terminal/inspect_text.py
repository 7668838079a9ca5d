"""``oomtrace inspect`` and ``oomtrace ingest`` on a terminal: what one file gave (its parser, the
first rows of each table) and what each source could and could not be read for. File names,
notes, skipped lines and table cells come from the inputs and are escaped
(:func:`oomtrace.escape.terminal`)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Final

import polars as pl

from oomtrace import escape
from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.schema import TableName
from oomtrace.trace import Trace

# The tables ``inspect`` shows, in this order.
TABLES: Final[tuple[TableName, ...]] = ("samples", "requests", "events")


def sources_table(sources: Sequence[SourceDiagnostics]) -> str:
    """One block per source: parser, rows per table, lines read/recognised/skipped, notes."""
    lines: list[str] = []
    for s in sources:
        lines.append(f"{escape.terminal(s.name)}  [{s.parser}]  {s.rows_text()}")
        if s.lines_read:
            lines.append(
                f"  lines: {s.lines_read:,} read, {s.lines_recognised:,} recognised, "
                f"{s.lines_skipped:,} skipped"
            )
        for reason, skip in sorted(s.skipped.items()):
            lines.append(f"  skipped {skip.count:,} x {reason}: {_quoted(skip.example)}")
        lines.extend(f"  note: {escape.terminal(note)}" for note in s.notes)
        if s.first_ts:
            lines.append(f"  time: {s.first_ts} .. {s.last_ts}")
    return "\n".join(lines)


def render_inspection(source: str, parser: str, description: str, trace: Trace, rows: int) -> str:
    """What the parser ``parser`` read from ``source``: rows per table with the first ``rows``
    of each, the engine's stated configuration, and the source's diagnostics."""
    out = [f"{escape.terminal(source)}: {parser} ({description})"]
    for table in TABLES:
        frame = trace.table(table)
        out.append(f"\n{table}: {frame.height:,} rows")
        if frame.height:
            out.append(str(_escaped(frame.drop("node", "source").head(rows))))
    if trace.manifest.engine_config:
        out.append("\nengine_config: " + json.dumps(trace.manifest.engine_config, sort_keys=True))
    out.append("\n" + sources_table(trace.manifest.sources))
    return "\n".join(out) + "\n"


def render_formats(descriptions: Mapping[str, str]) -> str:
    """The parsers by name, one line each (``oomtrace inspect --formats``)."""
    return "".join(f"{name:24} {descriptions[name]}\n" for name in sorted(descriptions))


def _quoted(text: str) -> str:
    # Quoted as Python quotes a literal, so that an empty example still shows.
    quote = '"' if "'" in text and '"' not in text else "'"
    return f"{quote}{escape.terminal(text)}{quote}"


def _escaped(frame: pl.DataFrame) -> pl.DataFrame:
    """Text cells escaped for the terminal (the first rows only: a few values)."""
    text = [name for name, dtype in frame.schema.items() if dtype == pl.String]
    if not text:
        return frame
    return frame.with_columns(pl.col(text).map_elements(escape.terminal, return_dtype=pl.String))
