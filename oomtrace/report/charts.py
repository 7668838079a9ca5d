"""Altair chart builders: plain Polars frames in, Vega-Lite specs (dicts, data inlined) out.

Every time axis is UTC (the report's clock), every chart zooms and pans on time (drag, wheel;
double-click resets), and every mark has a tooltip with the request ids and numbers behind it.
Bytes are drawn in GiB (2**30) and labelled so. Callers pass data already reduced for display
(:mod:`oomtrace.report.downsample`); nothing here aggregates.
"""

from __future__ import annotations

from typing import Any, Final

import altair as alt
import polars as pl

from oomtrace.units import GiB

WIDTH: Final = 860
TIME_FORMAT: Final = "%Y-%m-%d %H:%M:%S.%L"
# Every tick label stands alone (Vega's default multi-format prints ".500" for a half second,
# which reads as nothing once neighbouring labels are thinned out): the time of day, the
# milliseconds when there are any, and the date at midnight.
TIME_LABEL: Final = (
    "(datum.value % 86400000 == 0 ? utcFormat(datum.value, '%Y-%m-%d ') : '')"
    " + utcFormat(datum.value, '%H:%M:%S')"
    " + (datum.value % 1000 ? utcFormat(datum.value, '.%L') : '')"
)

# Fixed colours per series so that the same quantity looks the same in every report.
SERIES_COLOURS: Final[dict[str, str]] = {
    "device total": "#7f7f7f",
    "device used (NVML)": "#111111",
    "device used peak": "#8c564b",
    "allocator reserved": "#1f77b4",
    "allocator allocated": "#9ecae1",
    "allocator reserved peak": "#6baed6",
    "allocator allocated peak": "#c6dbef",
    "KV observed": "#2ca02c",
    "KV modelled": "#98df8a",
    "weights": "#9467bd",
    "requests running": "#1f77b4",
    "requests waiting": "#ff7f0e",
    "requests preempted": "#d62728",
}
MARKER_COLOURS: Final[dict[str, str]] = {
    "oom": "#d62728",
    "peak": "#ff7f0e",
    "engine_dead": "#000000",
    "preemption": "#e377c2",
    "startup_kv_insufficient": "#d62728",
    "startup_no_kv_memory": "#d62728",
    "xid": "#8c564b",
}


def epoch_ms(frame: pl.DataFrame, *columns: str) -> pl.DataFrame:
    """Datetime columns as integer milliseconds since the epoch: compact in the page, and
    Vega-Lite reads numbers on a temporal axis as exactly that."""
    return frame.with_columns(pl.col(c).dt.epoch("ms") for c in columns)


class _Datasets:
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


def _time_x(field: str = "t", title: str = "time (UTC)") -> alt.X:
    return alt.X(
        f"{field}:T",
        title=title,
        scale=alt.Scale(type="utc"),
        axis=alt.Axis(labelExpr=TIME_LABEL, labelOverlap=True),
    )


def _time_tip(field: str, title: str) -> alt.Tooltip:
    return alt.Tooltip(f"{field}:T", title=title, format=TIME_FORMAT, formatType="utc")


def _colour_scale(names: list[str], colours: dict[str, str]) -> alt.Scale:
    known = [n for n in names if n in colours]
    other = sorted(n for n in names if n not in colours)
    palette = ["#17becf", "#bcbd22", "#e377c2", "#8c564b", "#ff9896", "#c5b0d5", "#7f7f7f"]
    domain = known + other
    colour_range = [colours[n] for n in known] + [
        palette[i % len(palette)] for i in range(len(other))
    ]
    return alt.Scale(domain=domain, range=colour_range)


def _markers_layer(markers: pl.DataFrame, data_sets: _Datasets) -> alt.Chart:
    """Vertical rules for OOMs, the spike and other point events; ``markers`` has
    ``ts, kind, label, detail``."""
    data = epoch_ms(markers.rename({"ts": "t"}), "t")
    kinds = sorted(set(data["kind"].to_list()))
    layer: alt.Chart = (
        alt.Chart(data_sets.add("markers", data))
        .mark_rule(strokeWidth=2, strokeDash=[6, 3])
        .encode(
            x=alt.X("t:T"),
            # stroke, not color: markers get their own legend beside the series legend
            stroke=alt.Stroke("kind:N", title="marker", scale=_colour_scale(kinds, MARKER_COLOURS)),
            tooltip=[
                alt.Tooltip("label:N", title="marker"),
                _time_tip("t", "time (UTC)"),
                alt.Tooltip("detail:N", title="detail"),
            ],
        )
    )
    return layer


