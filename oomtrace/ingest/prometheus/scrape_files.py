"""When each scrape of a file (or of each file of a series) was taken.

A file's scrapes are cut at its time lines (:mod:`.time_lines`). A file with none holds one
scrape with no time: it is placed at the time in its name (:mod:`.file_names`), else at the
file's modification time, and the diagnostics say which. The files of one series (a scrape per
file, ``docs/formats/prometheus.md``) are read in turn by one reader, each with its own scrape
numbers; :func:`scrape_times` gives every scrape its instant and says, once for the series, how.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import PurePosixPath
from typing import Final

import polars as pl

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.errors import InputError
from oomtrace.ingest.prometheus.file_names import time_in_name
from oomtrace.ingest.prometheus.frames import SCRAPE_TIMES
from oomtrace.ingest.prometheus.time_lines import parse_times
from oomtrace.isotime import iso_time
from oomtrace.schema import TS

_EXAMPLES: Final = 2


@dataclass
class ScrapeFile:
    """One file's part of a reader's scrapes: its scrape numbers start at ``base``; ``leading``
    says whether its time lines come before their scrapes (``date; curl``) or after."""

    name: str
    mtime: datetime | None
    base: int
    time_lines: list[pl.DataFrame] = field(default_factory=list)
    leading: bool | None = None

    @property
    def timed(self) -> bool:
        return any(f.height for f in self.time_lines)

    def count(self) -> int:
        return sum(f.height for f in self.time_lines)


@dataclass
class Placement:
    """How the files without times of their own were placed, for the notes and the clock."""

    by_name: Counter[str] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)
    by_mtime: list[tuple[str, datetime]] = field(default_factory=list)
    zone_assumed: bool = False
    unplaced: list[str] = field(default_factory=list)


def scrape_times(
    files: list[ScrapeFile], tz: str | None, diag: SourceDiagnostics
) -> tuple[pl.DataFrame, Placement]:
    """Every scrape's instant (``SCRAPE_TIMES``), and how the untimed files were placed."""
    parts: list[pl.DataFrame] = []
    placement = Placement()
    for file in files:
        if file.timed:
            lines = pl.concat(file.time_lines)
            when = parse_times(lines["time_text"], lines["line"], tz, file.name, diag)
            shift = 0 if file.leading else 1  # a trailing time line closes the scrape before it
            parts.append(
                pl.DataFrame({"scrape": lines["scrape"] - shift, "scrape_ts": when}, SCRAPE_TIMES)
            )
            continue
        stamp = _untimed_file_time(file, tz, placement)
        if stamp is not None:
            parts.append(pl.DataFrame({"scrape": [file.base], "scrape_ts": [stamp]}, SCRAPE_TIMES))
    times = pl.concat(parts) if parts else pl.DataFrame(schema=SCRAPE_TIMES)
    return times.with_columns(pl.col("scrape_ts").cast(TS)), placement


def _untimed_file_time(file: ScrapeFile, tz: str | None, placement: Placement) -> datetime | None:
    named = time_in_name(PurePosixPath(file.name).name, tz)
    if named is not None:
        placement.by_name[named.form] += 1
        placement.zone_assumed |= named.zone_assumed
        if len(placement.examples) < _EXAMPLES:
            placement.examples.append(
                f"{PurePosixPath(file.name).name} at {iso_time(named.when, 3)}"
            )
        return named.when
    if file.mtime is not None:
        placement.by_mtime.append((PurePosixPath(file.name).name, file.mtime))
        return file.mtime
    placement.unplaced.append(file.name)
    return None


def check_one_scrape(raw: pl.DataFrame, files: list[ScrapeFile]) -> None:
    """A file with no time lines must hold one scrape: a series seen twice in it, with no time of
    its own, cannot be placed. Raises :class:`InputError` naming the file and the remedy."""
    bases = {f.base: f.name for f in files if not f.timed}
    if not bases:
        return
    untimed = raw.filter(pl.col("scrape").is_in(list(bases)) & pl.col("ts").is_null())
    repeated = untimed.filter(pl.struct("scrape", "key").is_duplicated())
    if repeated.height == 0:
        return
    row = repeated.row(0, named=True)
    times = untimed.filter(
        (pl.col("scrape") == row["scrape"]) & (pl.col("key") == row["key"])
    ).height
    raise InputError(
        f"{bases[row['scrape']]}: several scrapes with no time (series {row['key']} appears "
        f"{times} times), so they cannot be placed in time; put a line `# oomtrace-scrape <ISO "
        "time>` (e.g. from `date -u +%FT%T.%3NZ`) before each scrape, or save one scrape per file"
    )


def note_placement(placement: Placement, files: int, diag: SourceDiagnostics) -> None:
    """One note for the series (or the file) on how its untimed scrapes were placed."""
    named = sum(placement.by_name.values())
    many = files > 1
    if named:
        forms = ", ".join(sorted(placement.by_name))
        what = f"{named} file(s) of one scrape each" if many else "one scrape with no time"
        diag.note(
            f"{what}: placed at the time in the file name ({forms}): "
            + "; ".join(placement.examples)
            + (" ..." if named > len(placement.examples) else "")
        )
    if placement.by_mtime:
        names = [name for name, _ in placement.by_mtime]
        shown = ", ".join(names[:3]) + (" ..." if len(names) > 3 else "")
        what = (
            f"{len(names)} file(s) ({shown}) hold one scrape with no time: placed at their "
            "modification times"
            if many
            else "one scrape with no time: placed at the file's modification time "
            + iso_time(placement.by_mtime[0][1], 0)
        )
        diag.note(
            f"{what} (an assumption; a time in the file name, `# oomtrace-scrape <time>` lines or "
            "the collector give real times)"
        )
    if placement.zone_assumed:
        diag.note(
            "times in the file names carry no zone; read as UTC (pass --tz ZONE with the "
            "capturing host's zone)"
        )
    if many:
        diag.note(
            f"{files} files read as one series (one source): counters keep their increase "
            "across the files"
        )
