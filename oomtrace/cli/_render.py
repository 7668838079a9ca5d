"""Small text renderings shared by commands (kept out of the library's data modules)."""

from __future__ import annotations

from collections.abc import Sequence

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.schema import ROW_NAMES


def sources_table(sources: Sequence[SourceDiagnostics]) -> str:
    """One block per source: parser, rows per table, lines read/recognised/skipped, notes."""
    lines: list[str] = []
    for s in sources:
        rows = (
            ", ".join(f"{n:,} {ROW_NAMES.get(t, t)}" for t, n in sorted(s.rows.items()))
            or "no rows"
        )
        lines.append(f"{s.name}  [{s.parser}]  {rows}")
        if s.lines_read:
            lines.append(
                f"  lines: {s.lines_read:,} read, {s.lines_recognised:,} recognised, "
                f"{s.lines_skipped:,} skipped"
            )
        for reason, skip in sorted(s.skipped.items()):
            lines.append(f"  skipped {skip.count:,} x {reason}: {skip.example!r}")
        lines.extend(f"  note: {note}" for note in s.notes)
        if s.first_ts:
            lines.append(f"  time: {s.first_ts} .. {s.last_ts}")
    return "\n".join(lines)
