"""``oomtrace report`` on a terminal.

:func:`render_report_summary` is what ``oomtrace report TRACE`` prints: the verdict's three
lines (what, who, the fix), the remedies, the culprits and what ran out, fitted to the
terminal's width. :func:`render_report` is the whole report as text (``--format text``, ``-o
x.txt``): every section's figures and tables (charts as their per-series summary; the HTML has
the charts). Both fit a width: text wraps between words (never inside a request id, never
between a figure and its unit), and a table too wide for it is printed row by row, each row a
block of ``name: value`` pairs, so no column is ever cut. The other formats of the same report
are in :mod:`oomtrace.report`.
"""

from __future__ import annotations

import re
import textwrap
from typing import Final

from oomtrace import escape
from oomtrace.report.document import NUMERIC_KINDS, Report, Section, Table
from oomtrace.report.fmt import cell_text, value_text

WIDTH: Final = 100
# The narrowest width text is fitted to (a line of the verdict still reads).
MIN_WIDTH: Final = 40
# A figure and its unit stay on one line: "3.85 GiB" never wraps between the two.
_FIGURE_UNIT = re.compile(r"(\d) (B|KiB|MiB|GiB|TiB|KB|MB|GB|TB|s|ms|tokens?|blocks?)\b")
_KEEP = "\x00"
# The culprits' columns in the summary: who, how much, on what basis.
SUMMARY_COLUMNS: Final = (
    "rank", "request_id", "share", "bytes", "tokens", "growth_tokens", "step_bytes",
)  # fmt: skip
# Culprits listed in the summary; the whole report has them all.
SUMMARY_CULPRITS: Final = 5


def wrap(text: str, width: int, indent: str = "") -> list[str]:
    """``text`` escaped and wrapped to ``width``; request ids (which have hyphens) and figures
    with their units stay whole."""
    kept = _FIGURE_UNIT.sub(rf"\1{_KEEP}\2", escape.terminal(text))
    lines = textwrap.wrap(
        kept,
        max(width, MIN_WIDTH),
        initial_indent=indent,
        subsequent_indent=indent,
        break_on_hyphens=False,
        break_long_words=False,
    )
    return [line.replace(_KEEP, " ") for line in lines]


def render_report(report: Report, width: int = WIDTH) -> str:
    """The whole report as text, fitted to ``width`` columns."""
    out: list[str] = [escape.terminal(report.title)]
    if report.subtitle:
        out += wrap(report.subtitle, width)
    out.append("=" * min(width, len(out[0])))
    for alert in report.alerts:
        out += ["", *wrap(f"WARNING: {alert}", width)]
    verdict = report.verdict
    out += ["", "VERDICT", *_verdict_lines(report, width), ""]
    if verdict.remedies.rows:
        out += ["What would have prevented it", *table(verdict.remedies, width), ""]
    out += wrap(verdict.paragraph, width)
    out.append("")
    label = max((len(f.label) for f in verdict.figures), default=0)
    out += [
        f"  {f.label:<{label}}  {escape.terminal(value_text(f.value, f.kind))}"
        for f in verdict.figures
    ]
    out += ["", "Culprits", *table(verdict.culprits, width)]
    if verdict.evidence:
        out += ["", "Evidence"]
        for line in verdict.evidence:
            wrapped = wrap(line, width, "    ")
            out += ["  - " + wrapped[0][4:], *wrapped[1:]]
    for section in report.sections:
        out += ["", *_section(section, width)]
    return "\n".join(out).rstrip() + "\n"


