"""The Markdown rendering, ready to paste into a postmortem or an issue tracker.

Charts are SVG files written beside the Markdown (the caller writes them: renderers never touch
files); the Markdown links them by relative path. Text from logs is escaped so that a request
id can never become a link, a table column or raw HTML.
"""

from __future__ import annotations

from collections.abc import Callable

from oomtrace import escape
from oomtrace.report.document import NUMERIC_KINDS, Chart, Report, Section, Table
from oomtrace.report.fmt import cell_text, value_text

SvgOf = Callable[[Chart], str]


def render_markdown(
    report: Report, *, asset_dir: str, svg_of: SvgOf
) -> tuple[str, dict[str, bytes]]:
    """The Markdown text and the chart files it links: ``{relative path: SVG bytes}``;
    ``asset_dir`` is the folder (relative to the Markdown file) the charts go in."""
    out = [f"# {escape.markdown(report.title)}", ""]
    if report.subtitle:
        out += [f"*{escape.markdown(report.subtitle)}*", ""]
    for alert in report.alerts:
        out += [f"> **Warning:** {escape.markdown(alert)}", ""]
    verdict = report.verdict
    out += [
        f"## Verdict: {escape.markdown(verdict.headline)}",
        "",
        escape.markdown(verdict.paragraph),
        "",
    ]
    out += [
        f"- **{escape.markdown(f.label)}**: {escape.markdown(value_text(f.value, f.kind))}"
        for f in verdict.figures
    ]
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
    for f in section.figures:
        lines.append(
            f"- **{escape.markdown(f.label)}**: {escape.markdown(value_text(f.value, f.kind))}"
        )
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
    header = "| " + " | ".join(escape.markdown(c.title) for c in table.columns) + " |"
    rule = "|" + "|".join("---:" if c.kind in NUMERIC_KINDS else "---" for c in table.columns) + "|"
    rows = [
        "| "
        + " | ".join(
            escape.markdown(cell_text(v, c.kind)) for v, c in zip(row, table.columns, strict=True)
        )
        + " |"
        for row in table.rows
    ]
    note = ["", f"_{escape.markdown(table.note)}_"] if table.note else []
    return [header, rule, *rows, *note]
