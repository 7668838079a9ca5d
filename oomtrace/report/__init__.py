"""Incident reports: a report document built once, rendered as Markdown, JSON or HTML here and
as terminal text by :func:`oomtrace.terminal.render_report`.

``build_report(ReportInputs(findings, trace, ...))`` makes the :class:`Report`;
``render(report, fmt, asset_dir=...)`` turns it into the text of one format and the files that
go beside it (Markdown's SVG charts). Renderers never touch files and never compute: the
caller writes what ``render`` returns. What is the same on every run (the JavaScript bundle, the
SVG of a chart already drawn) is read from the user's cache (:mod:`oomtrace.user_cache`).

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

import json
from dataclasses import dataclass, field
from functools import cache
from importlib.metadata import version

import altair as alt
import vl_convert

from oomtrace import user_cache
from oomtrace.report.build import ReportInputs, ReportOptions, build_report
from oomtrace.report.charts import static_spec
from oomtrace.report.document import (
    DOCUMENT_FORMATS,
    FORMATS,
    REPORT_VERSION,
    Chart,
    DocumentFormat,
    Report,
    ReportFormat,
)
from oomtrace.report.html import render_html
from oomtrace.report.jsonout import render_json
from oomtrace.report.markdown import render_markdown

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


def vega_lite_version() -> str:
    """The Vega-Lite version Altair writes specs for (``6.4`` from ``v6.4.1``)."""
    return ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])


BUNDLE_SNIPPET = "window.vegaEmbed = vegaEmbed; window.vega = vega; window.vegaLite = vegaLite;"
# The SVGs of charts already drawn, kept in the user's cache: the newest this many.
SVGS_KEPT = 256


def _versions() -> str:
    """What decides the bundle's and an SVG's content: vl-convert's release (it pins Vega,
    Vega-Lite and vega-embed) and the Vega-Lite version Altair writes for."""
    return f"vl-convert-{version('vl-convert-python')}-vega-lite-{vega_lite_version()}"


@cache
def javascript_bundle() -> str:
    """Vega, Vega-Lite and vega-embed as one script (from ``vl-convert-python``, no network).

    Bundling takes seconds and gives the same text for the same versions, so it is done once
    per user and version and then read from the cache (:mod:`oomtrace.user_cache`)."""

    def bundle() -> str:
        text: str = vl_convert.javascript_bundle(BUNDLE_SNIPPET, vl_version=vega_lite_version())
        return text

    name = f"{_versions()}-{user_cache.key(BUNDLE_SNIPPET)}.js"
    return user_cache.cached_text("javascript", name, bundle)


def library_versions() -> str:
    return (
        f"Vega {vl_convert.get_vega_version()}, Vega-Lite {vega_lite_version()}, "
        f"vega-embed {vl_convert.get_vega_embed_version()}."
    )


def chart_svg(chart: Chart) -> str:
    """One chart as a static SVG (for Markdown), drawn by the same Vega as the HTML, at a fixed
    width (a file has no container to fit). The same spec gives the same SVG, so it is read
    from the cache when this chart was drawn before."""
    spec = static_spec(chart.spec)
    text = json.dumps(spec, sort_keys=True, separators=(",", ":"))

    def draw() -> str:
        svg: str = vl_convert.vegalite_to_svg(spec, vl_version=vega_lite_version())
        return svg

    name = f"{user_cache.key(_versions(), text)}.svg"
    return user_cache.cached_text("svg", name, draw, keep=SVGS_KEPT)


def render(report: Report, fmt: DocumentFormat, *, asset_dir: str = "charts") -> Rendered:
    """``report`` in ``fmt``. For Markdown, charts are returned as ``{asset_dir}/KEY.svg``."""
    if fmt == "markdown":
        text, assets = render_markdown(report, asset_dir=asset_dir, svg_of=chart_svg)
        return Rendered(text, assets)
    if fmt == "json":
        return Rendered(render_json(report))
    return Rendered(render_html(report, script=javascript_bundle(), versions=library_versions()))
