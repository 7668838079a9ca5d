"""The time in a scrape file's name, and the series a file's name says it belongs to.

Saving ``/metrics`` by hand, people name each scrape by its time: ``curl -s host:8000/metrics >
scrape-$(date +%s).txt``, ``metrics-$(date -Is).prom``, ``m_$(date +%Y%m%d-%H%M%S).txt``
(``docs/formats/prometheus.md``, "One scrape per file"). A file with no time of its own (no time
lines, no sample timestamps) is placed at the time its name holds, else at its modification time.
The forms, tried in order, each standing alone in the name (not part of a longer number):

* epoch seconds (10 digits, optionally a fraction), milliseconds (13), microseconds (16) or
  nanoseconds (19): UTC;
* ISO 8601 with a zone (``2026-06-07T10:59:32Z``, ``...+02:00``; ``-`` or nothing between the
  time's fields, as file names often need): exact;
* the same without a zone, or ``YYYYMMDD[-_T]HHMMSS``: local time, read in ``--tz`` (UTC unless
  given, recorded as assumed).

Years outside 2000-2199 are not times (a port, a pid, a counter).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import PurePosixPath
from typing import Final
from zoneinfo import ZoneInfo

_EPOCH: Final = re.compile(r"(?<![0-9.])(\d{10}(?:\.\d+)?|\d{13}|\d{16}|\d{19})(?![0-9])")
_ISO: Final = re.compile(
    r"(?<!\d)(\d{4})-(\d{2})-(\d{2})[T_ ](\d{2})[:\-]?(\d{2})[:\-]?(\d{2})(?:[.,](\d{1,9}))?"
    r"(Z|[+-]\d{2}:?\d{2})?(?!\d)"
)
_COMPACT: Final = re.compile(r"(?<!\d)(\d{4})(\d{2})(\d{2})[-_T]?(\d{2})(\d{2})(\d{2})(?!\d)")
_FIRST_YEAR: Final = 2000
_LAST_YEAR: Final = 2199
_EPOCH_RANGE: Final = (
    datetime(_FIRST_YEAR, 1, 1, tzinfo=UTC).timestamp(),
    datetime(_LAST_YEAR + 1, 1, 1, tzinfo=UTC).timestamp(),
)


@dataclass(frozen=True)
class NameTime:
    """A time found in a file name: the instant, how it was written, and where in the name."""

    when: datetime
    form: str
    span: tuple[int, int]
    zone_assumed: bool = False


def time_in_name(name: str, tz: str | None) -> NameTime | None:
    """The time ``name`` (a file name, without its folders) holds, or None."""
    for found in (_epoch(name), _iso(name, tz), _compact(name, tz)):
        if found is not None:
            return found
    return None


def series_pattern(name: str) -> str | None:
    """The name with its time (else its last run of digits) replaced by ``*``: the files of one
    series share it (``scrape-*.txt``). None when the name has neither."""
    path = PurePosixPath(name)
    stem = path.name
    found = time_in_name(stem, None)
    if found is not None:
        start, end = found.span
    else:
        digits = list(re.finditer(r"\d+", stem))
        if not digits:
            return None
        start, end = digits[-1].span()
    pattern = stem[:start] + "*" + stem[end:]
    return str(path.with_name(pattern))


def _epoch(name: str) -> NameTime | None:
    for match in _EPOCH.finditer(name):
        text = match.group(1)
        if "." in text or len(text) == 10:
            seconds = float(text)
        else:
            seconds = int(text) / 10 ** (len(text) - 10)
        if _EPOCH_RANGE[0] <= seconds < _EPOCH_RANGE[1]:
            whole = int(seconds)
            micros = round((seconds - whole) * 1_000_000)
            when = datetime.fromtimestamp(whole, UTC) + timedelta(microseconds=micros)
            unit = {10: "seconds", 13: "milliseconds", 16: "microseconds", 19: "nanoseconds"}
            form = f"epoch {unit.get(len(text.split('.')[0]), 'seconds')}"
            return NameTime(when, form, match.span(1))
    return None


def _iso(name: str, tz: str | None) -> NameTime | None:
    for match in _ISO.finditer(name):
        *fields, frac, zone = match.groups()
        naive = _naive(fields)
        if naive is None:
            continue
        if not _FIRST_YEAR <= naive.year <= _LAST_YEAR:
            continue
        naive += timedelta(microseconds=int((frac or "0").ljust(6, "0")[:6]))
        if zone is not None:
            return NameTime(_with_offset(naive, zone), "ISO 8601 with its zone", match.span())
        return _local(naive, tz, "ISO 8601 without a zone", match.span())
    return None


def _compact(name: str, tz: str | None) -> NameTime | None:
    for match in _COMPACT.finditer(name):
        naive = _naive(list(match.groups()))
        if naive is not None and _FIRST_YEAR <= naive.year <= _LAST_YEAR:
            return _local(naive, tz, "YYYYMMDD-HHMMSS", match.span())
    return None


def _naive(fields: list[str]) -> datetime | None:
    year, month, day, hour, minute, second = (int(f) for f in fields)
    try:
        return datetime(year, month, day, hour, minute, second)
    except ValueError:
        return None


def _with_offset(naive: datetime, zone: str) -> datetime:
    if zone == "Z":
        return naive.replace(tzinfo=UTC)
    digits = zone.replace(":", "")
    minutes = int(digits[1:3]) * 60 + int(digits[3:5])
    sign = -1 if digits[0] == "-" else 1
    return naive.replace(tzinfo=UTC) - timedelta(minutes=sign * minutes)


def _local(naive: datetime, tz: str | None, form: str, span: tuple[int, int]) -> NameTime:
    zone = ZoneInfo(tz) if tz is not None else UTC
    return NameTime(naive.replace(tzinfo=zone).astimezone(UTC), form, span, tz is None)
