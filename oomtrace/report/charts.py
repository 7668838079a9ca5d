"""What every chart shares: its width, time axis, colours, legends and markers, and the step
from an Altair chart to a Vega-Lite spec with its data as named datasets.

Every time axis is UTC (the report's clock), every time chart zooms and pans on time (drag,
wheel; double-click resets), and every mark has a tooltip with the request ids and numbers
behind it. Bytes are drawn in the largest binary unit their values reach (GiB, 2**30, for a
device; MiB for a small pool) and labelled so. Charts fill the width of the page
(``width: "container"``); legends sit below the plot, so that nothing is cut off at 1,024
pixels; a file (Markdown's SVG) gets a fixed width instead (:func:`static_spec`). Callers pass
data already reduced for display (:mod:`oomtrace.report.downsample`); nothing here aggregates.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Final

import altair as alt
import polars as pl

from oomtrace.report import palette

STATIC_WIDTH: Final = 860
TIME_FORMAT: Final = "%Y-%m-%d %H:%M:%S.%L"
# Every tick label stands alone (Vega's default multi-format prints ".500" for a half second,
# which reads as nothing once neighbouring labels are thinned out): the time of day, the
# milliseconds when there are any, and the date at midnight.
TIME_LABEL: Final = (
    "(datum.value % 86400000 == 0 ? utcFormat(datum.value, '%Y-%m-%d ') : '')"
    " + utcFormat(datum.value, '%H:%M:%S')"
    " + (datum.value % 1000 ? utcFormat(datum.value, '.%L') : '')"
)
# About one time label per 110 pixels: labels of "16:43:27.500" never crowd each other.
TICKS: Final = {"expr": "max(2, floor(width / 110))"}
MONOSPACE: Final = "ui-monospace, Menlo, Consolas, 'DejaVu Sans Mono', monospace"
CONFIG: Final[dict[str, Any]] = {
    "legend": {
        "orient": "bottom",
        "direction": "horizontal",
        "columns": 3,
        "labelLimit": 260,
        "titleLimit": 0,
        "symbolStrokeWidth": 2.5,
        # legends below the plot stack one under the other, never side by side off the page
        # (Vega-Lite takes Vega's legend layout as an expression)
        "layout": {"expr": "{bottom: {anchor: 'start', direction: 'vertical', margin: 6}}"},
    },
    "axis": {"labelLimit": 0, "titleFontWeight": "normal"},
    "title": {"anchor": "start", "fontSize": 14},
    "view": {"stroke": "#dddddd"},
}


def epoch_ms(frame: pl.DataFrame, *columns: str) -> pl.DataFrame:
    """Datetime columns as integer milliseconds since the epoch: compact in the page, and
    Vega-Lite reads numbers on a temporal axis as exactly that."""
    return frame.with_columns(pl.col(c).dt.epoch("ms") for c in columns)


class Datasets:
    """Chart data kept out of Altair's hands: layers refer to a named dataset, and the rows go
    into the spec's top-level ``datasets`` after ``to_dict``. Altair validates every inline
    row against the Vega-Lite JSON schema, which for a day-long trace took tens of seconds;
    the named form is the same Vega-Lite, validated on the spec alone."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.values: dict[str, list[dict[str, Any]]] = {}

    def add(self, name: str, frame: pl.DataFrame) -> alt.Data:
        key = f"{self.prefix}_{name}"
        self.values[key] = frame.to_dicts()
        return alt.Data(name=key)  # type: ignore[no-untyped-call]


def time_x(
    field: str = "t", title: str = "time (UTC)", domain: tuple[int, int] | None = None
) -> alt.X:
    """The time axis. A chart's span is drawn by :func:`span_layer`, not by a scale domain:
    an explicit domain conflicts with the zoom bound to the scale (Vega warns, and merges)."""
    del domain
    return alt.X(
        f"{field}:T",
        title=title,
        scale=alt.Scale(type="utc"),
        axis=alt.Axis(
            labelExpr=TIME_LABEL,
            labelOverlap="greedy",
            labelSeparation=10,
            labelFlush=False,
            tickCount=TICKS,
        ),
    )


def time_overlays(
    markers: pl.DataFrame, data_sets: Datasets, domain: tuple[int, int] | None
) -> list[alt.Chart]:
    """What every time chart draws over its series: the point events (when there are any) and
    the span's ends (:func:`markers_layer`, :func:`span_layer`)."""
    layers = [markers_layer(markers, data_sets, domain)] if markers.height else []
    return layers + span_layer(domain, data_sets)


