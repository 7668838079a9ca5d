"""What draws a report's charts: Vega, Vega-Lite and vega-embed (from ``vl-convert-python``, no
network) and the Vega-Lite version Altair writes for. Imported only to draw (HTML, Markdown):
JSON and the terminal never load Altair or vl-convert.

What is the same on every run (the JavaScript bundle, the SVG of a chart already drawn) is read
from the user's cache (:mod:`oomtrace.user_cache`).
"""

from __future__ import annotations

import json
from functools import cache
from importlib.metadata import version

import altair as alt
import vl_convert

from oomtrace import user_cache
from oomtrace.report.charts import static_spec
from oomtrace.report.document import Chart


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
