"""The stretch of time the report's charts cover: the incident, not the hours around it.

An incident has a moment (its peak or failure), the analysis window before it, the moment the
rise began, and the requests it names, which may have been resident for minutes. The charts
cover all of that with a margin on each side, kept inside the data the trace holds (an hour of
an idle log before the engine served anything is not drawn) but never so tight that the peak
sits on an edge. Without an incident the charts cover the whole trace.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from oomtrace.report.records import parse_time

# The least time drawn after the peak, and the share of the span kept on each side of it.
AFTER_PEAK: Final = timedelta(seconds=5)
MARGIN_SHARE: Final = 0.08


@dataclass(frozen=True)
class Span:
    """``[start, end]`` of the charts; ``focus`` the incident's moment (None: no incident)."""

    start: datetime
    end: datetime
    focus: datetime | None = None

    def contains(self, ts: datetime) -> bool:
        return self.start <= ts <= self.end


def incident_window(incident: Mapping[str, Any] | None) -> tuple[datetime, datetime] | None:
    """The analysis window: ``window_start`` (or ``start``) to the peak, with a tenth of it
    after the peak so the reader sees what happened next."""
    if incident is None:
        return None
    start = parse_time(incident.get("window_start")) or parse_time(incident.get("start"))
    peak = parse_time(incident.get("peak_ts"))
    if start is None or peak is None:
        return None
    end = peak
    margin = max((end - start) / 10, timedelta(seconds=1))
    return start, end + margin


EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


def epoch_ns(ts: datetime) -> int:
    """Nanoseconds since the epoch, exactly (a datetime holds microseconds)."""
    return (ts - EPOCH) // timedelta(microseconds=1) * 1000


# Classes whose story is the whole trace: an engine that never served (every restart refused)
# and memory that grew for hours.
WHOLE_TRACE: Final = frozenset({"startup_misfit", "leak"})


def chart_span(
    incident: Mapping[str, Any] | None,
    extent: tuple[datetime, datetime] | None,
    also: Sequence[datetime] = (),
) -> Span | None:
    """The span of the charts: from the earliest of the incident's start, its window start and
    ``also`` (when its culprits became resident, when another process appeared) to a little
    after its peak, kept inside ``extent`` (the first and last row of the trace). Without an
    incident, and for the classes of :data:`WHOLE_TRACE`, ``extent`` itself."""
    peak = parse_time((incident or {}).get("peak_ts"))
    if peak is None or (incident or {}).get("class") in WHOLE_TRACE:
        if extent is None:
            return None
        margin = (extent[1] - extent[0]) * MARGIN_SHARE / 4
        return Span(extent[0] - margin, extent[1] + margin, peak)
    starts = [
        t
        for t in (
            parse_time(incident.get("start")) if incident else None,
            parse_time(incident.get("window_start")) if incident else None,
            *also,
        )
        if t is not None and t <= peak
    ]
    first = min(starts, default=peak - timedelta(seconds=60))
    if extent is not None:
        first = max(first, extent[0])
    length = max(peak - first, timedelta(seconds=10))
    margin = length * MARGIN_SHARE
    start = first - margin
    end = peak + max(margin, AFTER_PEAK)
    if extent is not None:
        # keep to the data, but never let the peak touch an edge
        start = max(start, min(extent[0], peak - margin))
        end = min(end, max(extent[1], peak + margin))
    return Span(start, end, peak)
