"""Placing the rows of a log that prints no time (llama.cpp by default, a script's stdout) at the
moments other inputs saw, or keeping them un-timed.

Such a log still tells the order of what happened. Its parser leaves ``ts`` null and numbers
the rows in file order (an ``order`` column, the line). A failure (an OOM, a death, a start-up
refusal; lines within :data:`SAME_FAILURE_LINES` of each other are one failure) is anchored to
a moment of the timed inputs that saw it: their own OOMs where they have any, else the releases
of device memory that follow a failure; an engine start likewise to an acquire. The anchors are
taken in order and only when they are unambiguous: the log's failures and the reference's
moments must be as many (three OOMs in the log and three memory drops in nvidia-smi are the same
three, in order; one OOM and three drops are not known apart). A row is placed at the moment
its failure's anchor last saw the memory still held (a release's sample before the drop), and
the report says which moment it was; every other row keeps a null ``ts`` and the clock
``untimed``, in file order after the timed rows. Nothing is placed at the file's modification
time, which for a file copied or checked out is no time of the incident.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any, Final

import polars as pl

from oomtrace.ingest.alignment.moments import EVENT_POINTS, Moments
from oomtrace.ingest.parser_api import ParseResult
from oomtrace.isotime import iso_time
from oomtrace.schema import CLOCK, TABLES, TS

ORDER: Final = "order"
SAME_FAILURE_LINES: Final = 50
# The point kinds of the log, and what they are anchored to, in order of preference.
ANCHORS: Final = {"failure": ("oom", "release"), "start": ("start", "acquire")}


@dataclass
class Anchoring:
    """What became of an un-timed input's rows."""

    anchors: list[str] = field(default_factory=list)
    untimed_rows: int = 0
    reason: str = ""


def line_instant(line: pl.Expr) -> pl.Expr:
    """A stand-in time for line ``line`` of a log without times: that many seconds after the
    epoch, so that a parser's time-ordered extraction keeps the file's order (its repeats
    window counts lines). :func:`untimed_rows` turns it back into the line and no time."""
    return pl.from_epoch(line, time_unit="s").dt.replace_time_zone("UTC").cast(TS)


def untimed_rows(frame: pl.DataFrame | None) -> pl.DataFrame | None:
    """Rows placed at :func:`line_instant`: the line they came from (``order``), and no time."""
    if frame is None:
        return None
    return frame.with_columns(pl.col("ts").dt.epoch("s").alias(ORDER), ts=pl.lit(None, dtype=TS))


def has_untimed(result: ParseResult) -> bool:
    return any((f := getattr(result, t)) is not None and ORDER in f.columns for t in TABLES)


def anchor(result: ParseResult, ref: Moments | None, name: str) -> Anchoring:
    """Place ``result``'s un-timed rows at ``ref``'s moments where unambiguous (in place):
    every frame leaves with a ``clock`` column and without ``order``."""
    units = _units(result.events)
    placed: list[pl.DataFrame] = []
    out = Anchoring()
    reasons: list[str] = []
    for group, kinds in ANCHORS.items():
        mine = units.filter(pl.col("group") == group)
        if mine.height == 0:
            continue
        theirs = _reference(ref, kinds)
        if theirs is None or theirs.height != mine.height:
            reasons.append(_why(group, mine.height, 0 if theirs is None else theirs.height))
            continue
        pairs = mine.rename({"what": "what_free"}).hstack(
            theirs.select("at", "t", "before", "what", "source")
        )
        placed.append(pairs.select("first", "last", "at"))
        out.anchors += [_describe(row, name) for row in pairs.iter_rows(named=True)]
    spans = (
        pl.concat(placed)
        if placed
        else pl.DataFrame(schema={"first": pl.Int64, "last": pl.Int64, "at": TS})
    )
    for table in TABLES:
        frame: pl.DataFrame | None = getattr(result, table)
        if frame is None or frame.height == 0:
            continue
        setattr(result, table, _place(frame, spans))
    out.untimed_rows = sum(
        int(f.filter(pl.col("clock") == "untimed").height)
        for t in TABLES
        if (f := getattr(result, t)) is not None and f.height
    )
    out.reason = "; ".join(reasons) or "nothing to anchor to"
    return out


