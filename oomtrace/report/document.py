"""The report document: everything a reader sees, built once, rendered by every format alike.

Values stay raw (integer bytes, token counts, shares from 0 to 1, UTC datetimes) with a
:data:`Kind` that says how to show them; renderers format them through
:mod:`oomtrace.report.fmt`, so the terminal, Markdown, JSON and HTML can never disagree on a
number. Charts carry the display data behind them and draw their Vega-Lite spec (with
:mod:`oomtrace.report.charts`) when a format first asks for it: only HTML and Markdown draw, so
JSON and the terminal never import Altair (a third of a second).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any, Final, Literal

import polars as pl

# 2: the gaps section splits assumptions from gaps; rows carry category. 3: the verdict leads
# with at most three lines (what, who, the fix) and the remedies; a cause section per class; the
# header names the engine version, model, node and GPU. 4: where culprits are named a "Why:"
# line stands between them and the fix (the fix is the verdict's last line).
REPORT_VERSION: Final = 4

ReportFormat = Literal["text", "markdown", "json", "html"]
FORMATS: Final[tuple[ReportFormat, ...]] = ("text", "markdown", "json", "html")
# The formats :func:`oomtrace.report.render` writes; text is the terminal's
# (:func:`oomtrace.terminal.render_report`).
DocumentFormat = Literal["markdown", "json", "html"]
DOCUMENT_FORMATS: Final[tuple[DocumentFormat, ...]] = ("markdown", "json", "html")

# How a value is shown: bytes with a binary unit, counts with separators, shares as percent,
# times as ISO 8601 UTC, text escaped for the output.
Kind = Literal["text", "id", "bytes", "tokens", "blocks", "count", "share", "time", "seconds"]
# Kinds shown as numbers: every format aligns their columns to the right.
NUMERIC_KINDS: Final[frozenset[Kind]] = frozenset(
    ("bytes", "tokens", "blocks", "count", "share", "seconds")
)

Value = int | float | str | datetime | None
Spec = dict[str, Any]  # a Vega-Lite spec, its data inlined as named datasets


@dataclass(frozen=True)
class Column:
    key: str
    title: str
    kind: Kind


@dataclass(frozen=True)
class Table:
    """Rows of raw values under typed columns. ``note`` says what the table leaves out.
    ``tags`` are fields every row carries in the JSON, where a script reads rows apart from the
    table that holds them (the other formats show them as the table's name)."""

    columns: tuple[Column, ...]
    rows: tuple[tuple[Value, ...], ...] = ()
    note: str = ""
    tags: tuple[tuple[str, str], ...] = ()

    def records(self) -> list[dict[str, Value]]:
        return [dict(zip((c.key for c in self.columns), row, strict=True)) for row in self.rows]


@dataclass(frozen=True)
class Figure:
    """One labelled number or fact (``peak``, ``coverage``, ...)."""

    key: str
    label: str
    value: Value
    kind: Kind


@dataclass(frozen=True)
class Chart:
    """A chart: the frame behind it, and ``draw``, which makes its Vega-Lite spec (data inlined)
    from it, importing the chart code then (see the module docstring).

    ``caption`` says how to read it and how it was reduced (points drawn out of samples read),
    so a reader knows the spike shown is the spike recorded.
    """

    key: str
    title: str
    caption: str
    draw: Callable[[], Spec] = field(repr=False, compare=False)
    data: pl.DataFrame

    @cached_property
    def spec(self) -> Spec:
        """The Vega-Lite spec, drawn once, when first read."""
        return self.draw()


@dataclass(frozen=True)
class Section:
    """A titled part of the report: prose, figures, tables and charts, in that order."""

    key: str
    title: str
    paragraphs: tuple[str, ...] = ()
    figures: tuple[Figure, ...] = ()
    tables: tuple[tuple[str, Table], ...] = ()
    charts: tuple[Chart, ...] = ()
    empty: str = ""  # shown instead when the section has nothing (says why)


@dataclass(frozen=True)
class Verdict:
    """The answer in one place. ``lines`` come first, at most three: what happened and when,
    who (the culprits by full id, or the cause that is not a request) and the fix (the
    analysis' first remedy); then ``remedies`` in full, the paragraph, figures, culprits and the
    evidence."""

    incident_class: str
    label: str
    headline: str
    paragraph: str
    figures: tuple[Figure, ...]
    culprits: Table
    evidence: tuple[str, ...] = ()
    lines: tuple[str, ...] = ()
    remedies: Table = field(default_factory=lambda: Table(()))


@dataclass(frozen=True)
class Report:
    """The whole report. ``sections`` follow the verdict in reading order; ``header`` names
    what the incident happened on (engine and the version it printed, model, node, GPU), each
    as a figure so every format shows the same words."""

    title: str
    subtitle: str
    verdict: Verdict
    sections: tuple[Section, ...]
    meta: dict[str, Any] = field(default_factory=dict)
    header: tuple[Figure, ...] = ()
    # What a reader must know before the verdict: inputs left out of the timeline because their
    # times could not be aligned or anchored (oomtrace.diagnostics.clock_warning), with the
    # remedy. Every format shows them first.
    alerts: tuple[str, ...] = ()

    def section(self, key: str) -> Section:
        for section in self.sections:
            if section.key == key:
                return section
        raise KeyError(key)

    @property
    def charts(self) -> tuple[Chart, ...]:
        return tuple(c for s in self.sections for c in s.charts)


def culprit_ids(verdict: Verdict) -> list[str]:
    """The request ids of the verdict's culprits (to be shown whole wherever they appear)."""
    keys = [c.key for c in verdict.culprits.columns]
    if "request_id" not in keys:
        return []
    at = keys.index("request_id")
    return [str(row[at]) for row in verdict.culprits.rows if row[at] is not None]


def id_pieces(text: str, ids: list[str]) -> list[tuple[str, bool]]:
    """``text`` cut into pieces, each flagged whether it is one of ``ids`` (the longest first
    where two overlap), so a renderer can show every id whole, as code, and escape the rest."""
    found = sorted((i for i in ids if i and i in text), key=len, reverse=True)
    if not found:
        return [(text, False)]
    pattern = re.compile("|".join(re.escape(i) for i in found))
    pieces: list[tuple[str, bool]] = []
    last = 0
    for match in pattern.finditer(text):
        pieces += [(text[last : match.start()], False), (match.group(0), True)]
        last = match.end()
    pieces.append((text[last:], False))
    return [p for p in pieces if p[0]]
