"""One chart per incident class, drawn to show the cause at a glance:

* KV exhaustion: the pool's capacity as a rule, the KV in use split into the culprits' share and
  the rest, preemptions marked along the top;
* transient peak (and fragmentation): the headroom at the failure against the allocation that
  failed, with the requests of that step and the bytes the analysis estimates for each;
* foreign memory: device memory stacked per process, each named, under the device's total;
* leak: memory at idle moments and its trend, against the device's total;
* start-up misfit: weights, KV cache and reserve against the device, as configured and with the
  setting that fits.

Frames come from :mod:`oomtrace.report.cause_data`, values in bytes; charts draw them in the
largest binary unit they reach.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import altair as alt
import polars as pl

from oomtrace.report import palette
from oomtrace.report.cause_data import CULPRITS_PART, HEADROOM_ROW, REST_PART, leak_range
from oomtrace.report.charts import (
    MONOSPACE,
    Datasets,
    Unit,
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
from oomtrace.units import format_bytes


def _rule(
    data_sets: Datasets,
    name: str,
    value: int,
    text: str,
    unit: Unit,
    *,
    dash: bool = False,
    y: alt.Y | None = None,
) -> list[alt.Chart]:
    """A horizontal limit with its name and size written at its left end (two layers); ``y``:
    the chart's y encoding where it states its scale."""
    frame = pl.DataFrame({"label": [f"{text} {format_bytes(value)}"], "value": [value]})
    base = alt.Chart(data_sets.add(name, sized(frame, unit)))
    y = y or alt.Y("size:Q")
    rule = base.mark_rule(
        color=palette.LIMIT, strokeWidth=2, strokeDash=[6, 3] if dash else [1, 0]
    ).encode(y=y, tooltip=[alt.Tooltip("label:N", title="limit")])
    # at the left end, just above the line: the plot's top keeps room for it
    label = base.mark_text(align="left", baseline="bottom", dx=4, dy=-3, fontWeight="bold").encode(
        y=y, x=alt.value(0), text="label:N"
    )
    return [rule, label]


@dataclass(frozen=True)
class Stack:
    """What the areas of a stacked chart are: the ``field`` naming each, its legend ``title``,
    the ``names`` bottom first and their colours."""

    field: str
    title: str
    names: list[str]
    colours: dict[str, str]


def _stacked(
    data_sets: Datasets,
    name: str,
    data: pl.DataFrame,
    stack: Stack,
    unit: Unit,
    top: float,
    domain: tuple[int, int] | None,
    *,
    interpolate: Literal["linear", "step-after"],
) -> alt.Chart:
    """Areas stacked over time (``t``, ``size`` and ``stack.field``), the first name at the
    bottom, zooming on time, up to ``top`` (in ``unit``)."""
    order = {n: i for i, n in enumerate(stack.names)}
    rows = data.with_columns(order=pl.col(stack.field).replace_strict(order, return_dtype=pl.Int64))
    zoom = alt.selection_interval(name="zoom_cause", bind="scales", encodings=["x"])
    areas: alt.Chart = (
        alt.Chart(data_sets.add(name, rows))
        .mark_area(interpolate=interpolate, opacity=0.88, clip=True)
        .encode(
            x=time_x(domain=domain),
            y=alt.Y(
                "size:Q",
                title=unit.name,
                stack="zero",
                scale=alt.Scale(domain=[0, top], nice=False),
            ),
            color=alt.Color(
                f"{stack.field}:N",
                title=stack.title,
                sort=stack.names,
                scale=colour_scale(stack.names, stack.colours),
            ),
            order=alt.Order("order:Q"),
            tooltip=[
                alt.Tooltip(f"{stack.field}:N", title=stack.field),
                time_tip("t", "time (UTC)"),
                size_tip(unit),
            ],
        )
        .add_params(zoom)
    )
    return areas


def kv_pool_chart(
    use: pl.DataFrame,
    capacity: int,
    preemptions: pl.DataFrame,
    markers: pl.DataFrame,
    *,
    title: str,
    domain: tuple[int, int] | None,
) -> dict[str, Any]:
    """``use``: ``ts, part, value`` stacked (the culprits' KV first, then the rest in use);
    ``preemptions``: ``ts, count``; ``capacity``: the pool in bytes."""
    unit = unit_for(capacity)
    data = sized(epoch_ms(use.rename({"ts": "t"}), "t"), unit)
    parts = [CULPRITS_PART, REST_PART]
    colours = {CULPRITS_PART: palette.CULPRITS, REST_PART: palette.REST}
    top = unit.of(capacity) * 1.18
    data_sets = Datasets("cause")
    # straight lines between observations of the pool: the rise to the peak is drawn
    areas = _stacked(
        data_sets, "use", data, Stack("part", "KV in use", parts, colours), unit, top, domain,
        interpolate="linear",
    )  # fmt: skip
    layers: list[alt.Chart] = [
        areas,
        *_rule(data_sets, "capacity", capacity, "KV pool capacity", unit),
    ]
    if preemptions.height:
        marks = epoch_ms(preemptions.rename({"ts": "t"}), "t").with_columns(
            size=pl.lit(unit.of(capacity) * 1.12), what=pl.lit("preemption")
        )
        layers.append(
            alt.Chart(data_sets.add("preemptions", marks))
            .mark_point(shape="triangle-down", filled=True, size=70, clip=True)
            .encode(
                x=time_x(domain=domain),
                y="size:Q",
                shape=alt.Shape(
                    "what:N",
                    title="event",
                    scale=alt.Scale(domain=["preemption"], range=["triangle-down"]),
                    legend=alt.Legend(symbolFillColor=palette.DARK_GREY),
                ),
                color=alt.value(palette.DARK_GREY),
                tooltip=[
                    alt.Tooltip("what:N", title="event"),
                    time_tip("t", "time (UTC)"),
                    alt.Tooltip("detail:N", title="detail"),
                ],
            )
        )
    layers += time_overlays(markers, data_sets, domain)
    return finish(alt.layer(*layers), title, data_sets, height=300)


