"""Sample fast, write slower, lose no peak.

A :class:`PeakTracker` sees every polled value of one series and decides when a record is due:
at most every ``write_interval_ns``, and only when something changed since the previous written
record or ``heartbeat_ns`` passed (an idle GPU with a preallocated KV pool reads the same bytes
for hours). Each written record carries the latest value and the largest value seen since the
previous written record, which includes that record's own latest value, so a peak shorter than
the write interval still reaches the disk.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Due:
    """What to write now: the latest polled value and the peak since the previous write."""

    value: int
    peak: int


class PeakTracker:
    def __init__(self, write_interval_ns: int, heartbeat_ns: int = 1_000_000_000) -> None:
        self._write_interval_ns = write_interval_ns
        self._heartbeat_ns = max(heartbeat_ns, write_interval_ns)
        self._peak: int | None = None
        self._latest: int | None = None
        self._written: Due | None = None
        self._written_at: int | None = None

    def observe(self, value: int) -> None:
        self._latest = value
        self._peak = value if self._peak is None else max(self._peak, value)

    def due(self, now_ns: int, *, extra_changed: bool = False, force: bool = False) -> Due | None:
        """The record to write at ``now_ns``, or None. Call once per poll, after observe.
        ``force`` writes now regardless of interval and change (a series' last record)."""
        if self._latest is None or self._peak is None:
            return None
        if force:
            extra_changed = True
        elif self._written_at is not None and now_ns - self._written_at < self._write_interval_ns:
            return None
        current = Due(self._latest, self._peak)
        heartbeat = self._written_at is None or now_ns - self._written_at >= self._heartbeat_ns
        if current == self._written and not heartbeat and not extra_changed:
            # Unchanged: the window keeps accumulating until something changes.
            return None
        self._written, self._written_at = current, now_ns
        # The next window starts from the level just written (the value at its start).
        self._peak = self._latest
        return current

    def forget(self) -> None:
        """Start again (the series vanished: a process exited, a device was lost)."""
        self._peak = self._latest = self._written = self._written_at = None
