"""What ``--format``, ``--node``, ``--year``, ``--tz`` and ``--max-input-size`` tell ingest: a
module of its own, so that a command can take the options without loading every parser
(:mod:`oomtrace.ingest.orchestrator` runs them)."""

from __future__ import annotations

from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from oomtrace.errors import UsageError
from oomtrace.ingest.parser_api import ClockOptions
from oomtrace.ingest.text.input_file import DEFAULT_MAX_INPUT_BYTES


@dataclass(frozen=True)
class IngestOptions:
    """``--format``, ``--node``, ``--year``, ``--tz``: the same for ingest, analyze, report."""

    format: str | None = None
    node: str | None = None
    year: int | None = None
    tz: str | None = None
    # ``--max-input-size``: what one input may hold once decompressed (bounds ingest's memory)
    max_input_bytes: int = DEFAULT_MAX_INPUT_BYTES

    def __post_init__(self) -> None:
        if self.tz is not None:
            try:
                ZoneInfo(self.tz)
            except (ZoneInfoNotFoundError, ValueError) as err:
                raise UsageError(
                    f"--tz {self.tz!r}: unknown time zone; use an IANA name such as "
                    "'Europe/Berlin', 'America/New_York' or 'UTC'"
                ) from err
        if self.year is not None and not 1970 <= self.year <= 2200:
            raise UsageError(f"--year {self.year}: out of range; give the four-digit year")
        if self.max_input_bytes <= 0:
            raise UsageError(f"--max-input-size {self.max_input_bytes}: give a positive size")

    @property
    def clock(self) -> ClockOptions:
        """What parsers are told about placing year-less or zone-less times."""
        return ClockOptions(year=self.year, tz=self.tz)