def allocation_chart(bars: pl.DataFrame, headroom: int | None, *, title: str) -> dict[str, Any]:
    """Horizontal bars (``row, part, value, order, note``): the allocation that failed, the
    headroom there was, the requests of the step; a rule at the headroom."""
    unit = unit_for(bars["value"].max() if bars.height else None)  # type: ignore[arg-type]
    data = sized(bars, unit)
    rows = list(dict.fromkeys(data["row"].to_list()))
    parts = list(dict.fromkeys(data["part"].to_list()))
    colours = {
        "allocation that failed": palette.FAILED,
        "free on the device": palette.HEADROOM,
        "reserved but unallocated (allocator slack)": palette.SLACK,
        "estimated for this request's step": palette.ESTIMATE,
    }
    data_sets = Datasets("cause")
    chart = (
        alt.Chart(data_sets.add("bars", data))
        .mark_bar(height={"band": 0.7})
        .encode(
            y=alt.Y(
                "row:N",
                title=None,
                sort=rows,
                axis=alt.Axis(labelFont=MONOSPACE, labelLimit=0, labelPadding=6),
            ),
            x=alt.X("size:Q", title=unit.name, stack="zero"),
            color=alt.Color("part:N", title=None, sort=parts, scale=colour_scale(parts, colours)),
            order=alt.Order("order:Q"),
            tooltip=[
                alt.Tooltip("row:N", title="what"),
                alt.Tooltip("part:N", title="part"),
                size_tip(unit),
                alt.Tooltip("note:N", title="basis"),
            ],
        )
    )
    layers: list[alt.Chart] = [chart]
    if headroom is not None:
        row_end = data.filter(pl.col("row") == HEADROOM_ROW)["size"].sum()
        frame = sized(
            pl.DataFrame({"label": [f"headroom {format_bytes(headroom)}"], "value": [headroom]}),
            unit,
        ).with_columns(end=pl.lit(float(row_end)), row=pl.lit(HEADROOM_ROW))
        base = alt.Chart(data_sets.add("headroom", frame))
        layers += [
            base.mark_rule(color=palette.LIMIT, strokeWidth=2, strokeDash=[6, 3]).encode(
                x="size:Q", tooltip=[alt.Tooltip("label:N", title="limit")]
            ),
            # the label sits in the headroom's own row, after its bar: it covers nothing
            base.mark_text(align="left", baseline="middle", dx=6, fontWeight="bold").encode(
                x="end:Q", y=alt.Y("row:N", sort=rows), text="label:N"
            ),
        ]
    height = max(90, 30 * len(rows))
    return finish(alt.layer(*layers), title, data_sets, height=height)


def process_chart(
    frame: pl.DataFrame,
    total: int | None,
    markers: pl.DataFrame,
    *,
    title: str,
    domain: tuple[int, int] | None,
) -> dict[str, Any]:
    """Device memory per process, stacked (``ts, process, value``; the engine first), under
    the device's total."""
    stacked = frame.group_by("ts").agg(pl.col("value").sum())["value"].max()
    highest = max(stacked if isinstance(stacked, float) else 0.0, float(total or 0))
    unit = unit_for(highest)
    top = unit.of(highest) * 1.12 if highest > 0 else 1.0
    data = sized(epoch_ms(frame.rename({"ts": "t"}), "t"), unit)
    names = list(dict.fromkeys(data["process"].to_list()))
    colours = {names[0]: palette.BLUE} if names else {}
    data_sets = Datasets("cause")
    areas = _stacked(
        data_sets, "processes", data, Stack("process", "process", names, colours), unit, top,
        domain, interpolate="step-after",
    )  # fmt: skip
    layers: list[alt.Chart] = [areas]
    if total is not None:
        layers += _rule(data_sets, "total", total, "device total", unit)
    layers += time_overlays(markers, data_sets, domain)
    return finish(alt.layer(*layers), title, data_sets, height=300)


