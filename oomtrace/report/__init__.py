"""Incident reports: a report document built once, rendered as Markdown, JSON or HTML here and
as terminal text by :func:`oomtrace.terminal.render_report`.

``build_report(ReportInputs(findings, trace, ...))`` makes the :class:`Report`;
``render(report, fmt, asset_dir=...)`` turns it into the text of one format and the files that
go beside it (Markdown's SVG charts). Renderers never touch files and never compute: the
caller writes what ``render`` returns. Charts are drawn (Altair, vl-convert:
:mod:`~oomtrace.report.vega`) only by the formats that show them, HTML and Markdown.

The modules: :mod:`~oomtrace.report.build` (the document, section by section),
:mod:`~oomtrace.report.verdict`, :mod:`~oomtrace.report.cause_section` (what ran out, per
class; its frames in :mod:`~oomtrace.report.cause_data`, its charts in
:mod:`~oomtrace.report.cause_charts`), :mod:`~oomtrace.report.lanes`,
:mod:`~oomtrace.report.overview_sections` and :mod:`~oomtrace.report.overview_charts`,
:mod:`~oomtrace.report.span` (the charts' stretch of time), :mod:`~oomtrace.report.drawn` (what
was read for the charts, shared by the sections), :mod:`~oomtrace.report.trace_view`
and :mod:`~oomtrace.report.chart_data` (what is read, lazily), :mod:`~oomtrace.report.charts`
and :mod:`~oomtrace.report.palette` (what every chart shares), and one module per format.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from oomtrace import lazy
from oomtrace.report.build import ReportInputs, ReportOptions, build_report
from oomtrace.report.document import (
    DOCUMENT_FORMATS,
    FORMATS,
    REPORT_VERSION,
    DocumentFormat,
    Report,
    ReportFormat,
)
from oomtrace.report.html import render_html
from oomtrace.report.jsonout import render_json
from oomtrace.report.markdown import render_markdown

if TYPE_CHECKING:
    from oomtrace.report.charts import static_spec
    from oomtrace.report.vega import chart_svg, javascript_bundle

__all__ = [
    "DOCUMENT_FORMATS",
    "FORMATS",
    "REPORT_VERSION",
    "DocumentFormat",
    "Rendered",
    "Report",
    "ReportFormat",
    "ReportInputs",
    "ReportOptions",
    "build_report",
    "chart_svg",
    "javascript_bundle",
    "render",
    "static_spec",
]


@dataclass(frozen=True)
class Rendered:
    """One format's text and the files that go beside it (relative path -> bytes)."""

    text: str
    assets: dict[str, bytes] = field(default_factory=dict)


# What draws charts imports Altair and vl-convert: loaded when first used (oomtrace.lazy).
__getattr__ = lazy.exports(
    "oomtrace.report",
    {
        "chart_svg": "oomtrace.report.vega",
        "javascript_bundle": "oomtrace.report.vega",
        "static_spec": "oomtrace.report.charts",
    },
)


def render(report: Report, fmt: DocumentFormat, *, asset_dir: str = "charts") -> Rendered:
    """``report`` in ``fmt``. For Markdown, charts are returned as ``{asset_dir}/KEY.svg``."""
    if fmt == "json":
        return Rendered(render_json(report))
    from oomtrace.report.vega import (  # noqa: PLC0415 - Altair: only to draw
        chart_svg,
        javascript_bundle,
        library_versions,
    )

    if fmt == "markdown":
        text, assets = render_markdown(report, asset_dir=asset_dir, svg_of=chart_svg)
        return Rendered(text, assets)
    return Rendered(render_html(report, script=javascript_bundle(), versions=library_versions()))
