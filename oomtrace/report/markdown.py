"""The Markdown rendering, ready to paste into a postmortem or an issue tracker.

Plain GitHub tables; numbers, sizes and times written as they read (they are the report's own
formats, which hold no Markdown syntax, so they need no escaping); request ids as code spans, so
they are copied whole and can never become a link, a table column or raw HTML; every other text
from logs escaped. Charts are SVG files written beside the Markdown (the caller writes them:
renderers never touch files); the Markdown links them by relative path.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from oomtrace import escape
from oomtrace.report.document import (
    NUMERIC_KINDS,
    Chart,
    Figure,
    Kind,
    Report,
    Section,
    Table,
    Value,
    culprit_ids,
    id_pieces,
)
from oomtrace.report.fmt import cell_text, value_text

SvgOf = Callable[[Chart], str]
# Kinds whose text the report formats itself: digits, units, separators, ISO times.
PLAIN_KINDS = frozenset(NUMERIC_KINDS | {"time"})


def code_span(text: str, *, in_table: bool = False) -> str:
    """``text`` as a code span: a fence longer than any run of backticks in it, and in a table
    cell every pipe escaped (GitHub splits cells on a pipe even inside code)."""
    shown = escape.visible(text)
    runs = [len(r) for r in re.findall(r"`+", shown)]
    fence = "`" * (max(runs, default=0) + 1)
    pad = " " if shown.startswith("`") or shown.endswith("`") else ""
    if in_table:
        shown = shown.replace("|", "\\|")
    return f"{fence}{pad}{shown}{pad}{fence}"


def with_ids(text: str, ids: list[str]) -> str:
    """``text`` escaped, with each of ``ids`` in it as a code span."""
    return "".join(
        code_span(piece) if is_id else escape.markdown(piece)
        for piece, is_id in id_pieces(text, ids)
    )


def value_md(value: Value, kind: Kind, *, cell: bool = False) -> str:
    """A value inside a line (a table cell, after a label): the report's own formats as they
    read, ids as code, other text escaped for where it stands."""
    text = cell_text(value, kind) if cell else value_text(value, kind)
    if kind in PLAIN_KINDS or value is None:
        return text
    if kind == "id":
        return code_span(text, in_table=cell)
    return escape.markdown_inline(text)


def _figures(figures: tuple[Figure, ...]) -> list[str]:
    return [f"- **{escape.markdown(f.label)}**: {value_md(f.value, f.kind)}" for f in figures]


def render_markdown(
    report: Report, *, asset_dir: str, svg_of: SvgOf
) -> tuple[str, dict[str, bytes]]:
    """The Markdown text and the chart files it links: ``{relative path: SVG bytes}``;
    ``asset_dir`` is the folder (relative to the Markdown file) the charts go in."""
    out = [f"# {escape.markdown(report.title)}", ""]
    if report.subtitle:
        out += [escape.markdown(report.subtitle), ""]
    for alert in report.alerts:
        out += [f"> **Warning:** {escape.markdown(alert)}", ""]
    verdict = report.verdict
    ids = culprit_ids(verdict)
    out += ["## Verdict", ""]
    for i, line in enumerate(verdict.lines):
        text = with_ids(line, ids)
        # what happened and the fix stand out; the culprits and the why between them
        out.append(f"- **{text}**" if i in (0, len(verdict.lines) - 1) else f"- {text}")
    out.append("")
    if verdict.remedies.rows:
        out += ["### What would have prevented it", "", *_table(verdict.remedies), ""]
    out += [escape.markdown(verdict.paragraph), "", *_figures(verdict.figures)]
    out += ["", "### Culprits", "", *_table(verdict.culprits)]
    if verdict.evidence:
        out += ["", "### Evidence", "", *(f"- {escape.markdown(e)}" for e in verdict.evidence)]
    assets: dict[str, bytes] = {}
    for section in report.sections:
        out += ["", *_section(section, asset_dir, svg_of, assets)]
    return "\n".join(out).rstrip() + "\n", assets


def _section(
    section: Section, asset_dir: str, svg_of: SvgOf, assets: dict[str, bytes]
) -> list[str]:
    lines = [f"## {escape.markdown(section.title)}", ""]
    if not (section.tables or section.charts or section.figures):
        return [*lines, f"_{escape.markdown(section.empty or 'Nothing.')}_"]
    for paragraph in section.paragraphs:
        lines += [escape.markdown(paragraph), ""]
    if section.figures:
        lines += [*_figures(section.figures), ""]
    for chart in section.charts:
        path = f"{asset_dir}/{chart.key}.svg"
        assets[path] = svg_of(chart).encode("utf-8")
        # the path is ours (a safe file name), the alt text is escaped
        lines += [
            f"![{escape.markdown(chart.title)}]({path})",
            "",
            f"_{escape.markdown(chart.caption)}_",
            "",
        ]
    for name, table in section.tables:
        lines += [f"**{escape.markdown(name.replace('_', ' '))}**", "", *_table(table), ""]
    return lines


def _table(table: Table) -> list[str]:
    if not table.rows:
        return [f"_{escape.markdown(table.note or 'none')}_"]
    header = "| " + " | ".join(escape.markdown_inline(c.title) for c in table.columns) + " |"
    rule = "|" + "|".join("---:" if c.kind in NUMERIC_KINDS else "---" for c in table.columns) + "|"
    rows = [
        "| "
        + " | ".join(
            value_md(v, c.kind, cell=True) for v, c in zip(row, table.columns, strict=True)
        )
        + " |"
        for row in table.rows
    ]
    note = ["", f"_{escape.markdown(table.note)}_"] if table.note else []
    return [header, rule, *rows, *note]
