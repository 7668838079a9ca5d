"""Time lines between concatenated scrapes: which lines are times, and the instants they name.

Accepted forms (each alone on a line, or after ``# oomtrace-scrape``): epoch seconds (with an
optional fraction), milliseconds, microseconds or nanoseconds; ISO 8601 with or without a zone
(``date -Is``, ``date -Ins`` with its comma, ``date -u +%FT%T.%3NZ``); ``date -R``; C-locale
``date`` (``Fri Mar 14 09:00:00 UTC 2025``). Times without a zone are local: placed in ``--tz``,
UTC otherwise (a note says it was assumed). A zone abbreviation other than UTC/GMT names no
single offset, so it is read in ``--tz`` and refused without it.
"""

from __future__ import annotations

from typing import Final

import polars as pl

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.errors import InputError
from oomtrace.schema import TS

_DAY = r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)"
_MON = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_EPOCH = r"\d{10}(?:\.\d+)?|\d{13}|\d{16}|\d{19}"
_ISO = r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?"
_RFC = rf"{_DAY},\s+\d{{1,2}}\s+{_MON}\s+\d{{4}}\s+\d{{2}}:\d{{2}}:\d{{2}}\s+[+-]\d{{4}}"
_CDATE = rf"{_DAY}\s+{_MON}\s+\d{{1,2}}\s+\d{{2}}:\d{{2}}:\d{{2}}(?:\s+[A-Z]{{2,5}})?\s+\d{{4}}"
TIME_LINE: Final = rf"^\s*({_EPOCH}|{_ISO}|{_RFC}|{_CDATE})\s*$"
_UTC_NAMES: Final = ("UTC", "GMT", "Z")


def parse_times(
    texts: pl.Series, lines: pl.Series, tz: str | None, name: str, diag: SourceDiagnostics
) -> pl.Series:
    """The UTC instants of time-line texts (null where a text is not a valid time, counted)."""
    frame = pl.DataFrame({"t": texts.str.strip_chars(), "line": lines})
    abbr = pl.col("t").str.extract(rf"^{_DAY}\s+{_MON}\s+.*\s([A-Z]{{2,5}})\s+\d{{4}}$", 1)
    foreign = frame.filter(abbr.is_not_null() & ~abbr.is_in(_UTC_NAMES))
    if foreign.height and tz is None:
        raise InputError(
            f"{name}: time lines such as {foreign['line'][0]!r} give their zone only as "
            f"{foreign.select(abbr).item(0, 0)!r}, which names no single offset; pass --tz with "
            "the IANA zone (e.g. Europe/Berlin) or write the times with `date -Is`"
        )
    if foreign.height:
        diag.note(f"time lines with a zone abbreviation were read in --tz {tz}")
    zone = tz or "UTC"
    frame = frame.with_columns(
        ts=pl.coalesce(
            _epoch(pl.col("t")),
            _iso(pl.col("t"), zone),
            pl.col("t")
            .str.to_datetime("%a, %d %b %Y %H:%M:%S %z", strict=False, time_unit="ns")
            .dt.convert_time_zone("UTC"),
            _cdate(pl.col("t"), abbr, zone),
        ),
        local=(
            pl.col("t").str.contains(rf"^{_ISO}$")
            & ~pl.col("t").str.contains(r"(?:Z|[+-]\d{2}:?\d{2})$")
        )
        | (pl.col("t").str.contains(rf"^{_CDATE}$") & abbr.is_null()),
    )
    bad = frame.filter(pl.col("ts").is_null())
    diag.skip(
        "time line that names no valid instant", bad.height, bad["line"][0] if bad.height else None
    )
    diag.lines_recognised -= bad.height
    if frame["local"].any() and tz is None:
        diag.note(
            "scrape times without a zone were read as UTC (pass --tz ZONE with the capturing "
            "host's zone)"
        )
    return frame["ts"].cast(TS)


def _epoch(text: pl.Expr) -> pl.Expr:
    seconds = text.str.extract(r"^(\d{10}(?:\.\d+)?)$", 1).cast(pl.Float64)
    digits = text.str.len_chars()
    whole = text.str.extract(r"^(\d{13}|\d{16}|\d{19})$", 1).cast(pl.Int64)
    scale = pl.when(digits == 13).then(1_000_000).when(digits == 16).then(1_000).otherwise(1)
    nanos = pl.coalesce((seconds * 1e6).round(0).cast(pl.Int64) * 1_000, whole * scale)
    return nanos.cast(pl.Datetime("ns")).dt.replace_time_zone("UTC")


def _iso(text: pl.Expr, zone: str) -> pl.Expr:
    iso = (
        text.str.replace(",", ".", literal=True)
        .str.replace(r"^(\d{4}-\d{2}-\d{2}) ", "${1}T")
        .str.replace(r"Z$", "+00:00")
    )
    zoned = iso.str.to_datetime("%Y-%m-%dT%H:%M:%S%.f%z", strict=False, time_unit="ns")
    naive = iso.str.to_datetime("%Y-%m-%dT%H:%M:%S%.f", strict=False, time_unit="ns")
    local = naive.dt.replace_time_zone(zone, ambiguous="earliest", non_existent="null")
    return pl.coalesce(zoned.dt.convert_time_zone("UTC"), local.dt.convert_time_zone("UTC"))


def _cdate(text: pl.Expr, abbr: pl.Expr, zone: str) -> pl.Expr:
    bare = text.str.replace(r"\s[A-Z]{2,5}(\s+\d{4})$", "${1}").str.replace_all(r"\s+", " ")
    naive = bare.str.to_datetime("%a %b %e %H:%M:%S %Y", strict=False, time_unit="ns")
    in_utc = naive.dt.replace_time_zone("UTC")
    local = naive.dt.replace_time_zone(zone, ambiguous="earliest", non_existent="null")
    return pl.when(abbr.is_in(_UTC_NAMES)).then(in_utc).otherwise(local.dt.convert_time_zone("UTC"))
