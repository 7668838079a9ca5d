"""The data gaps section: every diagnostic once, so a reader knows what the report could not see.

Three tables: ``inputs`` (what each source held), ``assumptions`` (how something was read: each
source's clock as one sentence, its notes on conventions, bases the analysis inferred) and
``gaps`` (what is missing: skipped lines, notes on data left out, holes, absent series). Rows
about one source come from the trace's manifest, under that source; the analysis adds only what
it found itself (its copies of the manifest's diagnostics are not repeated). In the JSON every
row of the last two tables carries ``category`` (``assumption`` or ``gap``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from oomtrace.diagnostics import Category, kind_category, source_clock_sentence
from oomtrace.report.document import Column, Section, Table
from oomtrace.trace import Manifest, trace_clock_sentence

COLUMNS = (
    Column("source", "source", "id"),
    Column("parser", "parser", "id"),
    Column("what", "what", "text"),
    Column("count", "lines", "count"),
    Column("detail", "detail", "text"),
)
# The analysis' gap kinds that restate the manifest: the section reads those from the manifest.
MANIFEST_KINDS: Final = frozenset(
    {"skipped_lines", "note", "left_out", "unrecognised_source", "clock"}
)

Row = tuple[Any, ...]


def gaps_section(manifest: Manifest, analysis_gaps: Any) -> Section:
    inputs: list[Row] = []
    rows: dict[Category, list[Row]] = {"assumption": [], "gap": []}
    for s in manifest.sources:
        inputs.append((s.name, s.parser, "read", s.lines_read or None, s.rows_text()))
        if sentence := source_clock_sentence(s):
            rows["assumption"].append((s.name, s.parser, "clock", None, sentence))
        for note in s.notes:
            rows[s.category(note)].append((s.name, s.parser, "note", None, note))
        if s.lines_read and not s.lines_recognised:
            rows["gap"].append((s.name, s.parser, "nothing recognised", s.lines_read, ""))
        for reason, skip in sorted(s.skipped.items()):
            rows["gap"].append((s.name, s.parser, f"skipped: {reason}", skip.count, skip.example))
    if sentence := trace_clock_sentence(manifest):
        nodes = ", ".join(sorted(manifest.nodes)) or "trace"
        rows["assumption"].append((nodes, "", "clock", None, sentence))
    parsers = {f"{s.parser}:{s.name}": (s.name, s.parser) for s in manifest.sources}
    for category, row in _analysis_rows(analysis_gaps, parsers):
        rows[category].append(row)
    order = {s.name: i for i, s in enumerate(manifest.sources)}
    for listed in rows.values():  # under their source, in the order of the inputs; then the rest
        listed.sort(key=lambda r: order.get(r[0], len(order)))
    tables = [("inputs", Table(COLUMNS, tuple(inputs)))] if inputs else []
    for name, category in (("assumptions", "assumption"), ("gaps", "gap")):
        if rows[category]:
            table = Table(COLUMNS, tuple(rows[category]), tags=(("category", category),))
            tables.append((name, table))
    return Section(
        "gaps",
        "Data gaps",
        paragraphs=(
            (
                "What each input held; the assumptions made while reading it (how times were "
                "placed, what was inferred); and the gaps: lines skipped by reason (with the "
                "first example, redacted), data left out, and what the analysis could not see."
            ),
        ),
        tables=tuple(tables),
        empty="No inputs are recorded in the trace's manifest.",
    )


def _analysis_rows(gaps: Any, parsers: Mapping[str, tuple[str, str]]) -> list[tuple[Category, Row]]:
    """The analysis' own gaps (findings ``gaps``: objects' JSON or plain text), each with its
    category; those that restate the manifest are left to the manifest's rows. A gap on a series
    names it ``parser:source`` (``parsers`` maps that to the input's row)."""
    if not gaps:
        return []
    out: list[tuple[Category, Row]] = []
    for gap in [gaps] if isinstance(gaps, str | Mapping) else gaps:
        if not isinstance(gap, Mapping):
            out.append(("gap", ("analysis", "", "gap", None, str(gap))))
            continue
        what = str(gap.get("kind") or gap.get("what") or gap.get("topic") or "gap")
        if what in MANIFEST_KINDS:
            continue
        count = gap.get("count")
        detail = str(gap.get("detail") or gap.get("text") or gap.get("message") or "")
        category = gap.get("category")
        if category not in ("assumption", "gap"):
            category = kind_category(what)
        source = str(gap.get("source") or "analysis")
        name, parser = parsers.get(source, (source, ""))
        if source in parsers:
            detail = detail.replace(f" ({source})", "")
        row = (name, parser, what, count if isinstance(count, int) else None, detail)
        out.append((category, row))
    return out