def render_report_summary(report: Report, width: int = WIDTH) -> str:
    """What a person on call reads first, fitted to ``width``: the header, the verdict's lines,
    the remedies, the culprits (whole ids), what ran out, and where the rest is."""
    out: list[str] = [escape.terminal(report.title)]
    if report.subtitle:
        out += wrap(report.subtitle, width)
    for alert in report.alerts:
        out += ["", *wrap(f"WARNING: {alert}", width)]
    out += ["", *_verdict_lines(report, width)]
    verdict = report.verdict
    if verdict.remedies.rows:
        out += ["", *wrap("What would have prevented it (apply the first first)", width)]
        for i, row in enumerate(verdict.remedies.records(), start=1):
            text = f"{i}. {row.get('action')}"
            if row.get("detail"):
                text += f": {row['detail']}"
            out += wrap(text, width, "  ")
    if verdict.culprits.rows:
        keep = [c for c in verdict.culprits.columns if c.key in SUMMARY_COLUMNS]
        rows = verdict.culprits.rows
        more = len(rows) - SUMMARY_CULPRITS
        compact = Table(
            tuple(keep),
            tuple(
                tuple(v for v, c in zip(row, verdict.culprits.columns, strict=True) if c in keep)
                for row in rows[:SUMMARY_CULPRITS]
            ),
            note=f"{more} more in the whole report" if more > 0 else "",
        )
        out += ["", "Culprits", *table(compact, width)]
    try:
        cause = report.section("cause")
    except KeyError:
        cause = None
    if cause is not None:
        out += ["", escape.terminal(cause.title)]
        for paragraph in cause.paragraphs or (cause.empty,):
            out += wrap(paragraph, width, "  ")
        shown = [f for f in cause.figures if f.value is not None]
        if shown:
            pairs = "; ".join(f"{f.label} {value_text(f.value, f.kind)}" for f in shown)
            out += wrap(pairs, width, "  ")
    out += [
        "",
        *wrap(
            "The whole report (charts, the requests of the window, memory over time, the "
            "ledger, the data gaps): oomtrace report ... -o incident.html, or --format text.",
            width,
        ),
    ]
    return "\n".join(out).rstrip() + "\n"


def _verdict_lines(report: Report, width: int) -> list[str]:
    """The verdict's lines, each wrapped on its own (a request id is never split)."""
    return [part for line in report.verdict.lines for part in wrap(line, width, "  ")]


def _section(section: Section, width: int) -> list[str]:
    title = escape.terminal(section.title)
    lines = [title, "-" * min(len(title), width)]
    if not (section.tables or section.charts or section.figures):
        return [*lines, *wrap(section.empty or "Nothing.", width)]
    for paragraph in section.paragraphs:
        lines += wrap(paragraph, width)
    lines += [
        f"  {f.label}: {escape.terminal(value_text(f.value, f.kind))}" for f in section.figures
    ]
    for chart in section.charts:
        lines += wrap(f"[chart: {chart.title}; {chart.caption}]", width)
    for name, body in section.tables:
        lines += ["", f"{name.replace('_', ' ')}:", *table(body, width)]
    return lines


def table(body: Table, width: int = WIDTH) -> list[str]:
    """The table aligned in columns when it fits ``width``, else one block per row."""
    if not body.rows:
        return [f"  {escape.terminal(body.note or 'none')}"]
    header = [c.title for c in body.columns]
    cells = [
        [escape.terminal(cell_text(v, c.kind)) for v, c in zip(row, body.columns, strict=True)]
        for row in body.rows
    ]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(header)]
    if 2 + sum(widths) + 2 * (len(widths) - 1) > width:
        return _blocks(body, header, cells, width)
    right = [c.kind in NUMERIC_KINDS for c in body.columns]

    def line(values: list[str]) -> str:
        parts = [
            v.rjust(w) if r else v.ljust(w) for v, w, r in zip(values, widths, right, strict=True)
        ]
        return ("  " + "  ".join(parts)).rstrip()

    lines = [line(header), "  " + "  ".join("-" * w for w in widths)]
    lines += [line(r) for r in cells]
    if body.note:
        lines += wrap(f"({body.note})", width, "  ")
    return lines


def _blocks(body: Table, header: list[str], cells: list[list[str]], width: int) -> list[str]:
    """Each row as a block: its first column (the id, whole) on a line, then ``title: value``
    pairs wrapped below it."""
    lines: list[str] = []
    for row in cells:
        lead = row[0] if header[0] != "rank" else f"#{row[0]} {row[1] if len(row) > 1 else ''}"
        skip = 2 if header[0] == "rank" else 1
        lines.append(f"  {lead}".rstrip())
        pairs = [
            f"{title}: {value}"
            for title, value in zip(header[skip:], row[skip:], strict=True)
            if value
        ]
        text = "; ".join(pairs)
        lines += [line.replace(_KEEP, " ") for line in _wrap_pairs(text, width)]
    if body.note:
        lines += wrap(f"({body.note})", width, "  ")
    return lines


def _wrap_pairs(text: str, width: int) -> list[str]:
    kept = _FIGURE_UNIT.sub(rf"\1{_KEEP}\2", text)
    return textwrap.wrap(
        kept,
        max(width, MIN_WIDTH),
        initial_indent="      ",
        subsequent_indent="      ",
        break_on_hyphens=False,
        break_long_words=False,
    )
