"""The charts every report has: memory and requests over the incident's span, the requests of
the incident window as swimlanes, and the plan against what was observed.

Plain Polars frames in, Vega-Lite specs out (:mod:`oomtrace.report.charts` holds what they
share). A constant line (the model weights) never sets a chart's height: the y axis is fitted to
the measured series, and a level above them is left out (the caption says so).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import altair as alt
import polars as pl

from oomtrace.report import palette
from oomtrace.report.chart_data import y_top
from oomtrace.report.charts import (
    MONOSPACE,
    Datasets,
    colour_scale,
    epoch_ms,
    finish,
    size_tip,
    sized,
    time_overlays,
    time_tip,
    time_x,
    unit_for,
)

LANE_HEIGHT: Final = 20


def memory_chart(
    series: pl.DataFrame,
    markers: pl.DataFrame,
    levels: pl.DataFrame,
    *,
    title: str,
    domain: tuple[int, int] | None,
) -> dict[str, Any]:
    """Memory over time. ``series``: ``ts, series, value`` (bytes); ``levels``: constant lines
    ``series, value`` drawn only where they fall inside the series' range; ``markers``:
    ``ts, kind, label, detail``; ``domain``: the time span in epoch milliseconds."""
    top = y_top(series["value"])
    unit = unit_for(top)
    data = sized(epoch_ms(series.rename({"ts": "t"}), "t"), unit)
    shown_levels = sized(levels.filter(pl.col("value") <= top), unit)
    y = alt.Y("size:Q", title=unit.name, scale=alt.Scale(domain=[0, unit.of(top)], nice=False))
    zoom = alt.selection_interval(name="zoom_memory", bind="scales", encodings=["x"])
    data_sets = Datasets("memory")
    tooltip = [
        alt.Tooltip("series:N", title="series"),
        time_tip("t", "time (UTC)"),
        size_tip(unit),
    ]
    # limits and models dashed, measurements solid, constant levels dotted: the dash is encoded
    # with the colour, so each legend shows a line as it is drawn
    layers: list[alt.Chart] = []
    if data.height:
        colour, dash = _line_style(data["series"], "series", lambda n: n in palette.DASHED)
        layers.append(
            alt.Chart(data_sets.add("series", data))
            .mark_line(interpolate="step-after", strokeWidth=2, clip=True)
            .encode(x=time_x(domain=domain), y=y, color=colour, strokeDash=dash, tooltip=tooltip)
            .add_params(zoom)
        )
    if shown_levels.height:
        colour, dash = _line_style(shown_levels["series"], "level", lambda n: True, (2, 2))
        layers.append(
            alt.Chart(data_sets.add("levels", shown_levels))
            .mark_rule(strokeWidth=1.5, clip=True)
            .encode(
                y=y,
                color=colour,
                strokeDash=dash,
                tooltip=[alt.Tooltip("series:N", title="level"), size_tip(unit)],
            )
        )
    layers += time_overlays(markers, data_sets, domain)
    # series, levels and markers: each layer its own scales, so its own legend
    chart = alt.layer(*layers).resolve_scale(
        color="independent", stroke="independent", strokeDash="independent"
    )
    return finish(chart, title, data_sets, height=300)


def _line_style(
    names: pl.Series,
    title: str,
    dashed: Callable[[str], bool],
    pattern: tuple[int, int] = (6, 3),
) -> tuple[alt.Color, alt.StrokeDash]:
    """Colour and dash by ``series`` for the lines of ``names``: those ``dashed`` selects drawn
    with ``pattern``, the others solid; one legend titled ``title`` shows both."""
    scale = colour_scale(list(dict.fromkeys(names.to_list())), palette.SERIES)
    order = list(scale.domain)
    colour = alt.Color("series:N", title=title, scale=scale, sort=order)
    dash = alt.StrokeDash(
        "series:N",
        title=title,
        sort=order,
        scale=alt.Scale(
            domain=order, range=[list(pattern) if dashed(n) else [1, 0] for n in order]
        ),
    )
    return colour, dash


def activity_chart(
    counts: pl.DataFrame,
    admissions: pl.DataFrame,
    markers: pl.DataFrame,
    *,
    title: str,
    bars: str = "admitted",
    domain: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """Requests running, waiting and preempted (``ts, series, value``) over admissions per
    interval (``ts, end, admissions``), with the same markers as the memory chart. ``bars``
    names what the bars count (``admitted``, or ``arrived`` where no admission is stated)."""
    zoom = alt.selection_interval(name="zoom_activity", bind="scales", encodings=["x"])
    data_sets = Datasets("activity")
    layers: list[alt.Chart] = []
    if admissions.height:
        adm = epoch_ms(admissions.rename({"ts": "t", "end": "t2"}), "t", "t2")
        layers.append(
            alt.Chart(data_sets.add("admissions", adm))
            .mark_rect(opacity=0.3, color=palette.GREY, clip=True)
            .encode(
                x=time_x(domain=domain),
                x2="t2:T",
                y=alt.Y(
                    "admissions:Q",
                    title=f"{bars} per slice",
                    # one grid, the left axis's: two grids at different steps read as clutter
                    axis=alt.Axis(orient="right", grid=False),
                ),
                tooltip=[
                    time_tip("t", "from (UTC)"),
                    time_tip("t2", "to (UTC)"),
                    alt.Tooltip("admissions:Q", title=bars, format=",d"),
                ],
            )
        )
    if counts.height:
        data = epoch_ms(counts.rename({"ts": "t"}), "t")
        names = list(dict.fromkeys(data["series"].to_list()))
        layers.append(
            alt.Chart(data_sets.add("series", data))
            .mark_line(interpolate="step-after", strokeWidth=2, clip=True)
            .encode(
                x=time_x(domain=domain),
                y=alt.Y("value:Q", title="requests"),
                color=alt.Color(
                    "series:N",
                    title="series",
                    scale=colour_scale(names, palette.SERIES),
                    sort=names,
                ),
                tooltip=[
                    alt.Tooltip("series:N", title="series"),
                    time_tip("t", "time (UTC)"),
                    alt.Tooltip("value:Q", title="requests", format=",d"),
                ],
            )
        )
    layers[0] = layers[0].add_params(zoom)
    layers += time_overlays(markers, data_sets, domain)
    # admissions per slice and requests resident differ by orders of magnitude: two y axes
    chart = alt.layer(*layers).resolve_scale(y="independent")
    return finish(chart, title, data_sets, height=200)


def lane_label(request_id: pl.Expr, rank: pl.Expr) -> pl.Expr:
    """:func:`oomtrace.report.fmt.lane_text` as an expression."""
    return (
        pl.when(rank.is_not_null())
        .then(pl.format("#{} {}", rank, request_id))
        .otherwise(request_id)
    )


def swimlane_chart(
    lanes: pl.DataFrame, markers: pl.DataFrame, *, title: str, domain: tuple[int, int] | None
) -> dict[str, Any]:
    """One lane per request: ``request_id, start, end, state, stored_tokens, kv_bytes,
    culprit_rank`` (null when not a culprit). Culprits come first, in rank order, labelled
    ``#rank id`` and outlined; the other lanes follow in order of arrival. Labels are whole
    ids in a monospace font, never cut."""
    unit = unit_for(lanes["kv_bytes"].max() if lanes.height else None)  # type: ignore[arg-type]
    data = sized(
        epoch_ms(lanes.rename({"start": "t", "end": "t2"}), "t", "t2"), unit, "kv_bytes", "kv"
    )
    data = data.with_columns(
        lane_label(pl.col("request_id"), pl.col("culprit_rank")).alias("lane"),
        pl.when(pl.col("culprit_rank").is_not_null())
        .then(pl.format("#{}", pl.col("culprit_rank")))
        .otherwise(pl.lit(""))
        .alias("culprit"),
    )
    order = (
        data.group_by("lane")
        .agg(pl.col("culprit_rank").min(), pl.col("t").min())
        .sort(["culprit_rank", "t", "lane"], nulls_last=True)
    )["lane"].to_list()
    y = alt.Y(
        "lane:N",
        title=None,
        sort=order,
        axis=alt.Axis(labelFont=MONOSPACE, labelFontSize=11, labelLimit=0, labelPadding=6),
    )
    zoom = alt.selection_interval(name="zoom_lanes", bind="scales", encodings=["x"])
    data_sets = Datasets("lanes")
    tooltip = [
        alt.Tooltip("request_id:N", title="request"),
        alt.Tooltip("culprit:N", title="culprit"),
        alt.Tooltip("state:N", title="state"),
        time_tip("t", "from (UTC)"),
        time_tip("t2", "to (UTC)"),
        alt.Tooltip("stored_tokens:Q", title="stored tokens", format=",d"),
        size_tip(unit, "kv", f"KV {unit.name}"),
    ]
    bars = (
        alt.Chart(data_sets.add("intervals", data))
        .mark_bar(height={"band": 0.75}, clip=True)
        .encode(
            x=time_x(domain=domain),
            x2="t2:T",
            y=y,
            color=alt.Color(
                "stored_tokens:Q",
                title="stored tokens",
                scale=alt.Scale(scheme="viridis"),
                legend=alt.Legend(orient="bottom", direction="horizontal", gradientLength=240),
            ),
            stroke=alt.condition(
                "datum.culprit != ''", alt.value(palette.CULPRITS), alt.value(None)
            ),
            strokeWidth=alt.condition("datum.culprit != ''", alt.value(2.5), alt.value(0)),
            tooltip=tooltip,
        )
        .add_params(zoom)
    )
    layers: list[alt.Chart] = [bars]
    # an interval too short to see as a bar (a request resident only at the peak) is a tick,
    # so no lane is drawn empty
    if domain is not None:
        width = domain[1] - domain[0]
    else:
        width = int(data.select(pl.col("t2").max() - pl.col("t").min()).item() or 0)
    short = data.filter(pl.col("t2") - pl.col("t") <= max(1, width // 400))
    if short.height:
        layers.append(
            alt.Chart(data_sets.add("instants", short))
            .mark_tick(thickness=3, size=LANE_HEIGHT * 0.75, clip=True)
            .encode(
                x=time_x(domain=domain),
                y=y,
                color=alt.Color("stored_tokens:Q", scale=alt.Scale(scheme="viridis"), legend=None),
                tooltip=tooltip,
            )
        )
    layers += time_overlays(markers, data_sets, domain)
    height = max(80, LANE_HEIGHT * len(order))
    return finish(alt.layer(*layers), title, data_sets, height=height)


def budget_chart(parts: pl.DataFrame, *, title: str) -> dict[str, Any]:
    """Planned against observed as stacked bars: ``bar, part, bytes, order``."""
    unit = unit_for(parts["bytes"].max() if parts.height else None)  # type: ignore[arg-type]
    data = sized(parts, unit, "bytes")
    names = list(dict.fromkeys(data["part"].to_list()))
    data_sets = Datasets("budget")
    chart = (
        alt.Chart(data_sets.add("parts", data))
        .mark_bar()
        .encode(
            y=alt.Y("bar:N", title=None, sort=None),
            x=alt.X("size:Q", title=unit.name, stack="zero"),
            color=alt.Color(
                "part:N", title="part", sort=names, scale=colour_scale(names, palette.PARTS)
            ),
            order=alt.Order("order:Q"),
            tooltip=[
                alt.Tooltip("bar:N", title="bar"),
                alt.Tooltip("part:N", title="part"),
                size_tip(unit),
            ],
        )
    )
    return finish(chart, title, data_sets, height=90)