def span_layer(domain: tuple[int, int] | None, data_sets: Datasets) -> list[alt.Chart]:
    """An invisible layer at the two ends of the charts' span (epoch milliseconds), so the time
    axis covers the whole span even where no series has a point (every series is filtered to
    it, so nothing reaches beyond)."""
    if domain is None:
        return []
    ends = pl.DataFrame({"t": list(domain)})
    layer = (
        alt.Chart(data_sets.add("span", ends))
        .mark_point(opacity=0, size=1)
        .encode(x=time_x(), tooltip=alt.value(None))
    )
    return [layer]


def time_tip(field: str, title: str) -> alt.Tooltip:
    return alt.Tooltip(f"{field}:T", title=title, format=TIME_FORMAT, formatType="utc")


def colour_scale(names: list[str], colours: dict[str, str]) -> alt.Scale:
    """Known names in their fixed colour, the others from :data:`palette.OTHERS` in order."""
    known = [n for n in names if n in colours]
    other = [n for n in names if n not in colours]
    taken = {colours[n] for n in known}
    spare = [c for c in palette.OTHERS if c not in taken] or list(palette.OTHERS)
    colour_range = [colours[n] for n in known] + [spare[i % len(spare)] for i in range(len(other))]
    return alt.Scale(domain=known + other, range=colour_range)


def markers_layer(
    markers: pl.DataFrame, data_sets: Datasets, domain: tuple[int, int] | None = None
) -> alt.Chart:
    """Vertical rules for OOMs, the incident peak and other point events (``ts, kind, label,
    detail``), each kind in its colour and dash, in a legend of its own. ``domain``: the
    chart's time domain (every layer states the same one, or Vega warns of a conflict)."""
    data = epoch_ms(markers.rename({"ts": "t"}), "t")
    labels = list(dict.fromkeys(data["label"].to_list()))
    styles = [
        palette.MARKERS.get(label, palette.PEAK_MARKER if label.startswith("peak") else None)
        or (palette.DARK_GREY, (4, 2))
        for label in labels
    ]
    layer: alt.Chart = (
        alt.Chart(data_sets.add("markers", data))
        .mark_rule(strokeWidth=2)
        .encode(
            x=time_x(domain=domain),
            # stroke, not color: markers get their own legend beside the series legend
            stroke=alt.Stroke(
                "label:N",
                title="marker",
                scale=alt.Scale(domain=labels, range=[s[0] for s in styles]),
            ),
            strokeDash=alt.StrokeDash(
                "label:N",
                title="marker",
                scale=alt.Scale(domain=labels, range=[list(s[1]) or [1, 0] for s in styles]),
            ),
            tooltip=[
                alt.Tooltip("label:N", title="marker"),
                time_tip("t", "time (UTC)"),
                alt.Tooltip("detail:N", title="detail"),
            ],
        )
    )
    return layer


def finish(
    chart: alt.TopLevelMixin, title: str, data_sets: Datasets, *, height: int
) -> dict[str, Any]:
    """The Vega-Lite spec: as wide as its container, ``height`` pixels of plot, legends below."""
    # validated against the Vega-Lite schema by the tests (tests/unit/report/test_chart_specs.py),
    # not on every run: validation was a third of the time a report took
    spec: dict[str, Any] = chart.properties(title=title).to_dict(validate=False)
    spec["datasets"] = {**spec.get("datasets", {}), **data_sets.values}
    spec["width"] = "container"
    spec["height"] = height
    spec["autosize"] = {"type": "fit-x", "contains": "padding"}
    spec["config"] = {**spec.get("config", {}), **copy.deepcopy(CONFIG)}
    return spec


def static_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` for a file, where there is no container to fit: a fixed width."""
    if spec.get("width") != "container":
        return spec
    out = dict(spec)
    out["width"] = STATIC_WIDTH
    out["autosize"] = {"type": "pad"}
    return out


@dataclass(frozen=True)
class Unit:
    """The binary unit a chart draws bytes in: ``name`` and bytes per unit."""

    name: str
    factor: int

    def of(self, value: float) -> float:
        return value / self.factor


UNITS: Final = (Unit("GiB", 1 << 30), Unit("MiB", 1 << 20), Unit("KiB", 1 << 10), Unit("B", 1))


def unit_for(*values: float | None) -> Unit:
    """The largest unit in which the largest of ``values`` is at least one (a 5 MiB pool is
    drawn in MiB, not as 0.005 GiB)."""
    top = max((abs(v) for v in values if v is not None), default=0.0)
    return next((u for u in UNITS if top >= u.factor), UNITS[-1])


def sized(
    frame: pl.DataFrame, unit: Unit, column: str = "value", name: str = "size"
) -> pl.DataFrame:
    """Bytes in ``unit``, rounded for the page (a tooltip shows three decimals)."""
    return frame.with_columns((pl.col(column) / unit.factor).round(4).alias(name))


def size_tip(unit: Unit, field: str = "size", title: str = "") -> alt.Tooltip:
    return alt.Tooltip(f"{field}:Q", title=title or unit.name, format=".3f")
