"""``oomtrace report`` on a terminal: the verdict a person on call reads in thirty seconds, then
every section's figures and tables (charts as their per-series summary; the HTML has the charts).
The other formats of the same report are in :mod:`oomtrace.report`."""

from __future__ import annotations

import re
import textwrap

from oomtrace import escape
from oomtrace.report.document import NUMERIC_KINDS, Report, Section, Table
from oomtrace.report.fmt import cell_text, value_text

WIDTH = 100


# A figure and its unit stay on one line: "3.85 GiB" never wraps between the two.
_FIGURE_UNIT = re.compile(r"(\d) (B|KiB|MiB|GiB|TiB|KB|MB|GB|TB|s|ms|tokens?|blocks?)\b")
_KEEP = "\x00"


def _wrap(text: str) -> list[str]:
    # ids with hyphens stay whole on one line
    kept = _FIGURE_UNIT.sub(rf"\1{_KEEP}\2", escape.terminal(text))
    lines = textwrap.wrap(kept, WIDTH, break_on_hyphens=False, break_long_words=False)
    return [line.replace(_KEEP, " ") for line in lines]


def render_report(report: Report) -> str:
    """The report as terminal text (``oomtrace report --format text``)."""
    out: list[str] = [escape.terminal(report.title)]
    if report.subtitle:
        out.append(escape.terminal(report.subtitle))
    out.append("=" * min(WIDTH, len(out[0])))
    for alert in report.alerts:
        out += ["", *_wrap(f"WARNING: {alert}")]
    verdict = report.verdict
    out += ["", f"VERDICT: {escape.terminal(verdict.headline)}", ""]
    out += _wrap(verdict.paragraph)
    out.append("")
    width = max((len(f.label) for f in verdict.figures), default=0)
    out += [
        f"  {f.label:<{width}}  {escape.terminal(value_text(f.value, f.kind))}"
        for f in verdict.figures
    ]
    out += ["", "Culprits", *_table(verdict.culprits)]
    if verdict.evidence:
        out += ["", "Evidence", *(f"  - {escape.terminal(e)}" for e in verdict.evidence)]
    for section in report.sections:
        out += ["", *_section(section)]
    return "\n".join(out).rstrip() + "\n"


def _section(section: Section) -> list[str]:
    title = escape.terminal(section.title)
    lines = [title, "-" * len(title)]
    if not (section.tables or section.charts or section.figures):
        return [*lines, *_wrap(section.empty or "Nothing.")]
    for paragraph in section.paragraphs:
        lines += _wrap(paragraph)
    lines += [
        f"  {f.label}: {escape.terminal(value_text(f.value, f.kind))}" for f in section.figures
    ]
    for chart in section.charts:
        lines.append(f"[chart: {escape.terminal(chart.title)}; {escape.terminal(chart.caption)}]")
    for name, table in section.tables:
        lines += ["", f"{name.replace('_', ' ')}:", *_table(table)]
    return lines


def _table(table: Table) -> list[str]:
    if not table.rows:
        return [f"  {escape.terminal(table.note or 'none')}"]
    header = [c.title for c in table.columns]
    cells = [
        [escape.terminal(cell_text(v, c.kind)) for v, c in zip(row, table.columns, strict=True)]
        for row in table.rows
    ]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(header)]
    right = [c.kind in NUMERIC_KINDS for c in table.columns]

    def line(values: list[str]) -> str:
        parts = [
            v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, right, strict=True)
        ]
        return ("  " + "  ".join(parts)).rstrip()

    lines = [line(header), "  " + "  ".join("-" * w for w in widths)]
    lines += [line(r) for r in cells]
    if table.note:
        lines.append(f"  ({escape.terminal(table.note)})")
    return lines
