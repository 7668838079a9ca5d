"""Placing year-less, zone-less engine timestamps in UTC.

vLLM prints ``MM-DD HH:MM:SS`` in the server's local time, with no year and no zone
(``docs/formats/log-prefixes-and-times.md``, "Year-less engine times"). What places them, in
order of authority:

1. a full timestamp on the same line (kubectl ``--timestamps``, ``docker logs -t``, journald
   ``short-iso``) or the collector's arrival time: it wins, gives sub-second resolution, and a
   printed time that disagrees with it by more than :data:`TOLERANCE_S` is reported;
2. ``--year`` (the year of the first timestamp in the file) and ``--tz`` (an IANA zone);
3. otherwise the zone is UTC and the year is chosen so that the END of the file falls at or
   before the file's modification time (the last moment it was written), or before the last
   full timestamp seen in it.

A file that crosses New Year is followed line by line: a step back of more than half a year
between consecutive timestamps is a new year, a step forward of nearly a whole year is a late
line from the previous one (several processes write one log, not always in order).

:func:`decide` turns the file's timestamps
into a :class:`ClockDecision` once the whole file is read; :func:`placed_utc` is the vectorised
conversion. Chunks of one file can be read in any order and side by side: :func:`year_offsets`
works on one chunk, :func:`combine` joins the chunks' briefs in file order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final
from zoneinfo import ZoneInfo

import polars as pl

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.ingest.parser_api import ClockOptions
from oomtrace.isotime import iso_time

TOLERANCE_S: Final = 5
_DAY_S: Final = 86_400
_HALF_YEAR_S: Final = 183 * _DAY_S
# A line printed before midnight but written after later lines is late by seconds: only a jump
# forward of nearly a whole year is such a line (a long quiet gap is not).
_LATE_LINE_S: Final = 358 * _DAY_S
# Cumulative days before each month in a leap year: a position in the year that never rejects
# 02-29, used only to compare timestamps with each other.
_CUM_LEAP: Final = (0, 31, 60, 91, 121, 152, 182, 213, 244, 274, 305, 335)


def month_day_expr(month: pl.Expr, day: pl.Expr) -> pl.Expr:
    """``month * 100 + day`` as Int32 (null where either is null)."""
    return (month.cast(pl.Int32) * 100 + day.cast(pl.Int32)).cast(pl.Int32)


def seconds_of_year(md: pl.Expr, tod: pl.Expr) -> pl.Expr:
    """Seconds since 01-01 00:00:00 of a leap year, for ``md`` (``month*100+day``) and ``tod``
    (seconds of the day)."""
    month = md // 100
    days = month.replace_strict(
        dict(enumerate(_CUM_LEAP, start=1)), default=None, return_dtype=pl.Int64
    )
    return (days + md % 100 - 1) * _DAY_S + tod.cast(pl.Int64)


@dataclass(frozen=True)
class ChunkYears:
    """One chunk's timestamps in brief: its year offsets are local (0 at its first timestamp)
    until :func:`combine` gives each chunk its base."""

    first: tuple[int, int] | None = None
    last: tuple[int, int, int] | None = None
    first_soy: int | None = None
    last_soy: int | None = None
    forward_steps: int = 0


@dataclass(frozen=True)
class ClockSummary:
    """The whole file: first timestamp, last timestamp with its year offset, New Years seen."""

    first: tuple[int, int] | None = None
    last: tuple[int, int, int] | None = None
    forward_steps: int = 0


def year_offsets(md: pl.Series, tod: pl.Series) -> tuple[pl.Series, ChunkYears]:
    """Local year offsets (Int32, 0 at the first timestamp; null where ``md`` is null) of one
    chunk's timestamps, in order, and the chunk's brief."""
    # A printed date with no such month (a corrupt line) places nothing, like a missing one.
    frame = pl.DataFrame({"md": md, "tod": tod}).with_row_index("_i")
    frame = frame.with_columns(_soy=seconds_of_year(pl.col("md"), pl.col("tod")))
    known = frame.filter(pl.col("_soy").is_not_null())
    out = pl.repeat(None, frame.height, dtype=pl.Int32, eager=True).alias("yo")
    if known.height == 0:
        return out, ChunkYears()
    soy = known.get_column("_soy")
    step = _steps(soy - soy.shift(1)).fill_null(0)
    offsets = step.cum_sum()
    brief = ChunkYears(
        first=(int(known["md"][0]), int(known["tod"][0])),
        last=(int(known["md"][-1]), int(known["tod"][-1]), int(offsets[-1])),
        first_soy=int(soy[0]),
        last_soy=int(soy[-1]),
        forward_steps=int((step > 0).sum()),
    )
    if known.height == frame.height:
        return offsets.cast(pl.Int32).alias("yo"), brief
    return out.scatter(known["_i"], offsets), brief


def combine(chunks: list[ChunkYears]) -> tuple[list[int], ClockSummary]:
    """Each chunk's base year offset (add it to the chunk's local offsets), and the summary."""
    bases: list[int] = []
    end = 0
    last_soy: int | None = None
    forward = 0
    first: tuple[int, int] | None = None
    last: tuple[int, int, int] | None = None
    for chunk in chunks:
        if chunk.first_soy is None or chunk.last is None or chunk.last_soy is None:
            bases.append(end)
            continue
        step = 0 if last_soy is None else _step(chunk.first_soy - last_soy)
        base = end + step
        bases.append(base)
        forward += chunk.forward_steps + (step > 0)
        end = base + chunk.last[2]
        last_soy = chunk.last_soy
        first = first or chunk.first
        last = (chunk.last[0], chunk.last[1], end)
    return bases, ClockSummary(first, last, forward)


def _step(diff: int) -> int:
    return 1 if diff < -_HALF_YEAR_S else -1 if diff > _LATE_LINE_S else 0


def _steps(diff: pl.Series) -> pl.Series:
    return (
        pl.DataFrame({"d": diff})
        .select(
            pl.when(pl.col("d") < -_HALF_YEAR_S)
            .then(1)
            .when(pl.col("d") > _LATE_LINE_S)
            .then(-1)
            .otherwise(0)
            .cast(pl.Int32)
        )
        .to_series()
    )


@dataclass
class FullAnchor:
    """The last line that carried both a printed time and a full timestamp."""

    md: int
    tod: int
    offset: int
    ts: datetime


@dataclass(frozen=True)
class ClockDecision:
    """How printed times become UTC: ``base_year`` is the year of year-offset 0."""

    base_year: int
    tz: str
    manifest: dict[str, Any] = field(default_factory=dict)


def decide(
    tracker: ClockSummary,
    options: ClockOptions,
    *,
    mtime: datetime | None,
    full: FullAnchor | None,
    full_source: str,
    all_full: bool,
    diag: SourceDiagnostics,
) -> ClockDecision:
    """The year and zone for a whole file, recorded in the manifest and the diagnostics.

    ``full`` is the last line with a full timestamp (``full_source`` names where those came
    from); ``all_full`` says every timed line had one, so printed times were never used.
    """
    tz = options.tz or "UTC"
    zone = ZoneInfo(tz)
    tz_source = "option" if options.tz else "default"
    last = tracker.last
    manifest: dict[str, Any] = {"tz": tz, "tz_source": tz_source}
    if last is None or all_full:
        now = datetime.now(UTC)
        base = options.year or (full.ts.year if full else (mtime or now).year)
        if all_full and last is not None:
            manifest.update(tz_source=full_source, year_source=full_source)
        return ClockDecision(base, tz, manifest)
    if options.year is not None:
        base, source = options.year, "option"
    elif full is not None:
        year = _nearest_year(full.md, full.tod, full.ts.astimezone(zone))
        base, source = year - full.offset, full_source
    else:
        anchor = mtime or datetime.now(UTC)
        source = "mtime" if mtime else "current date"
        year = _end_year(last[0], last[1], anchor.astimezone(zone))
        base = year - last[2]
        diag.note(
            f"vLLM prints no year: placed the last line in {year} from the "
            f"{'file modification time' if mtime else 'current date'} "
            f"({iso_time(anchor, 0)}); pass --year if that is wrong"
        )
    if tz_source == "default":
        diag.note(
            "vLLM prints local time without a zone: read as UTC; pass --tz if the server "
            "ran in another zone"
        )
    manifest.update(year=base, year_source=source)
    end_year = base + last[2]
    if tracker.forward_steps:
        manifest["year_last"] = end_year
        diag.note(new_year_note(base, end_year))
    return ClockDecision(base, tz, manifest)


def new_year_note(first: object, last: object) -> str:
    """The note of a log that crosses New Year (its years may be moved by alignment later)."""
    return f"the log crosses New Year: lines run from {first} into {last}"


def placed_utc(md: pl.Expr, tod: pl.Expr, offset: pl.Expr, decision: ClockDecision) -> pl.Expr:
    """``Datetime("ns", "UTC")`` for printed local ``md``/``tod`` in year ``base + offset``.
    Impossible dates (02-29 in a common year, month 13) and local times that do not exist (the
    hour skipped at a DST change) give null; repeated local times take the earlier instant."""
    year = offset.cast(pl.Int64) + decision.base_year
    month = (md // 100).cast(pl.Int64)
    day = (md % 100).cast(pl.Int64)
    valid = (month >= 1) & (month <= 12) & (day >= 1) & (day <= _days_in_month(year, month))
    seconds = _days_from_civil(year, month, day) * _DAY_S + tod.cast(pl.Int64)
    naive = pl.from_epoch(pl.when(valid).then(seconds), time_unit="s").dt.cast_time_unit("ns")
    if decision.tz == "UTC":
        return naive.dt.replace_time_zone("UTC")
    local = naive.dt.replace_time_zone(decision.tz, ambiguous="earliest", non_existent="null")
    return local.dt.convert_time_zone("UTC")


def printed_minus_full(frame: pl.DataFrame, tz: str) -> pl.Series:
    """Seconds by which each printed local time (``printed_month_day``,
    ``printed_second_of_day``) runs ahead of its full timestamp (``full_ts``), wrapped to the
    nearest year (so no year is needed): the disagreement measure for :data:`TOLERANCE_S`."""
    full = frame.get_column("full_ts")
    if tz == "UTC":
        # Straight from the epoch seconds: each calendar field read from a datetime converts it
        # to a civil date anew, five times over.
        seconds = full.dt.epoch("s")
        days = seconds // _DAY_S
        full_soy = leap_calendar_day(days) * _DAY_S + (seconds - days * _DAY_S)
    else:
        local = full.dt.convert_time_zone(tz)
        full_soy = pl.select(
            seconds_of_year(
                month_day_expr(pl.lit(local.dt.month()), pl.lit(local.dt.day())),
                pl.lit(local.dt.hour().cast(pl.Int64) * 3600)
                + pl.lit(local.dt.minute().cast(pl.Int64) * 60)
                + pl.lit(local.dt.second().cast(pl.Int64)),
            )
        ).to_series()
    printed = frame.select(
        seconds_of_year(pl.col("printed_month_day"), pl.col("printed_second_of_day"))
    ).to_series()
    diff = printed - full_soy
    year = 366 * _DAY_S
    return (
        diff
        - year * (diff > _HALF_YEAR_S).cast(pl.Int64)
        + year * (diff < -_HALF_YEAR_S).cast(pl.Int64)
    )


def leap_calendar_day(days: pl.Series) -> pl.Series:
    """0-based day in a leap-year calendar (01-01 -> 0, 03-01 -> 60, 12-31 -> 365) of dates
    given as days since 1970-01-01: H. Hinnant's civil_from_days, stopped at the day of the
    March-based year (March 1 -> 0, so January 1 -> 306)."""
    z = days + 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    march_day = doe - (365 * yoe + yoe // 4 - yoe // 100)
    return march_day + 60 - 366 * (march_day >= 306).cast(pl.Int64)


def report_disagreement(
    diffs: dict[int, int], total: int, what: str, diag: SourceDiagnostics
) -> None:
    """A diagnostic for printed times that disagree with ``what`` (``diffs``: seconds -> lines)."""
    beyond = {d: n for d, n in diffs.items() if abs(d) > TOLERANCE_S}
    count = sum(beyond.values())
    if not count:
        return
    # The most common offset; among equally common ones the smallest (dict order is not
    # stable: the counts come from hash-based value_counts).
    typical = min(beyond.items(), key=lambda kv: (-kv[1], abs(kv[0]), kv[0]))[0]
    hint = ""
    if abs(typical) >= 900 and abs(typical) % 900 <= TOLERANCE_S:
        hours = typical / 3600
        hint = (
            f"; a steady {hours:+g} h usually means the server's local zone is not the one "
            "assumed: pass --tz"
        )
    diag.note(
        f"{count:,} of {total:,} line(s): the printed time differs from the {what} by more "
        f"than {TOLERANCE_S} s (most often {typical:+,} s); the {what} were used{hint}"
    )


def _nearest_year(md: int, tod: int, local: datetime) -> int:
    """The year that puts printed ``md``/``tod`` closest to the full local timestamp."""
    best = local.year
    best_gap: float | None = None
    for year in (local.year - 1, local.year, local.year + 1):
        placed = _naive(year, md, tod)
        if placed is None:
            continue
        gap = abs((placed - local.replace(tzinfo=None)).total_seconds())
        if best_gap is None or gap < best_gap:
            best, best_gap = year, gap
    return best


def _end_year(md: int, tod: int, anchor_local: datetime) -> int:
    """The latest year in which the printed time is not after the anchor (plus a day of slack
    for a zone that is not the one assumed)."""
    limit = anchor_local.replace(tzinfo=None) + timedelta(days=1)
    for year in (anchor_local.year, anchor_local.year - 1, anchor_local.year - 2):
        placed = _naive(year, md, tod)
        if placed is not None and placed <= limit:
            return year
    return anchor_local.year


def _naive(year: int, md: int, tod: int) -> datetime | None:
    try:
        return datetime(year, md // 100, md % 100) + timedelta(seconds=tod)
    except ValueError:
        return None


def _days_in_month(year: pl.Expr, month: pl.Expr) -> pl.Expr:
    leap = ((year % 4 == 0) & (year % 100 != 0)) | (year % 400 == 0)
    base = month.replace_strict(
        {1: 31, 2: 28, 3: 31, 4: 30, 5: 31, 6: 30, 7: 31, 8: 31, 9: 30, 10: 31, 11: 30, 12: 31},
        default=0,
        return_dtype=pl.Int64,
    )
    return base + ((month == 2) & leap).cast(pl.Int64)


def _days_from_civil(year: pl.Expr, month: pl.Expr, day: pl.Expr) -> pl.Expr:
    """Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm)."""
    y = year - (month <= 2).cast(pl.Int64)
    era = y // 400
    yoe = y - era * 400
    shifted = pl.when(month > 2).then(month - 3).otherwise(month + 9)
    doy = (153 * shifted + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146_097 + doe - 719_468
