"""Putting the inputs of one incident on one clock, before they are merged.

Each parser placed its input's times under its own assumptions. An input whose times carry a
zone and a year (Prometheus exports, kubectl/docker timestamps, a collector capture), or whose
zone and year were given (``--tz``, ``--year``), is ``stated``. An input whose zone or year was
assumed (a vLLM log's ``MM-DD HH:MM:SS``, SGLang's and nvidia-smi's zone-less local times,
journald's short form) is aligned to the stated ones: :mod:`.inference` chooses the years and
the zone offset at which its moments agree with theirs, :mod:`.shift` moves its rows and records
the choice with its evidence. When no input states its times, the one with the fewest
assumptions (then the most rows) is the reference, ``assumed``, and the others are aligned to it
(their zone then relative to its assumed one). An input aligned joins the reference for the
next; passes repeat while one more can be aligned.

An input that cannot be aligned (no overlap at any candidate, nothing seen by both, or
candidates that agree about equally) is ``unaligned``: its rows keep the times they were read
at, are flagged in the tables (``clock``) and stay out of the timeline, and the first lines of
``ingest``, ``analyze`` and ``report`` say so with the remedy
(:func:`oomtrace.diagnostics.clock_warning`). A log without times is anchored by
:mod:`.anchoring` to the joined inputs. A single input is left as its parser placed it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.ingest.alignment.anchoring import anchor, has_untimed
from oomtrace.ingest.alignment.inference import Candidate, Inference, infer
from oomtrace.ingest.alignment.moments import Moments, concat, moments_of
from oomtrace.ingest.alignment.shift import record_alignment, shift_result
from oomtrace.ingest.parser_api import ClockOptions, ParseResult
from oomtrace.ingest.text.input_file import InputFile
from oomtrace.ingest.text.timestamps import tz_hint
from oomtrace.ingest.trace_merge import Parsed, source_clock
from oomtrace.isotime import iso_time

log = logging.getLogger(__name__)

_GUESSED_YEAR = ("mtime", "current date")


@dataclass
class _Input:
    file: InputFile
    result: ParseResult
    diag: SourceDiagnostics
    year_free: bool
    zone_free: bool
    untimed: bool
    rows: int
    tz: str
    year: int | None
    _moments: Moments | None = field(default=None, repr=False)

    @property
    def short(self) -> str:
        return PurePath(self.file.name).name

    def words(self, candidate: Candidate) -> str:
        """``candidate`` as this input's year and offset."""
        year = self.year if self.year_free else None
        return candidate.text(assumed_year=year, zone=self.zone_free)

    @property
    def dims(self) -> int:
        return int(self.year_free) + int(self.zone_free)

    def moments(self) -> Moments:
        if self._moments is None:
            self._moments = moments_of(self.result, self.short)
        return self._moments

    def set(self, **values: Any) -> None:
        self.result.clock.update(values)


def align(parsed: list[Parsed], options: ClockOptions) -> None:
    """Align the inputs' times in place (their frames, clock records and notes)."""
    inputs = [_describe(item, options) for item in parsed]
    timed = [i for i in inputs if not i.untimed and i.rows]
    untimed = [i for i in inputs if i.untimed]
    fixed = [i for i in timed if not i.dims]
    free = sorted((i for i in timed if i.dims), key=lambda i: (i.dims, -i.rows))
    for item in fixed:
        item.set(status="stated")
    joined = list(fixed)
    if free and not fixed:
        free[0].set(status="assumed")
        joined.append(free.pop(0))
    if free:
        _align_free(free, joined, relative=not fixed)
    for item in untimed:
        ref = concat([i.moments() for i in joined]) if joined else None
        _anchor(item, ref, [i.short for i in joined])


def _describe(item: Parsed, options: ClockOptions) -> _Input:
    file, result, diag = item
    clock = source_clock(result.clock, options)
    rows = sum(f.height for f in (result.samples, result.requests, result.events) if f is not None)
    year_source = clock.get("year_source")
    return _Input(
        file,
        result,
        diag,
        year_free=year_source in _GUESSED_YEAR,
        # Where full times (kubectl/docker, the collector's arrival) placed the year, they placed
        # the lines too; the zone of the few printed-only ones is not the input's clock.
        zone_free=clock.get("tz_assumed") is True
        and year_source in (None, "option", *_GUESSED_YEAR),
        untimed=has_untimed(result),
        rows=rows,
        tz=_zone(clock.get("tz")),
        year=clock.get("year") if isinstance(clock.get("year"), int) else None,
    )


