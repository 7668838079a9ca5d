"""Run each source on its own thread and schedule, so a slow or failing source never delays
another. Failures become gap records and are retried with exponential backoff; every source's
counters (samples taken, errors, missed deadlines) are written as health records.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from collectors.format import Record

logger = logging.getLogger(__name__)


class Sink(Protocol):
    """Where records go (a :class:`collectors.writer.SegmentWriter`)."""

    def append(self, record: Record) -> bool: ...


class SegmentSink(Sink, Protocol):
    """A sink that knows about segments (see :class:`collectors.writer.SegmentWriter`)."""

    def append_keyed(self, key: str, full: Record, repeat: Record | None = None) -> None: ...

    def set_sticky(self, key: str, record: Record) -> None: ...


class Source(Protocol):
    """One thing the agent samples. ``poll`` appends its own records to the sink it was given
    and raises on failure (the runner turns that into a gap and backs off)."""

    name: str
    target: str

    def poll(self, now_ns: int) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Schedule:
    interval_s: float
    # Short: an engine that comes back must be sampled again within a second (its restart,
    # cache configuration and first scrapes are evidence), and a refused connection is cheap.
    max_backoff_s: float = 1.0


class SourceRunner:
    """The sampling loop of one source, on its own thread."""

    def __init__(
        self,
        source: Source,
        schedule: Schedule,
        sink: Sink,
        stop: threading.Event,
        *,
        clock_ns: Callable[[], int] = time.time_ns,
        on_tick: Callable[[float], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.source, self.schedule, self._sink, self._stop = source, schedule, sink, stop
        self._clock_ns, self._monotonic = clock_ns, monotonic
        self._on_tick = on_tick
        self.samples = self.errors = self.misses = 0
        self.last_error = ""  # the cause of the latest failed poll, for the agent's summary
        self.up = False
        self._failures = 0
        self._gap_start: int | None = None
        self._gap_reason = ""
        self._thread = threading.Thread(target=self._run, name=f"oomtrace-{source.name}")
        self._thread.daemon = True

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout_s: float) -> bool:
        """Wait for the loop to end; False when it did not within ``timeout_s``."""
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def health(self, now_ns: int) -> Record:
        return {
            "k": "health",
            "ts": now_ns,
            "src": self.source.name,
            "target": self.source.target,
            "up": 1 if self.up else 0,
            "samples": self.samples,
            "errors": self.errors,
            "misses": self.misses,
        }

    def _run(self) -> None:
        """Poll on a fixed grid of absolute deadlines (``interval_s`` apart, so no drift
        accumulates). A poll that ends after the next slot has begun (a slow engine, a starved
        thread) makes the slots passed misses, and the next poll waits for its own slot, as
        Prometheus' scrape loop does: every poll starts on the grid, at most the wake-up's
        latency late, instead of at a random point of the slot it overran into."""
        interval, monotonic = self.schedule.interval_s, self._monotonic
        due = monotonic()
        # Each source is polled at least once, even when the stop came before this thread ran
        # (a short --duration on a loaded machine): a capture holds every source's first reading.
        while True:
            if self._on_tick is not None:
                self._on_tick(monotonic() - due)
            if self._tick():
                due += interval
                now = monotonic()
                if now >= due:
                    skipped = int((now - due) // interval) + 1
                    self.misses += skipped
                    due += skipped * interval
            else:
                due = monotonic() + self._backoff_s()
            if self._stop.wait(max(0.0, due - monotonic())):
                break
        self._end_gap(self._clock_ns(), stopping=True)
        try:
            self.source.close()
        except Exception as err:  # noqa: BLE001 - closing must not stop the agent's shutdown
            logger.warning("closing %s failed: %s", self.source.name, err)

    def _tick(self) -> bool:
        now_ns = self._clock_ns()
        try:
            self.source.poll(now_ns)
        except Exception as err:  # noqa: BLE001 - any failure of a source is a gap, never a crash
            self.errors += 1
            self._failures += 1
            self.up = False
            self.last_error = _reason(err)
            self._start_gap(now_ns, self.last_error)
            return False
        self.samples += 1
        self.up = True
        self._end_gap(self._clock_ns(), stopping=False)
        self._failures = 0
        return True

    def _backoff_s(self) -> float:
        return backoff_s(self.schedule, self._failures)

    def _start_gap(self, now_ns: int, reason: str) -> None:
        if self._gap_start is not None:
            if reason == self._gap_reason:
                return
            # A different failure (500, then garbage, then a timeout): one gap per cause.
            self._sink.append(self._gap_record(now_ns))
        self._gap_start, self._gap_reason = now_ns, reason
        logger.warning("%s (%s) failed: %s; retrying", self.source.name, self.source.target, reason)
        self._sink.append(self._gap_record(None))

    def _end_gap(self, now_ns: int, *, stopping: bool) -> None:
        if self._gap_start is None:
            return
        if not stopping:
            logger.warning("%s (%s) recovered", self.source.name, self.source.target)
        self._sink.append(self._gap_record(now_ns))
        self._gap_start = None

    def _gap_record(self, end_ns: int | None) -> Record:
        return {
            "k": "gap",
            "ts": self._gap_start,
            "end": end_ns,
            "src": self.source.name,
            "target": self.source.target,
            "reason": self._gap_reason,
            "attempts": self._failures,
        }


def backoff_s(schedule: Schedule, failures: int) -> float:
    """Wait before the next attempt after ``failures`` failures in a row: the interval (at least
    0.1 s), doubling with every failure, at most ``max_backoff_s``."""
    backoff: float = max(schedule.interval_s, 0.1) * 2.0 ** (failures - 1)
    return min(schedule.max_backoff_s, backoff)


def _reason(err: Exception) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__


class HealthReporter:
    """Writes every runner's counters every ``interval_s`` on its own thread (so a source in a
    long backoff still reports that it is down)."""

    def __init__(
        self,
        runners: list[SourceRunner],
        sink: Sink,
        stop: threading.Event,
        interval_s: float = 1.0,
        clock_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        self._runners, self._sink, self._stop = runners, sink, stop
        self._interval_s, self._clock_ns = interval_s, clock_ns
        self._thread = threading.Thread(target=self._run, name="oomtrace-health")
        self._thread.daemon = True

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)

    def report(self) -> None:
        now = self._clock_ns()
        for runner in self._runners:
            self._sink.append(runner.health(now))

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.report()
