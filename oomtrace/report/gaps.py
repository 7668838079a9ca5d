"""The data gaps section: every diagnostic, so a reader knows what the report could not see."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.report.model import Column, Section, Table

COLUMNS = (
    Column("source", "source", "id"),
    Column("parser", "parser", "id"),
    Column("what", "what", "text"),
    Column("count", "lines", "count"),
    Column("detail", "detail", "text"),
)


def gaps_section(sources: Sequence[SourceDiagnostics], analysis_gaps: Any) -> Section:
    inputs: list[tuple[Any, ...]] = []
    gaps: list[tuple[Any, ...]] = []
    for s in sources:
        rows = ", ".join(f"{n:,} {t}" for t, n in sorted(s.rows.items()) if n) or "no rows"
        inputs.append((s.name, s.parser, "read", s.lines_read or None, rows))
        for reason, skip in sorted(s.skipped.items()):
            gaps.append((s.name, s.parser, f"skipped: {reason}", skip.count, skip.example))
        gaps.extend((s.name, s.parser, "note", None, note) for note in s.notes)
    gaps.extend(("analysis", "", *gap) for gap in _analysis_gaps(analysis_gaps))
    tables = [("inputs", Table(COLUMNS, tuple(inputs)))] if inputs else []
    if gaps:
        tables.append(("gaps", Table(COLUMNS, tuple(gaps))))
    return Section(
        "gaps",
        "Data gaps",
        paragraphs=(
            (
                "What each input held and what could not be used: skipped lines by reason (with "
                "the first example, redacted), assumptions made while reading, and what the "
                "analysis could not determine."
            ),
        ),
        tables=tuple(tables),
        empty="No inputs are recorded in the trace's manifest.",
    )


def _analysis_gaps(gaps: Any) -> list[tuple[str, int | None, str]]:
    if not gaps:
        return []
    out: list[tuple[str, int | None, str]] = []
    for gap in [gaps] if isinstance(gaps, str | Mapping) else gaps:
        if isinstance(gap, Mapping):
            what = str(gap.get("kind") or gap.get("what") or gap.get("topic") or "gap")
            count = gap.get("count")
            detail = gap.get("detail") or gap.get("text") or gap.get("message") or ""
            out.append((what, int(count) if isinstance(count, int) else None, str(detail)))
        else:
            out.append(("gap", None, str(gap)))
    return out
