"""What was assumed while reading the inputs, told apart from what could not be seen.

A reader of a report needs two lists: **assumptions** (how something was read: the clock and
zone, bases inferred for request starts and ends, conventions such as units) and **gaps** (what
is missing: skipped lines, holes in a series, a series or a table not present, values left out).
:data:`ASSUMPTION_KINDS` sorts the analysis' gap kinds; a parser says which of its notes tell of
data left out (``SourceDiagnostics.note(text, lost=True)``).

How a source's times were placed is shown as one sentence. Ingest records each source's clock
as keys (``SourceDiagnostics.clock``, normalised by :func:`oomtrace.ingest.source_clock`); the
analysis and every report format show it as a sentence: "times from the kubectl/docker
timestamps, which state their zone; year from the same timestamps" or "read as UTC because the
log states no zone (pass --tz ZONE)".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from oomtrace.diagnostics import Category, SourceDiagnostics
from oomtrace.trace import Manifest

__all__ = [
    "ASSUMPTION_KINDS",
    "Category",
    "clock_sentence",
    "kind_category",
    "source_clock_sentence",
    "trace_clock_sentence",
]

# The analysis' gap kinds that say how something was read, not that something is missing
# (``left_out`` is a parser's note of data left out; ``note`` any other of its notes).
ASSUMPTION_KINDS: Final = frozenset({"clock", "note", "no_admission", "no_end"})


def kind_category(kind: str) -> Category:
    """``assumption`` or ``gap`` for an analysis gap of ``kind``."""
    return "assumption" if kind in ASSUMPTION_KINDS else "gap"


# Sources of a year that are a guess, with the words for them.
_YEAR_GUESSED: Final = {
    "mtime": "the file's modification time",
    "current date": "the current date",
}


def clock_sentence(clock: Mapping[str, Any], *, zone: bool = True, year: bool = True) -> str:
    """The clock record as a sentence ("" when it says nothing). ``zone`` / ``year`` False leave
    that half out (a note of the parser already says it)."""
    parts = []
    tz, tz_source = clock.get("tz"), clock.get("tz_source")
    if tz_source is None and "tz_assumed" in clock:  # a record written before tz_source
        tz_source = "default" if clock["tz_assumed"] else "the log"
    if zone and tz_source == "default":
        parts.append("read as UTC because the log states no zone (pass --tz ZONE)")
    elif zone and tz_source == "option":
        parts.append(f"local times read in {tz} (--tz)")
    elif zone and tz_source == "the log":
        parts.append(f"times read in {tz}")
    elif zone and tz_source:
        parts.append(f"times from the {tz_source}, which state their zone")
    year_source = clock.get("year_source")
    if year and year_source:
        parts.append(_year(clock, str(year_source), tz_source))
    elif year and clock.get("year") is not None:  # a record written before year_source
        parts.append(f"year {clock['year']}")
    return "; ".join(parts)


def _year(clock: Mapping[str, Any], source: str, tz_source: object) -> str:
    value = clock.get("year")
    which = f"year {value}" if value is not None else "year"
    if "year_last" in clock and clock["year_last"] != value:
        which += f" (to {clock['year_last']})"
    if source == "option":
        return f"{which} from --year"
    if source in _YEAR_GUESSED:
        return f"{which} from {_YEAR_GUESSED[source]} (pass --year if wrong)"
    if source == tz_source:
        return f"{which} from the same timestamps"
    return f"{which} from the {source}"


def source_clock_sentence(source: SourceDiagnostics) -> str:
    """The sentence for one source, leaving out what one of its own notes already says: a
    parser that assumed the zone or guessed the year writes a specific note naming the remedy
    (``--tz``, ``--year``), and the reader needs it once."""
    clock = source.clock
    zone_noted = any("--tz" in n for n in source.notes) and clock.get("tz_assumed") is True
    year_noted = clock.get("year_source") in _YEAR_GUESSED and any(
        "--year" in n for n in source.notes
    )
    return clock_sentence(clock, zone=not zone_noted, year=not year_noted)


def trace_clock_sentence(manifest: Manifest) -> str:
    """The clock of a trace written before each source kept its own (``Manifest.clock`` only),
    as one sentence; "" for a newer trace, whose sources each have theirs."""
    if not manifest.clock or any(s.clock for s in manifest.sources):
        return ""
    return clock_sentence(manifest.clock)
