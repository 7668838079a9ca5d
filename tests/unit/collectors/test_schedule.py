"""Source runners: failures become gaps with backoff, a slow source delays no other, missed
deadlines are counted, health is reported."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from collectors.schedule import HealthReporter, Schedule, SourceRunner, backoff_s
from tests.unit.collectors.factories import MemorySink
from tests.waiting import HANG_S, wait_until


class Scripted:
    """A source whose polls fail while ``failing`` is set, and, given ``held``, do not return
    until it is set (a source stuck in a poll)."""

    def __init__(self, name: str, *, held: threading.Event | None = None) -> None:
        self.name, self.target = name, f"target-{name}"
        self.held = held
        self.failing = False
        self.polls: list[float] = []
        self.closed = False

    def poll(self, now_ns: int) -> None:
        self.polls.append(time.monotonic())
        if self.held is not None:
            self.held.wait(HANG_S)
        if self.failing:
            raise ConnectionRefusedError("[Errno 111] Connection refused")

    def close(self) -> None:
        self.closed = True


@contextmanager
def running(*runners: SourceRunner, stop: threading.Event) -> Iterator[None]:
    for runner in runners:
        runner.start()
    try:
        yield
    finally:
        stop.set()
        for runner in runners:
            assert runner.join(HANG_S)


def test_a_failure_is_one_gap_that_ends_when_the_source_recovers() -> None:
    # GIVEN a source that fails for a while, then works again
    source, sink, stop = Scripted("prom"), MemorySink(), threading.Event()
    source.failing = True
    runner = SourceRunner(source, Schedule(0.01, max_backoff_s=0.05), sink, stop)
    with running(runner, stop=stop):
        assert wait_until(lambda: runner.errors >= 3)
        source.failing = False
        assert wait_until(lambda: runner.up)
    # THEN one gap opened at the first failure and closed at the recovery, with its reason
    opened, closed = sink.kind("gap")
    assert opened["end"] is None
    assert closed["ts"] == opened["ts"]
    assert closed["end"] > closed["ts"]
    assert closed["reason"] == "ConnectionRefusedError: [Errno 111] Connection refused"
    assert closed["attempts"] >= 3
    assert source.closed


def test_backoff_doubles_from_the_interval_up_to_its_cap() -> None:
    delays = [backoff_s(Schedule(0.02, max_backoff_s=1.0), n) for n in range(1, 7)]
    assert delays == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert backoff_s(Schedule(0.5, max_backoff_s=1.0), 1) == 0.5


def test_a_failing_source_is_retried_no_sooner_than_its_backoff() -> None:
    source, stop = Scripted("prom"), threading.Event()
    source.failing = True
    schedule = Schedule(0.02, max_backoff_s=10.0)
    runner = SourceRunner(source, schedule, MemorySink(), stop)
    with running(runner, stop=stop):
        assert wait_until(lambda: len(source.polls) >= 4)
    waits = [b - a for a, b in zip(source.polls, source.polls[1:], strict=False)][:3]
    # lower bounds only: a loaded machine can make a retry later, never sooner
    assert [w >= 0.95 * backoff_s(schedule, n) for n, w in enumerate(waits, start=1)] == [True] * 3


def test_a_slow_source_does_not_delay_another() -> None:
    # GIVEN a source stuck in its first poll beside one polled every 10 ms
    held = threading.Event()
    slow, fast = Scripted("slow", held=held), Scripted("fast")
    sink, stop = MemorySink(), threading.Event()
    runners = [SourceRunner(s, Schedule(0.01), sink, stop) for s in (slow, fast)]
    with running(*runners, stop=stop):
        # THEN the fast one keeps polling while the slow one is stuck
        assert wait_until(lambda: len(fast.polls) >= 25)
        assert len(slow.polls) == 1
        # AND once the slow one returns, it counts the slots it could not start on time: about
        # the 24 intervals that the fast one's 25 polls took at least
        held.set()
        assert wait_until(lambda: len(slow.polls) >= 2)
    assert runners[0].misses >= 20


def test_health_reports_every_runner_with_its_counters() -> None:
    source, sink, stop = Scripted("log"), MemorySink(), threading.Event()
    runner = SourceRunner(source, Schedule(0.01), sink, stop)
    health = HealthReporter([runner], sink, stop, interval_s=0.05)
    health.start()
    with running(runner, stop=stop):
        # two reports, the later after the runner's first sample (on a busy machine the reporter
        # can report twice before the runner's thread has polled once)
        assert wait_until(
            lambda: len(reports := sink.kind("health")) >= 2 and reports[-1]["samples"] > 0
        )
    health.join(HANG_S)
    last = sink.kind("health")[-1]
    assert (last["src"], last["target"], last["up"], last["errors"]) == ("log", "target-log", 1, 0)
    assert last["samples"] > 0


def test_a_source_is_polled_once_even_when_the_stop_came_before_its_thread_ran() -> None:
    # GIVEN a run already told to stop when its runner starts (a short --duration, a busy machine)
    source, sink, stop = Scripted("log"), MemorySink(), threading.Event()
    stop.set()
    runner = SourceRunner(source, Schedule(10.0), sink, stop)
    # WHEN the runner starts and ends
    runner.start()
    assert runner.join(HANG_S)
    # THEN the source was polled exactly once, then closed: the capture holds its first reading
    assert len(source.polls) == 1
    assert runner.samples == 1
    assert source.closed


class SimulatedTime(threading.Event):
    """A monotonic clock that moves only when the runner waits (by the time it waits) or a poll
    says it took time: the schedule's arithmetic, with no real time in it."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 1000.0
        self.waits = 0

    def monotonic(self) -> float:
        return self.now

    def wait(self, timeout: float | None = None) -> bool:
        self.waits += 1
        self.now += timeout or 0.0
        return self.waits >= 6  # the stop, after six waits


class Overrunning(Scripted):
    """Each poll takes ``took`` seconds of simulated time."""

    def __init__(self, clock: SimulatedTime, took: list[float]) -> None:
        super().__init__("overrun")
        self.clock, self.took = clock, took

    def poll(self, now_ns: int) -> None:
        self.polls.append(self.clock.now)
        self.clock.now += self.took.pop(0) if self.took else 0.0


def test_after_a_poll_overruns_its_slot_the_next_poll_starts_on_its_own_slot() -> None:
    # GIVEN a 10 ms schedule whose second poll takes 25 ms (past two slots)
    clock = SimulatedTime()
    source = Overrunning(clock, [0.001, 0.025])
    lateness: list[float] = []
    runner = SourceRunner(
        source,
        Schedule(0.01),
        MemorySink(),
        clock,
        on_tick=lateness.append,
        monotonic=clock.monotonic,
    )
    # WHEN it runs (on this thread: the simulated clock moves only when it waits)
    runner._run()
    # THEN every poll started on the 10 ms grid, none late, and the two slots the slow poll ran
    # into are counted as missed rather than polled late
    starts = [round((t - 1000.0) * 1000, 6) for t in source.polls]
    assert starts == [0.0, 10.0, 40.0, 50.0, 60.0, 70.0]
    assert [round(x, 9) for x in lateness] == [0.0] * 6
    assert runner.misses == 2
