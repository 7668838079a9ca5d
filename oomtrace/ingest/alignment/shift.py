"""Moving one input's rows by the years and zone offset alignment chose, and saying so.

The parser placed the input's printed times under its assumptions (UTC, the year of the file's
modification time); the chosen candidate moves every row by whole calendar years (in the zone
the times were read in, so a local date keeps its day) and back by the UTC offset the printed
times had. The clock record and the notes of the input follow: the year and zone it states
become the aligned ones, and the parser's note of a guess the alignment settled (the one naming
``--year`` or ``--tz`` as its remedy) is withdrawn.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from oomtrace.diagnostics import YEAR_REMEDY, ZONE_REMEDY, SourceDiagnostics
from oomtrace.ingest.alignment.inference import Candidate, offset_text
from oomtrace.ingest.parser_api import ParseResult
from oomtrace.ingest.text.yearless_clock import new_year_note
from oomtrace.schema import TABLES


def shift_expr(ts: pl.Expr, candidate: Candidate, tz: str) -> pl.Expr:
    """``ts`` moved by ``candidate``; ``tz`` is the zone the input's times were read in."""
    out = ts
    if candidate.years:
        years = f"{candidate.years}y"
        if tz == "UTC":
            out = out.dt.offset_by(years)
        else:
            out = out.dt.convert_time_zone(tz).dt.offset_by(years).dt.convert_time_zone("UTC")
    if candidate.offset_min:
        out = out - pl.duration(minutes=candidate.offset_min)
    return out


def shift_result(result: ParseResult, candidate: Candidate, tz: str) -> None:
    """Every row of ``result`` moved by ``candidate`` (in place)."""
    if candidate == Candidate():
        return
    for table in TABLES:
        frame: pl.DataFrame | None = getattr(result, table)
        if frame is not None and frame.height:
            moved = shift_expr(pl.col("ts"), candidate, tz).cast(frame.schema["ts"])
            setattr(result, table, frame.with_columns(ts=moved))


def record_alignment(
    clock: dict[str, Any],
    diag: SourceDiagnostics,
    candidate: Candidate,
    *,
    year_free: bool,
    zone_free: bool,
    relative: bool,
) -> None:
    """The clock record after alignment: the year and offset chosen, and the parser's notes of
    the guesses withdrawn. ``relative``: the reference's own zone is an assumption, so the
    offset is relative to it and the zone stays assumed."""
    if year_free:
        crossing = [
            n for n in diag.notes if n == new_year_note(clock.get("year"), clock.get("year_last"))
        ]
        for key in ("year", "year_last"):
            if isinstance(clock.get(key), int):
                clock[key] += candidate.years
        clock["year_source"] = "aligned"
        diag.drop_notes(YEAR_REMEDY)
        for note in crossing:
            diag.drop_notes(note)
            diag.note(new_year_note(clock.get("year"), clock.get("year_last")))
    if zone_free:
        clock["utc_offset"] = offset_text(candidate.offset_min)
        clock["tz"] = f"UTC{offset_text(candidate.offset_min)}"
        clock["tz_source"] = "aligned"
        # Relative to a reference read as UTC by assumption, the zone is still an assumption.
        clock["tz_assumed"] = relative
        if not relative:
            diag.drop_notes(ZONE_REMEDY)
