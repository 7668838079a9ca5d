"""Finding a line's time in the forms real logs print, vectorised over a chunk of lines.

Used by the SGLang parser (for outer ``kubectl --timestamps`` / docker prefixes) and by the generic
PyTorch-log parser. Forms, in order of preference when a line carries several:

1. ISO 8601 / RFC 3339 **with** a zone (``2024-12-10T21:50:03.478010Z``, ``...+02:00``): exact;
2. ISO 8601 or ``YYYY-MM-DD HH:MM:SS[,.fraction]`` **without** a zone (Python ``logging``'s
   ``asctime``, SGLang; TensorRT-LLM's bracketed ``[MM/DD/YYYY-HH:MM:SS]``): placed in
   ``ClockOptions.tz`` (UTC unless told), an assumption the parser records;
3. syslog ``Mon DD HH:MM:SS`` (journald, no year): the year is ``ClockOptions.year`` or that of
   the file's modification time, one year earlier for dates after it (a New Year inside the
   file);
4. glog's ``LMMDD HH:MM:SS.ffffff`` (Triton's ``E0306 16:40:07.708802``) and PyTorch's c10
   logging, which leaves the month unpadded (``[W812 16:00:28.643448608 ...]``: August 12): no
   year, completed as syslog's is, in ``ClockOptions.tz``.

Only the start of a line is searched (:data:`SEARCH_CHARS` characters, ANSI colour codes removed)
so that a date quoted inside a message is not taken for the line's time.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final

import polars as pl

from oomtrace.ingest.text.outer_prefixes import ANSI
from oomtrace.schema import TS

SEARCH_CHARS: Final = 100

ISO: Final = (
    r"(?<date>\d{4}-\d{2}-\d{2})[T ](?<time>\d{2}:\d{2}:\d{2})(?:[.,](?<frac>\d{1,9}))?"
    r"(?<zone>Z|[+-]\d{2}:?\d{2})?"
)
# A zone-less time that a zoned one follows on the line (Docker Desktop's local time before
# Ollama's ``time=2025-03-07T05:33:40.329Z``, https://github.com/ollama/ollama/issues/9562):
# the zoned one is read, as form 1 wins over form 2.
_ZONED_LATER: Final = (
    r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d\S*\s.*?\b(?<date>\d{4}-\d{2}-\d{2})T"
    r"(?<time>\d{2}:\d{2}:\d{2})(?:[.,](?<frac>\d{1,9}))?(?<zone>Z|[+-]\d{2}:?\d{2})"
)
# ``[MM/DD/YYYY-HH:MM:SS]``: TensorRT-LLM's Python logger (``trtllm-serve``'s
# ``[07/08/2025-19:47:15] [TRT-LLM] [I] ...``, https://github.com/NVIDIA/TensorRT-LLM/issues/5872),
# read as form 2.
SLASHED: Final = r"\[(?<um>\d{2})/(?<ud>\d{2})/(?<uy>\d{4})-(?<utime>\d{2}:\d{2}:\d{2})\]"
# The month as C's English abbreviation, in either case: journalctl under some locales prints
# it lower-case (``jun 18 13:23:17 ollama[22256]: ``, https://github.com/ollama/ollama/issues/5113).
SYSLOG: Final = (
    r"(?:^|[^A-Za-z])(?<mon>(?i:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec)) {1,2}"
    r"(?<day>\d{1,2}) "
    r"(?<stime>\d{2}:\d{2}:\d{2})(?:[^0-9]|$)"
)
# glog's and c10's level letter, month and day (the month unpadded in c10's), time, fraction.
GLOG: Final = (
    r"(?:^|[\[\s:])[IWEF](?<gm>0?[1-9]|1[0-2])(?<gd>0[1-9]|[12]\d|3[01]) "
    r"(?<gtime>\d{2}:\d{2}:\d{2})(?:\.(?<gfrac>\d{1,9}))?\s"
)
_MONTHS: Final = {
    m: f"{i:02d}"
    for i, m in enumerate(
        ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), 1
    )
}


@dataclass(frozen=True)
class StampForms:
    """Which forms a chunk used, so the parser can state its assumptions once."""

    zoned: int = 0
    zoneless: int = 0
    syslog: int = 0
    # the UTC offsets the zoned times state other than UTC's own (``+01:00``), as printed
    offsets: frozenset[str] = frozenset()
    # the first time a line states with its year (forms 1 and 2), read as it was read
    first_dated: datetime | None = None

    def __add__(self, other: StampForms) -> StampForms:
        return StampForms(
            self.zoned + other.zoned,
            self.zoneless + other.zoneless,
            self.syslog + other.syslog,
            self.offsets | other.offsets,
            self.first_dated or other.first_dated,
        )


def naive(date: pl.Expr, time: pl.Expr, frac: pl.Expr | None = None) -> pl.Expr:
    """A zone-less ``Datetime("ns")`` from ``YYYY-MM-DD``, ``HH:MM:SS`` and optional fraction
    digits (``123`` is 123 ms, ``478010`` is 478010 us); invalid dates give null."""
    base = pl.concat_str([date, pl.lit(" "), time]).str.to_datetime(
        "%Y-%m-%d %H:%M:%S", time_unit="ns", strict=False
    )
    if frac is None:
        return base
    nanos = frac.str.pad_end(9, "0").str.slice(0, 9).cast(pl.Int64, strict=False).fill_null(0)
    return base + pl.duration(nanoseconds=nanos)


def localize(naive_ts: pl.Expr, tz: str) -> pl.Expr:
    """Place zone-less times in ``tz`` and convert to UTC. A time that does not exist there (the
    spring-forward gap) gives null; an ambiguous one (fall-back) takes the earlier instant."""
    if tz == "UTC":
        return naive_ts.dt.replace_time_zone("UTC")
    return naive_ts.dt.replace_time_zone(
        tz, ambiguous="earliest", non_existent="null"
    ).dt.convert_time_zone("UTC")


def with_offset(naive_ts: pl.Expr, zone: pl.Expr) -> pl.Expr:
    """UTC from a zone-less time and its ``Z`` / ``+hh:mm`` / ``-hhmm`` suffix."""
    digits = zone.str.replace_all(":", "", literal=True)
    sign = pl.when(digits.str.starts_with("-")).then(-1).otherwise(1)
    minutes = (
        digits.str.slice(1, 2).cast(pl.Int64, strict=False) * 60
        + digits.str.slice(3, 2).cast(pl.Int64, strict=False)
    ).fill_null(0) * sign
    return naive_ts.dt.replace_time_zone("UTC") - pl.duration(minutes=minutes)


def line_stamps(
    lines: pl.Series,
    tz: str,
    year: int | None,
    anchor: datetime | None,
    *,
    dated_anchor: bool = False,
) -> tuple[pl.Series, StampForms]:
    """Each line's own time (``Datetime("ns", "UTC")``, null where the line has none).

    ``tz`` places zone-less times; ``year`` (else ``anchor``'s year) completes syslog times,
    which ``anchor`` (the file's modification time) also bounds: a syslog date more than a day
    after it belongs to the year before. With ``dated_anchor``, ``anchor`` is a time the log
    itself states with its year (:attr:`StampForms.first_dated`): a syslog date takes the year
    that puts it within half a year of it (a New Year either side).
    """
    head = (
        lines.str.slice(0, SEARCH_CHARS + 60).str.replace_all(ANSI, "").str.slice(0, SEARCH_CHARS)
    )
    frame = pl.DataFrame({"h": head}).with_columns(
        _i=pl.col("h").str.extract_groups(ISO), _s=pl.col("h").str.extract_groups(SYSLOG)
    )
    frame = frame.unnest("_i", "_s")
    later = pl.col("zone").is_null() & pl.col("h").str.contains(_ZONED_LATER)
    if frame.select(later.any()).item():
        zoned_later = frame.select(pl.col("h").str.extract_groups(_ZONED_LATER)).unnest("h")
        use = frame.select(later.alias("use")).to_series()
        frame = frame.with_columns(
            pl.when(use).then(zoned_later.get_column(name)).otherwise(pl.col(name)).alias(name)
            for name in ("date", "time", "frac", "zone")
        )
    slashed = frame.select(pl.col("h").str.extract_groups(SLASHED)).unnest("h")
    if slashed.select(pl.col("uy").is_not_null().any()).item():
        us_date = pl.concat_str([pl.col("uy"), pl.col("um"), pl.col("ud")], separator="-")
        frame = pl.concat([frame, slashed], how="horizontal").with_columns(
            date=pl.coalesce("date", us_date), time=pl.coalesce("time", "utime")
        )
    iso = naive(pl.col("date"), pl.col("time"), pl.col("frac"))
    zoned = with_offset(iso, pl.col("zone"))
    zoneless = localize(iso, tz)
    glog = frame.select(pl.col("h").str.extract_groups(GLOG)).unnest("h")
    if glog.select(pl.col("gm").is_not_null().any()).item():
        frame = pl.concat([frame, glog], how="horizontal").with_columns(
            mon=pl.coalesce("mon", pl.col("gm").str.zfill(2)),
            day=pl.coalesce("day", "gd"),
            stime=pl.coalesce("stime", "gtime"),
            sfrac=pl.when(pl.col("stime").is_null()).then(pl.col("gfrac")),
        )
    else:
        frame = frame.with_columns(sfrac=pl.lit(None, pl.String))
    syslog_year = year if year is not None else (anchor.year if anchor is not None else None)
    if syslog_year is None:
        syslog = pl.lit(None, dtype=TS)
    else:
        month = pl.col("mon").str.to_titlecase().replace(_MONTHS)
        date = pl.concat_str(
            [pl.lit(f"{syslog_year}-"), month, pl.lit("-"), pl.col("day").str.zfill(2)]
        )
        syslog = localize(naive(date, pl.col("stime"), pl.col("sfrac")), tz)
        if year is None and anchor is not None and dated_anchor:
            near = pl.lit(anchor).dt.cast_time_unit("ns")
            syslog = (
                pl.when(syslog > near + pl.duration(days=183))
                .then(syslog.dt.offset_by("-1y"))
                .when(syslog < near - pl.duration(days=183))
                .then(syslog.dt.offset_by("1y"))
                .otherwise(syslog)
            )
        elif year is None and anchor is not None:
            late = syslog > pl.lit(anchor).dt.cast_time_unit("ns") + pl.duration(days=1)
            syslog = pl.when(late).then(syslog.dt.offset_by("-1y")).otherwise(syslog)
    out = frame.select(
        ts=pl.when(pl.col("zone").is_not_null())
        .then(zoned)
        .when(pl.col("date").is_not_null())
        .then(zoneless)
        .otherwise(syslog)
        .dt.cast_time_unit("ns"),
        _form=pl.when(pl.col("zone").is_not_null() & iso.is_not_null())
        .then(pl.lit("zoned"))
        .when(iso.is_not_null())
        .then(pl.lit("zoneless"))
        .when(pl.col("mon").is_not_null())
        .then(pl.lit("syslog")),
    )
    counts = dict(out.group_by("_form").len().drop_nulls("_form").iter_rows())
    zones = frame.get_column("zone").drop_nulls().unique()
    dated = out.filter(pl.col("_form").is_in(["zoned", "zoneless"])).get_column("ts").drop_nulls()
    forms = StampForms(
        int(counts.get("zoned", 0)),
        int(counts.get("zoneless", 0)),
        int(counts.get("syslog", 0)),
        frozenset(_offset_text(z) for z in zones if z != "Z" and _offset_text(z) != "+00:00"),
        dated[0] if dated.len() else None,
    )
    return out["ts"], forms


def glog_clock(text: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    """The year-less glog / c10 time at the start of ``text`` (:data:`GLOG`, searched in its
    first :data:`SEARCH_CHARS` characters) as ``(month * 100 + day, second of the day)``, both
    ``Int32`` and null where there is none: how vLLM's reader keeps a printed time, for the
    PyTorch lines (``[rank1]:[W812 16:00:28.643448608 CUDACachingAllocator.cpp:3933] ...``)
    inside its log."""
    found = text.str.slice(0, SEARCH_CHARS).str.extract_groups(GLOG)
    hms = found.struct.field("gtime").str.split(":").list.eval(pl.element().cast(pl.Int32))
    month_day = found.struct.field("gm").cast(pl.Int32) * 100 + found.struct.field("gd").cast(
        pl.Int32
    )
    second = hms.list.get(0) * 3600 + hms.list.get(1) * 60 + hms.list.get(2)
    return month_day, second


def _offset_text(zone: str) -> str:
    """``+0100`` or ``+01:00`` as ``+01:00``."""
    digits = zone.replace(":", "")
    return f"{digits[:3]}:{digits[3:5]}"


def tz_hint(offset: object, whose: str = "the zoned lines") -> str:
    """What to pass as ``--tz`` where another line or input states the host's UTC offset
    (``+01:00``): ``"; its zoned lines state UTC+01:00: --tz Etc/GMT-1 where the host kept that
    offset"``; "" where none is stated. IANA's ``Etc/GMT`` zones invert the sign, and exist for
    whole hours only (a half-hour offset is named, with no zone to pass)."""
    if not isinstance(offset, str) or len(offset) != 6:
        return ""
    said = f"; {whose} state UTC{offset}"
    hours, minutes = int(offset[1:3]), int(offset[4:6])
    if minutes:
        return f"{said}: pass the IANA zone the host ran in"
    inverted = "-" if offset[0] == "+" else "+"
    return f"{said}: --tz Etc/GMT{inverted}{hours} where the host kept that offset"
