"""What each source could and could not be read for: partial data is normal, never silent.

A :class:`SourceDiagnostics` travels from the parser (or collector segment reader) into the
manifest and from there into the report's "data gaps" section. Examples of skipped lines are
redacted (no prompt or output text) and shortened before they are kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from collectors.redact import redact_line
from oomtrace.schema import ROW_NAMES

EXAMPLE_CHARS = 160


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
        else:  # only the first example is kept, so only it is redacted
            self.skipped[reason] = Skip(count, _shorten(redact_line(example or "")))

    def note(self, text: str, *, lost: bool = False) -> None:
        """An assumption or caveat a reader of the report must know (kept once). ``lost``: the
        note says that data was left out (a gap), not how something was read (an assumption)."""
        if text not in self.notes:
            self.notes.append(text)
        if lost and text not in self.lost:
            self.lost.append(text)

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


def _shorten(text: str) -> str:
    text = text.rstrip("\r\n")
    return text if len(text) <= EXAMPLE_CHARS else text[: EXAMPLE_CHARS - 1] + "…"
