"""The JSON rendering: stable and versioned (``report_version``), sorted keys, ASCII only, times
as ISO 8601 UTC strings, bytes as integers. Chart data is included column by column (already
reduced for display), so the document alone can redraw every chart."""

from __future__ import annotations

import json
from typing import Any

import polars as pl

from oomtrace.isotime import iso_time_expr
from oomtrace.report.document import REPORT_VERSION, Chart, Report, Section, Table
from oomtrace.report.fmt import json_value


def render_json(report: Report) -> str:
    verdict = report.verdict
    doc = {
        "report_version": REPORT_VERSION,
        "title": report.title,
        "subtitle": report.subtitle,
        "meta": report.meta,
        "header": {f.key: json_value(f.value, f.kind) for f in report.header},
        "verdict": {
            "class": verdict.incident_class,
            "label": verdict.label,
            "headline": verdict.headline,
            "lines": list(verdict.lines),
            "remedies": _table(verdict.remedies)["rows"],
            "paragraph": verdict.paragraph,
            "figures": {f.key: json_value(f.value, f.kind) for f in verdict.figures},
            "culprits": _table(verdict.culprits)["rows"],
            "evidence": list(verdict.evidence),
        },
        "sections": [_section(s) for s in report.sections],
    }
    if report.alerts:
        doc["alerts"] = list(report.alerts)
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=True) + "\n"


def _section(section: Section) -> dict[str, Any]:
    out: dict[str, Any] = {
        "key": section.key,
        "title": section.title,
        "paragraphs": list(section.paragraphs),
        "figures": {f.key: json_value(f.value, f.kind) for f in section.figures},
        "tables": {name: _table(t) for name, t in section.tables},
        "charts": [_chart(c) for c in section.charts],
    }
    if not (section.tables or section.charts or section.figures):
        out["empty"] = section.empty
    return out


def _table(table: Table) -> dict[str, Any]:
    return {
        "columns": [{"key": c.key, "title": c.title, "kind": c.kind} for c in table.columns],
        "rows": [
            {
                **dict(table.tags),
                **{c.key: json_value(v, c.kind) for v, c in zip(row, table.columns, strict=True)},
            }
            for row in table.rows
        ],
        "note": table.note,
    }


def _chart(chart: Chart) -> dict[str, Any]:
    frame = chart.data
    columns: list[pl.Expr] = []
    for name, dtype in frame.schema.items():
        column = pl.col(name)
        if dtype.is_temporal():
            columns.append(iso_time_expr(column))
        elif dtype.is_float() and bool(frame.select((column == column.round(0)).all()).item()):
            columns.append(column.cast(pl.Int64))  # bytes and counts stay integers
        elif dtype.is_float():
            columns.append(column.round(6))
        else:
            columns.append(column)
    data = frame.select(columns).to_dict(as_series=False)
    return {
        "key": chart.key,
        "title": chart.title,
        "caption": chart.caption,
        "points": frame.height,
        "data": data,
    }