def _finish(chart: alt.TopLevelMixin, title: str, data_sets: _Datasets) -> dict[str, Any]:
    spec: dict[str, Any] = chart.properties(title=title).to_dict()
    spec["datasets"] = {**spec.get("datasets", {}), **data_sets.values}
    return spec


def memory_chart(
    series: pl.DataFrame, markers: pl.DataFrame, levels: pl.DataFrame, *, title: str
) -> dict[str, Any]:
    """Memory over time. ``series``: ``ts, series, value`` (bytes); ``levels``: constant lines
    ``series, value`` (weights); ``markers``: ``ts, kind, label, detail``."""
    data = epoch_ms(series.rename({"ts": "t"}), "t").with_columns(
        (pl.col("value") / GiB).round(4).alias("gib")
    )
    names = sorted(set(data["series"].to_list()) | set(levels["series"].to_list()))
    colour = alt.Color("series:N", title="series", scale=_colour_scale(names, SERIES_COLOURS))
    zoom = alt.selection_interval(name="zoom_memory", bind="scales", encodings=["x"])
    data_sets = _Datasets("memory")
    lines = (
        alt.Chart(data_sets.add("series", data))
        .mark_line(interpolate="step-after", strokeWidth=1.5, point=False)
        .encode(
            x=_time_x(),
            y=alt.Y("gib:Q", title="GiB"),
            color=colour,
            tooltip=[
                alt.Tooltip("series:N", title="series"),
                _time_tip("t", "time (UTC)"),
                alt.Tooltip("gib:Q", title="GiB", format=".3f"),
            ],
        )
        .add_params(zoom)
    )
    layers: list[alt.Chart] = [lines]
    if levels.height:
        level_data = levels.with_columns((pl.col("value") / GiB).round(4).alias("gib"))
        layers.append(
            alt.Chart(data_sets.add("levels", level_data))
            .mark_rule(strokeDash=[2, 2], strokeWidth=1.5)
            .encode(
                y="gib:Q",
                color=colour,
                tooltip=[
                    alt.Tooltip("series:N", title="level"),
                    alt.Tooltip("gib:Q", title="GiB", format=".3f"),
                ],
            )
        )
    if markers.height:
        layers.append(_markers_layer(markers, data_sets))
    chart = alt.layer(*layers).properties(width=WIDTH, height=320)
    return _finish(chart, title, data_sets)


def activity_chart(
    counts: pl.DataFrame,
    admissions: pl.DataFrame,
    markers: pl.DataFrame,
    *,
    title: str,
    bars: str = "admitted",
) -> dict[str, Any]:
    """Requests running, waiting and preempted (``ts, series, value``) over admissions per
    interval (``ts, end, admissions``), with the same markers as the memory chart. ``bars``
    names what the bars count (``admitted``, or ``arrived`` where no admission is stated)."""
    zoom = alt.selection_interval(name="zoom_activity", bind="scales", encodings=["x"])
    data_sets = _Datasets("activity")
    layers: list[alt.Chart] = []
    if admissions.height:
        adm = epoch_ms(admissions.rename({"ts": "t", "end": "t2"}), "t", "t2")
        layers.append(
            alt.Chart(data_sets.add("admissions", adm))
            .mark_rect(opacity=0.35, color="#7f7f7f")
            .encode(
                x=_time_x(),
                x2="t2:T",
                y=alt.Y("admissions:Q", title=f"{bars} per slice", axis=alt.Axis(orient="right")),
                tooltip=[
                    _time_tip("t", "from (UTC)"),
                    _time_tip("t2", "to (UTC)"),
                    alt.Tooltip("admissions:Q", title=bars, format=",d"),
                ],
            )
        )
    if counts.height:
        data = epoch_ms(counts.rename({"ts": "t"}), "t")
        names = sorted(set(data["series"].to_list()))
        layers.append(
            alt.Chart(data_sets.add("series", data))
            .mark_line(interpolate="step-after", strokeWidth=1.5)
            .encode(
                x=_time_x(),
                y=alt.Y("value:Q", title="requests"),
                color=alt.Color(
                    "series:N", title="series", scale=_colour_scale(names, SERIES_COLOURS)
                ),
                tooltip=[
                    alt.Tooltip("series:N", title="series"),
                    _time_tip("t", "time (UTC)"),
                    alt.Tooltip("value:Q", title="requests", format=",d"),
                ],
            )
        )
    layers[0] = layers[0].add_params(zoom)
    if markers.height:
        layers.append(_markers_layer(markers, data_sets))
    # admissions per slice and requests resident differ by orders of magnitude: two y axes
    chart = alt.layer(*layers).resolve_scale(y="independent").properties(width=WIDTH, height=220)
    return _finish(chart, title, data_sets)


