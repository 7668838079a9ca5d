"""What each source could and could not be read for: partial data is normal, never silent.

A :class:`SourceDiagnostics` travels from the parser (or collector segment reader) into the
manifest and from there into the report's "data gaps" section. An example of a skipped line is
kept only when it names no prompt, input, output or text key (``collectors.redact``), and
shortened.

A reader of a report needs two lists: **assumptions** (how something was read: the clock and
zone, bases inferred for request starts and ends, conventions such as units) and **gaps** (what
is missing: skipped lines, holes in a series, a series or a table not present, values left out).
:data:`ASSUMPTION_KINDS` sorts the analysis' gap kinds; a parser says which of its notes tell of
data left out (``SourceDiagnostics.note(text, lost=True)``).

How a source's times were placed is shown as one sentence. Ingest records each source's clock
as keys (:attr:`SourceDiagnostics.clock`); the analysis and every report format show it as a
sentence (:func:`source_clock_sentence`): "times from the kubectl/docker timestamps, which state
their zone; year from the same timestamps" or "read as UTC because the log states no zone (pass
--tz ZONE)".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from collectors.redact import has_text_key
from oomtrace.schema import ROW_NAMES

EXAMPLE_CHARS = 160
# The remedies a parser's note of a guessed zone or year names (and how such a note is found).
ZONE_REMEDY: Final = "--tz"
YEAR_REMEDY: Final = "--year"
# How many pieces of evidence a clock sentence quotes (the manifest keeps them all).
EVIDENCE_SHOWN: Final = 3
WITHHELD = "<withheld: the line may hold prompt or output text>"


# What a diagnostic tells a reader: how something was read, or that data is missing.
Category = Literal["assumption", "gap"]


@dataclass
class Skip:
    """Lines skipped for one reason: how many, and the first one (redacted, shortened)."""

    count: int
    example: str

    def to_json(self) -> dict[str, Any]:
        return {"count": self.count, "example": self.example}


@dataclass
class SourceDiagnostics:
    """Counts and notes for one input (a file, a collector segment set, a query export)."""

    name: str
    parser: str
    node: str
    lines_read: int = 0
    lines_recognised: int = 0
    skipped: dict[str, Skip] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # The notes that say data was left out (the rest say how something was read).
    lost: list[str] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)
    first_ts: str | None = None
    last_ts: str | None = None
    # How this source's times were placed: ``tz``, ``tz_assumed``, ``tz_source`` (``option``,
    # ``default`` or what stated the times), ``year``/``year_source`` where the year was chosen.
    clock: dict[str, Any] = field(default_factory=dict)

    def skip(self, reason: str, count: int, example: str | None) -> None:
        """Record ``count`` lines skipped for ``reason``; keeps the first example seen."""
        if count <= 0:
            return
        if reason in self.skipped:
            self.skipped[reason].count += count
        else:  # only the first example is kept, so only it is looked at
            self.skipped[reason] = Skip(count, _example(example or ""))

    def note(self, text: str, *, lost: bool = False) -> None:
        """An assumption or caveat a reader of the report must know (kept once). ``lost``: the
        note says that data was left out (a gap), not how something was read (an assumption)."""
        if text not in self.notes:
            self.notes.append(text)
        if lost and text not in self.lost:
            self.lost.append(text)

    def drop_notes(self, containing: str) -> None:
        """Withdraw the notes that contain ``containing`` (a guess settled later: a parser's note
        of an assumed zone or year names its remedy, :data:`ZONE_REMEDY` or
        :data:`YEAR_REMEDY`, and alignment withdraws it once the overlap with another input
        settled it)."""
        self.notes = [n for n in self.notes if containing not in n]
        self.lost = [n for n in self.lost if containing not in n]

    def category(self, note: str) -> Category:
        """Whether one of :attr:`notes` tells of data left out (``gap``) or of how the source
        was read (``assumption``)."""
        return "gap" if note in self.lost else "assumption"

    def rows_text(self) -> str:
        """The rows this source gave, per table ("6 events, 592 request events, 377 samples")."""
        counts = sorted((t, n) for t, n in self.rows.items() if n)
        return ", ".join(f"{n:,} {ROW_NAMES.get(t, t)}" for t, n in counts) or "no rows"

    @property
    def lines_skipped(self) -> int:
        return sum(s.count for s in self.skipped.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "parser": self.parser,
            "node": self.node,
            "lines_read": self.lines_read,
            "lines_recognised": self.lines_recognised,
            "lines_skipped": self.lines_skipped,
            "skipped": {k: v.to_json() for k, v in sorted(self.skipped.items())},
            "notes": list(self.notes),
            "lost": list(self.lost),
            "rows": dict(sorted(self.rows.items())),
            "first_ts": self.first_ts,
            "last_ts": self.last_ts,
            "clock": dict(sorted(self.clock.items())),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SourceDiagnostics:
        return cls(
            name=data["name"],
            parser=data["parser"],
            node=data["node"],
            lines_read=int(data.get("lines_read", 0)),
            lines_recognised=int(data.get("lines_recognised", 0)),
            skipped={
                k: Skip(int(v["count"]), str(v["example"]))
                for k, v in data.get("skipped", {}).items()
            },
            notes=list(data.get("notes", [])),
            lost=list(data.get("lost", [])),
            rows={k: int(v) for k, v in data.get("rows", {}).items()},
            first_ts=data.get("first_ts"),
            last_ts=data.get("last_ts"),
            clock=dict(data.get("clock", {})),
        )


def _example(line: str) -> str:
    """``line`` as an example, shortened; withheld whole when it names a prompt, input, output or
    text key: redacted, it would still show where a prompt was, and a line can fool redaction."""
    return WITHHELD if has_text_key(line) else _shorten(line)


def _shorten(text: str) -> str:
    text = text.rstrip("\r\n")
    return text if len(text) <= EXAMPLE_CHARS else text[: EXAMPLE_CHARS - 1] + "…"


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
    status = clock.get("status")
    if status in ("unaligned", "untimed", "anchored"):
        return _set_apart(clock, str(status))
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
    elif zone and tz_source == "aligned":
        parts.append(_aligned_zone(clock))
    elif zone and tz_source:
        parts.append(f"times from the {tz_source}, which state their zone")
    year_source = clock.get("year_source")
    if year and year_source:
        parts.append(_year(clock, str(year_source), tz_source))
    elif year and clock.get("year") is not None:  # a record written before year_source
        parts.append(f"year {clock['year']}")
    if status == "aligned" and parts:
        parts.append(_agreement(clock))
    return "; ".join(parts)


def _with(clock: Mapping[str, Any]) -> str:
    names = [str(n) for n in clock.get("aligned_with") or []]
    return ", ".join(names) or "the other inputs"


def _aligned_zone(clock: Mapping[str, Any]) -> str:
    offset = clock.get("utc_offset", "+00:00")
    if clock.get("tz_assumed"):
        return (
            f"printed times {offset} from those of {_with(clock)}, inferred from the overlap; "
            "that input's zone is itself assumed UTC (pass --tz ZONE)"
        )
    return f"printed times at UTC{offset}, inferred from {_with(clock)}"


def _agreement(clock: Mapping[str, Any]) -> str:
    evidence = [str(e) for e in clock.get("evidence") or []]
    shown = "; ".join(evidence[:EVIDENCE_SHOWN])
    more = len(evidence) - EVIDENCE_SHOWN
    if more > 0:
        shown += f"; {more} more in the manifest"
    runner = clock.get("runner_up")
    against = f"; the next best candidate, {runner}" if runner else ""
    return (
        f"{clock.get('agreement', 'weak')} agreement (score {clock.get('score', 0):.2f}"
        f"{against}): {shown}"
    )


def _set_apart(clock: Mapping[str, Any], status: str) -> str:
    if status == "unaligned":
        return (
            f"not aligned with {_with(clock)}: {clock.get('reason', 'no overlap')}; its rows "
            f"are kept but not joined in time ({clock.get('remedy', 'pass --year / --tz')})"
        )
    anchors = [str(a) for a in clock.get("anchors") or []]
    placed = "; ".join(anchors[:EVIDENCE_SHOWN])
    if status == "anchored":
        return f"the log prints no time; its rows are placed by anchors: {placed}"
    untimed = clock.get("untimed_rows", 0)
    text = f"the log prints no time; {untimed:,} of its rows stay un-timed ({clock.get('reason')})"
    return text + (f"; anchored: {placed}" if placed else "")


def clock_warning(source: SourceDiagnostics) -> str | None:
    """One line for the top of ``ingest``, ``analyze`` and ``report`` when a source's rows are
    set aside from the timeline (unaligned, or without a time), with the remedy; else None."""
    clock = source.clock
    status = clock.get("status")
    name = source.name
    if status == "unaligned":
        return (
            f"{name}: not aligned in time with {_with(clock)} ({clock.get('reason')}); its "
            f"rows are kept but left out of the timeline: {clock.get('remedy')}"
        )
    if status == "untimed":
        return (
            f"{name}: prints no time and {clock.get('untimed_rows', 0):,} of its rows could not "
            f"be anchored to another input ({clock.get('reason')}); they are kept un-timed and "
            "left out of the timeline: add the incident's nvidia-smi or NVML samples, or a log "
            "with times"
        )
    return None


def _year(clock: Mapping[str, Any], source: str, tz_source: object) -> str:
    value = clock.get("year")
    which = f"year {value}" if value is not None else "year"
    if "year_last" in clock and clock["year_last"] != value:
        which += f" (to {clock['year_last']})"
    if source == "option":
        return f"{which} from --year"
    if source == "aligned":
        return f"{which} inferred from {_with(clock)}"
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