def _zone(tz: object) -> str:
    try:
        return str(ZoneInfo(str(tz))) if tz else "UTC"
    except (ZoneInfoNotFoundError, ValueError):
        return "UTC"


def _align_free(pending: list[_Input], joined: list[_Input], *, relative: bool) -> None:
    last: dict[int, Inference] = {}
    progress = True
    while pending and progress:
        progress = False
        for item in list(pending):
            ref = concat([i.moments() for i in joined])
            inference = infer(
                item.moments(), ref, year_free=item.year_free, zone_free=item.zone_free
            )
            last[id(item)] = inference
            if inference.chosen is None:
                continue
            _aligned(item, inference, relative)
            joined.append(item)
            pending.remove(item)
            progress = True
    for item in pending:
        _unaligned(item, last[id(item)], joined)


def _aligned(item: _Input, inference: Inference, relative: bool) -> None:
    chosen = inference.chosen
    assert chosen is not None
    shift_result(item.result, chosen, item.tz)
    item._moments = None
    record_alignment(
        item.result.clock,
        item.diag,
        chosen,
        year_free=item.year_free,
        zone_free=item.zone_free,
        relative=relative and item.zone_free,
    )
    runner = inference.runner_up
    item.set(
        status="aligned",
        aligned_with=sorted(inference.sources),
        agreement=inference.strength,
        score=round(inference.score, 2),
        runner_up=(
            f"{item.words(runner)}, scored {inference.runner_score:.2f}"
            if runner is not None
            else None
        ),
        evidence=list(inference.evidence),
    )
    log.info("%s aligned: %s", item.file.name, inference)


def _unaligned(item: _Input, inference: Inference, joined: list[_Input]) -> None:
    names = sorted({i.short for i in joined})
    remedy = [
        o for o, free in (("--year YEAR", item.year_free), ("--tz ZONE", item.zone_free)) if free
    ]
    # another input that states the host's offset in its zoned lines names the zone to pass
    offsets = {i.result.clock.get("stated_offset") for i in joined} - {None}
    hint = ""
    if item.zone_free and len(offsets) == 1:
        hint = tz_hint(next(iter(offsets)), f"the zoned lines of {', '.join(names)}")
    item.set(
        status="unaligned",
        aligned_with=names,
        reason=_reason(item, inference, joined),
        remedy=f"pass {' and/or '.join(remedy)} to place it{hint}",
        score=round(inference.score, 2),
        evidence=list(inference.evidence) or None,
    )


def _reason(item: _Input, inference: Inference, joined: list[_Input]) -> str:
    what = " or ".join(
        w for w, free in (("year", item.year_free), ("zone offset", item.zone_free)) if free
    )
    if inference.reason == "no_overlap":
        mine, ref = item.moments(), concat([i.moments() for i in joined])
        return (
            f"read from {iso_time(mine.first, 0)} to {iso_time(mine.last, 0)}, it overlaps their "
            f"{iso_time(ref.first, 0)} to {iso_time(ref.last, 0)} at no candidate {what}"
        )
    if inference.reason == "ambiguous" and inference.best and inference.runner_up:
        return (
            f"two candidates agree about equally ({item.words(inference.best)}, score "
            f"{inference.score:.2f}; {item.words(inference.runner_up)}, score "
            f"{inference.runner_score:.2f})"
        )
    n = inference.candidates
    return (
        f"nothing was seen by both at the {n} {what} candidate{'s' if n != 1 else ''} where "
        "their times overlap"
    )


def _anchor(item: _Input, ref: Moments | None, names: list[str]) -> None:
    done = anchor(item.result, ref, item.short)
    item.set(
        status="untimed" if done.untimed_rows else "anchored",
        aligned_with=sorted(set(names)),
        anchors=done.anchors,
        untimed_rows=done.untimed_rows,
        reason=done.reason if done.untimed_rows else None,
    )