def leak_chart(
    level: pl.DataFrame,
    idle: pl.DataFrame,
    trend: pl.DataFrame,
    limit: int | None,
    markers: pl.DataFrame,
    *,
    title: str,
    domain: tuple[int, int] | None,
) -> dict[str, Any]:
    """The memory level (``ts, value``), its values at idle moments (``ts, value``) and their
    trend (``ts, value``, two points), against ``limit`` (the device's total)."""
    data_sets = Datasets("cause")
    zoom = alt.selection_interval(name="zoom_cause", bind="scales", encodings=["x"])
    unit = unit_for(level["value"].max() if level.height else None, limit)  # type: ignore[arg-type]
    frames = {
        "memory in use": (level, palette.SKY),
        "at idle moments": (idle, palette.BLUE),
        "trend at idle": (trend, palette.VERMILLION),
    }
    names = [n for n, (f, _) in frames.items() if f.height]
    colour = alt.Color(
        "what:N",
        title=None,
        sort=names,
        scale=alt.Scale(domain=names, range=[frames[n][1] for n in names]),
    )
    # from a little below the idle levels to the device: the rise and the headroom fill it
    low, high = leak_range(level, idle, trend, limit)
    y = alt.Y(
        "size:Q",
        title=unit.name,
        scale=alt.Scale(domain=[unit.of(low), unit.of(high)], nice=False, zero=False),
    )
    layers: list[alt.Chart] = []
    for name in names:
        frame, _ = frames[name]
        data = sized(epoch_ms(frame.rename({"ts": "t"}), "t"), unit).with_columns(what=pl.lit(name))
        base = alt.Chart(data_sets.add(name.replace(" ", "_"), data))
        if name == "at idle moments":
            mark = base.mark_point(filled=True, size=30, clip=True)
        elif name == "trend at idle":
            mark = base.mark_line(strokeDash=[6, 3], strokeWidth=2.5, clip=True)
        else:
            mark = base.mark_line(interpolate="step-after", strokeWidth=1.5, clip=True)
        layers.append(
            mark.encode(
                x=time_x(domain=domain),
                y=y,
                color=colour,
                tooltip=[
                    alt.Tooltip("what:N", title="series"),
                    time_tip("t", "time (UTC)"),
                    size_tip(unit),
                ],
            )
        )
    layers[0] = layers[0].add_params(zoom)
    if limit is not None:
        layers += _rule(data_sets, "limit", limit, "device total", unit, y=y)
    layers += time_overlays(markers, data_sets, domain)
    return finish(alt.layer(*layers), title, data_sets, height=300)


def fit_chart(
    bars: pl.DataFrame,
    limits: pl.DataFrame,
    *,
    title: str,
    colours: dict[str, str] = palette.PARTS,
) -> dict[str, Any]:
    """Stacked bars ``bar, part, value, order`` (as configured; with the setting that fits)
    against vertical limits ``label, value, dashed`` (the device, the engine's budget); parts
    in ``colours`` where it names them."""
    stacked = bars.group_by("bar").agg(pl.col("value").sum())["value"].max()
    unit = unit_for(stacked if isinstance(stacked, float) else None)
    data = sized(bars, unit)
    rows = list(dict.fromkeys(data["bar"].to_list()))
    parts = list(dict.fromkeys(data["part"].to_list()))
    data_sets = Datasets("cause")
    chart = (
        alt.Chart(data_sets.add("bars", data))
        .mark_bar(height={"band": 0.6})
        .encode(
            y=alt.Y("bar:N", title=None, sort=rows, axis=alt.Axis(labelLimit=0, labelPadding=6)),
            x=alt.X("size:Q", title=unit.name, stack="zero"),
            color=alt.Color("part:N", title=None, sort=parts, scale=colour_scale(parts, colours)),
            order=alt.Order("order:Q"),
            tooltip=[
                alt.Tooltip("bar:N", title="bar"),
                alt.Tooltip("part:N", title="part"),
                size_tip(unit),
            ],
        )
    )
    layers: list[alt.Chart] = [chart]
    if limits.height:
        # limits are named in a legend (solid: the device; dashed: the engine's share), where
        # two close limits can never write over each other or over a bar
        frame = sized(limits, unit)
        layers.append(
            alt.Chart(data_sets.add("limits", frame))
            .mark_rule(color=palette.LIMIT, strokeWidth=2.5)
            .encode(
                x="size:Q",
                strokeDash=alt.StrokeDash(
                    "label:N",
                    title="limit",
                    sort=frame["label"].to_list(),
                    scale=alt.Scale(
                        domain=frame["label"].to_list(),
                        range=[[6, 3] if d else [1, 0] for d in frame["dashed"].to_list()],
                    ),
                    legend=alt.Legend(symbolStrokeColor=palette.LIMIT, symbolType="stroke"),
                ),
                tooltip=[alt.Tooltip("label:N", title="limit"), size_tip(unit)],
            )
        )
    height = max(90, 44 * len(rows))
    return finish(alt.layer(*layers), title, data_sets, height=height)