def _units(events: pl.DataFrame | None) -> pl.DataFrame:
    """The log's failures and starts, in file order: ``group``, ``first``/``last`` line."""
    schema = {"group": pl.String, "first": pl.Int64, "last": pl.Int64, "what": pl.String}
    if events is None or ORDER not in events.columns:
        return pl.DataFrame(schema=schema)
    kinds = {k: ("start" if v[0] == "start" else "failure") for k, v in EVENT_POINTS.items()}
    words = {k: v[1] for k, v in EVENT_POINTS.items()}
    rows = (
        events.filter(pl.col("ts").is_null() & pl.col("kind").is_in(list(kinds)))
        .select(
            group=pl.col("kind").replace_strict(kinds),
            line=pl.col(ORDER),
            what=pl.col("kind").replace_strict(words),
        )
        .sort("group", "line")
    )
    new = (pl.col("line") - pl.col("line").shift(1).over("group")).fill_null(
        SAME_FAILURE_LINES + 1
    ) > SAME_FAILURE_LINES
    return (
        rows.with_columns(unit=new.cum_sum().over("group"))
        .group_by("group", "unit", maintain_order=True)
        .agg(first=pl.col("line").min(), last=pl.col("line").max(), what=pl.col("what").first())
        .sort("first")
        .select(list(schema))
    )


def _reference(ref: Moments | None, kinds: tuple[str, ...]) -> pl.DataFrame | None:
    """The reference's moments of the first of ``kinds`` it has, in time order."""
    if ref is None:
        return None
    for kind in kinds:
        found = ref.points.filter(pl.col("kind") == kind).sort("t")
        if found.height:
            return found.with_columns(at=pl.coalesce("before", "t"))
    return None


def _place(frame: pl.DataFrame, spans: pl.DataFrame) -> pl.DataFrame:
    """Rows whose line falls in an anchored failure or start take its time; the rest of the
    un-timed rows stay un-timed, in file order."""
    if ORDER not in frame.columns:
        return frame.with_columns(clock=pl.lit("stated", CLOCK))
    lines = frame.with_row_index("_row")
    hits = (
        lines.filter(pl.col("ts").is_null())
        .join(spans, how="cross")
        .filter((pl.col(ORDER) >= pl.col("first")) & (pl.col(ORDER) <= pl.col("last")))
        .select("_row", "at")
        .unique("_row", keep="first")
    )
    lines = lines.join(hits, on="_row", how="left").with_columns(
        ts=pl.coalesce(pl.col("ts"), pl.col("at")).cast(TS)
    )
    clock = (
        pl.when(pl.col("at").is_not_null())
        .then(pl.lit("anchored"))
        .when(pl.col("ts").is_null())
        .then(pl.lit("untimed"))
        .otherwise(pl.lit("stated"))
        .cast(CLOCK)
    )
    return (
        lines.with_columns(clock=clock)
        .sort(pl.col("ts").is_null(), ORDER, "_row")
        .drop("_row", "at", ORDER)
    )


def _describe(row: dict[str, Any], name: str) -> str:
    lines = (
        f"line {row['first']}"
        if row["first"] == row["last"]
        else f"lines {row['first']}-{row['last']}"
    )
    where = PurePath(str(row["source"])).name
    text = f"{row['what_free']} ({lines}) placed at {row['what']} in {where}"
    if row["before"] is not None and row["before"] != row["t"]:
        return text + f", between {iso_time(row['before'], 1)} and {iso_time(row['t'], 1)}"
    return text + f" at {iso_time(row['t'], 1)}"


def _why(group: str, mine: int, theirs: int) -> str:
    what = f"{mine} {'failure' if group == 'failure' else 'start'}{'s' if mine != 1 else ''}"
    seen = "a memory release or an OOM" if group == "failure" else "a memory rise or a start"
    if not theirs:
        return f"the log shows {what} and no timed input of the incident saw {seen}"
    return (
        f"the log shows {what} and the timed inputs {theirs} moments of {seen[2:]}: which is "
        "which is not known"
    )
