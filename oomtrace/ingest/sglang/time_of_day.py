"""Dates for SGLang's time-of-day-only prefix (``[11:19:46 TP0]``, releases up to 0.3.x).

SGLang 0.3.0 configures its logger with ``datefmt="%H:%M:%S"`` (``sglang/srt/utils.py``,
``configure_logger``); 0.3.6 prints the date too (``docs/formats/sglang.md``). A log of the older
releases says what time of day each line came, never on which day. The day is placed from the
file's modification time, the last moment it was written: the last line fell on that day (or the
day before, if its time of day is later than the file's), and each step back of more than twelve
hours between consecutive lines is a midnight passed. A pre-scan counts the midnights, so that
every chunk can then be dated as it is read.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Final
from zoneinfo import ZoneInfo

import polars as pl

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.ingest.text.input_file import InputFile

# A time-only SGLang prefix, for the pre-scan (the time of day as three groups).
TIME_ONLY: Final = r"\[(\d{2}):(\d{2}):(\d{2})(?:\.\d{3})?(?: [A-Z][A-Z_]*\d+)*\](?: |$)"
_HALF_DAY_S: Final = 12 * 3600
# A file written a few seconds after its last line is still that line's day.
_TOLERANCE_S: Final = 60


def seconds_of_day(stamp: pl.Expr) -> pl.Expr:
    """``HH:MM:SS`` as seconds since midnight (null for other stamps)."""
    parts = stamp.str.extract_groups(r"^(\d{2}):(\d{2}):(\d{2})$")
    fields = [parts.struct.field(str(i)).cast(pl.Int64, strict=False) for i in (1, 2, 3)]
    return fields[0] * 3600 + fields[1] * 60 + fields[2]


@dataclass
class DayClock:
    """The date of the first time-only line, and what carries from one chunk to the next."""

    first_day: date
    last_tod: int | None = None
    days: int = 0

    def days_since_first(self, tod: pl.Series) -> pl.Series:
        """Days since the first line's date, per line (null where ``tod`` is null)."""
        frame = pl.DataFrame({"tod": tod}).with_columns(
            prev=pl.col("tod").forward_fill().shift(1, fill_value=self.last_tod)
        )
        midnight = ((pl.col("prev") - pl.col("tod")) > _HALF_DAY_S).fill_null(value=False)
        days = frame.select(
            pl.when(pl.col("tod").is_not_null()).then(midnight.cum_sum() + self.days)
        ).to_series()
        known = tod.drop_nulls()
        if known.len():
            self.last_tod = int(known[-1])
            self.days = int(days.drop_nulls()[-1])
        return days.cast(pl.Int64)

    def naive(self, tod: pl.Series) -> pl.Series:
        """Zone-less ``Datetime("ns")`` of each time-only line (null elsewhere)."""
        days = self.days_since_first(tod)
        start = datetime.combine(self.first_day, datetime.min.time())
        frame = pl.DataFrame({"d": days, "t": tod})
        return frame.select(
            (
                pl.lit(start).cast(pl.Datetime("ns"))
                + pl.duration(days=pl.col("d"), seconds=pl.col("t"))
            ).alias("naive")
        ).to_series()


def scan(
    source: InputFile, mtime: datetime, tz: str, year: int | None = None
) -> tuple[DayClock, int] | None:
    """A clock for ``source`` if its lines carry time-only prefixes: the first line's date, from
    ``mtime`` and the midnights the file passes (in ``year`` where ``--year`` gives it); and how
    many midnights that is. None otherwise."""
    midnights = 0
    last: int | None = None
    scratch = SourceDiagnostics(source.name, "sglang-log", "")  # the real read counts the lines
    for chunk in source.line_chunks(scratch):
        tod = (
            pl.DataFrame({"line": chunk.lines})
            .select(pl.col("line").str.extract_groups(TIME_ONLY).alias("g"))
            .unnest("g")
            .select(
                (
                    pl.col("1").cast(pl.Int64) * 3600
                    + pl.col("2").cast(pl.Int64) * 60
                    + pl.col("3").cast(pl.Int64)
                ).alias("tod")
            )
            .to_series()
            .drop_nulls()
        )
        if tod.len() == 0:
            continue
        previous = tod.shift(1, fill_value=last) if last is not None else tod.shift(1)
        midnights += int(((previous - tod) > _HALF_DAY_S).sum())
        last = int(tod[-1])
    if last is None:
        return None
    written = mtime.astimezone(ZoneInfo(tz))
    written_tod = written.hour * 3600 + written.minute * 60 + written.second
    last_day = written.date() - timedelta(days=1 if last > written_tod + _TOLERANCE_S else 0)
    first_day = last_day - timedelta(days=midnights)
    if year is not None and year != first_day.year:
        try:
            first_day = first_day.replace(year=year)
        except ValueError:  # 29 February in a year without one
            first_day = first_day.replace(year=year, day=28)
    return DayClock(first_day), midnights