def swimlane_chart(lanes: pl.DataFrame, markers: pl.DataFrame, *, title: str) -> dict[str, Any]:
    """One lane per request: ``request_id, start, end, state, stored_tokens, kv_bytes,
    culprit_rank`` (null when not a culprit). Colour is stored tokens; culprits are outlined
    and flagged with their rank."""
    data = epoch_ms(lanes.rename({"start": "t", "end": "t2"}), "t", "t2").with_columns(
        (pl.col("kv_bytes") / GiB).round(4).alias("kv_gib"),
        pl.when(pl.col("culprit_rank").is_not_null())
        .then(pl.format("culprit #{}", pl.col("culprit_rank")))
        .otherwise(pl.lit(""))
        .alias("culprit"),
    )
    order = data.group_by("request_id").agg(pl.col("t").min()).sort(["t", "request_id"])
    y = alt.Y("request_id:N", title=None, sort=order["request_id"].to_list())
    zoom = alt.selection_interval(name="zoom_lanes", bind="scales", encodings=["x"])
    data_sets = _Datasets("lanes")
    tooltip = [
        alt.Tooltip("request_id:N", title="request"),
        alt.Tooltip("state:N", title="state"),
        _time_tip("t", "from (UTC)"),
        _time_tip("t2", "to (UTC)"),
        alt.Tooltip("stored_tokens:Q", title="stored tokens", format=",d"),
        alt.Tooltip("kv_gib:Q", title="KV GiB", format=".3f"),
        alt.Tooltip("culprit:N", title="culprit"),
    ]
    bars = (
        alt.Chart(data_sets.add("intervals", data))
        .mark_bar(height={"band": 0.8})
        .encode(
            x=_time_x(),
            x2="t2:T",
            y=y,
            color=alt.Color(
                "stored_tokens:Q", title="stored tokens", scale=alt.Scale(scheme="viridis")
            ),
            stroke=alt.condition("datum.culprit != ''", alt.value("#d62728"), alt.value(None)),
            strokeWidth=alt.condition("datum.culprit != ''", alt.value(2.5), alt.value(0)),
            tooltip=tooltip,
        )
        .add_params(zoom)
    )
    flagged = (
        data.filter(pl.col("culprit") != "")
        .group_by("request_id")
        .agg(pl.col("t").min(), pl.col("culprit").first())
    )
    layers: list[alt.Chart] = [bars]
    if flagged.height:
        layers.append(
            alt.Chart(data_sets.add("culprits", flagged.sort("request_id")))
            .mark_text(align="left", dx=4, color="#ffffff", fontWeight="bold")
            .encode(x="t:T", y=y, text="culprit:N")
        )
    if markers.height:
        layers.append(_markers_layer(markers, data_sets))
    lanes_count = data["request_id"].n_unique()
    height = max(80, 16 * lanes_count)
    chart = alt.layer(*layers).properties(width=WIDTH, height=height)
    return _finish(chart, title, data_sets)


def budget_chart(parts: pl.DataFrame, *, title: str) -> dict[str, Any]:
    """Planned against observed as stacked bars: ``bar, part, bytes, order``."""
    data = parts.with_columns((pl.col("bytes") / GiB).round(4).alias("gib"))
    data_sets = _Datasets("budget")
    chart = (
        alt.Chart(data_sets.add("parts", data))
        .mark_bar()
        .encode(
            y=alt.Y("bar:N", title=None, sort=None),
            x=alt.X("gib:Q", title="GiB", stack="zero"),
            color=alt.Color("part:N", title="part", sort=None),
            order=alt.Order("order:Q"),
            tooltip=[
                alt.Tooltip("bar:N", title="bar"),
                alt.Tooltip("part:N", title="part"),
                alt.Tooltip("gib:Q", title="GiB", format=".3f"),
            ],
        )
        .properties(width=WIDTH, height=90)
    )
    return _finish(chart, title, data_sets)
