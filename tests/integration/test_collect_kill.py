"""A collector process SIGKILLed at random moments, twenty times: every scrape on disk before a
kill is read back intact after it, and the log it followed is captured exactly once.

No wall-clock margin decides what must have survived: before each kill the test reads what is on
disk, and a scrape counts as flushed when it, or a scrape served after it, was there."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from collectors.reader import CaptureReadResult
from collectors.segments import read_capture
from tests.unit.collectors.factories import (
    Reply,
    killed_at_exit,
    metrics_server,
    vllm_metrics,
    wait_for_capture,
)
from tests.waiting import HANG_S, wait_until

KILLS = 20
# scrapes of a run seen on disk before its kill is chosen (at least), and then up to this many
# more served before the kill: the kill lands anywhere in the run's scrape and flush cycle
FLUSHED_FIRST = 5
MORE_AT_MOST = 25


def running(capture: CaptureReadResult, url: str) -> set[int]:
    """The scrapes on disk, by the number each one was served under (its running count)."""
    scrapes = capture.prometheus.get(url)
    if scrapes is None:
        return set()
    return {
        int(float(line.rsplit(" ", 1)[1]))
        for text, info in zip(scrapes.text, scrapes.info, strict=True)
        if not info
        for line in text.splitlines()
        if line.startswith("vllm:num_requests_running{")
    }


def agent(url: str, log: Path, out: Path) -> subprocess.Popen[bytes]:
    command = [
        sys.executable,
        "-m",
        "collectors",
        "--prometheus",
        url,
        "--log",
        str(log),
        "--out",
        str(out),
        "--prometheus-interval",
        "20ms",
        "--log-interval",
        "20ms",
        "--flush-interval",
        "100ms",
        # never give up on a scrape: one given up on is served after the agent moved on, and the
        # server's order of scrapes would no longer be the agent's
        "--timeout",
        f"{HANG_S:g}s",
    ]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@pytest.mark.slow
def test_every_flushed_sample_survives_repeated_sigkills(tmp_path: Path) -> None:
    rng = random.Random(20250314)
    out, log = tmp_path / "capture", tmp_path / "vllm.log"
    log.write_text("")
    written: list[int] = []
    stop = threading.Event()

    def engine() -> None:
        i = 0
        while not stop.wait(0.01):
            with log.open("a") as f:
                f.write(f"INFO 03-11 06:18:50 [loggers.py:1] line {i}\n")
            written.append(i)
            i += 1

    def reply(n: int) -> Reply:
        return Reply(body=vllm_metrics(running=n).encode())

    # per run: the number of its first scrape, and its scrapes on disk just before its kill
    firsts: list[int] = []
    on_disk: list[set[int]] = []
    writer = threading.Thread(target=engine)
    writer.start()
    try:
        with metrics_server(reply) as server:
            url = server.url
            for _ in range(KILLS):
                first = len(server.served) + 1

                def this_run(capture: CaptureReadResult) -> set[int]:
                    return {n for n in running(capture, url) if n >= first}  # noqa: B023

                with killed_at_exit(agent(url, log, out)) as process:
                    # WHEN the run has flushed a few scrapes, and a random number more are served
                    wait_for_capture(out, lambda c: len(this_run(c)) >= FLUSHED_FIRST)
                    more = len(server.served) + rng.randrange(MORE_AT_MOST + 1)
                    assert wait_until(lambda: len(server.served) >= more)  # noqa: B023
                    on_disk.append(this_run(read_capture(out)))
                    os.kill(process.pid, signal.SIGKILL)
                firsts.append(first)
            served = list(server.served)
            stop.set()
            writer.join()
            # a last, clean run picks up the log lines written while nothing was running, and
            # is stopped once they are all on disk
            with killed_at_exit(agent(url, log, out)) as final:
                wait_for_capture(out, lambda c: len(c.logs[str(log)].text) == len(written))
                final.send_signal(signal.SIGTERM)
                assert final.wait(timeout=HANG_S) == 0
    finally:
        stop.set()
        writer.join()

    capture = read_capture(out)
    # THEN nothing is damaged: at most one torn tail per kill, no corrupt record
    kinds = [d.kind for d in capture.diagnostics]
    assert set(kinds) <= {"torn_tail"}
    assert len(kinds) <= KILLS
    # every scrape on disk before a kill reads back after it, with its value
    kept = running(capture, url)
    assert set().union(*on_disk) <= kept
    # and so does every scrape of a run served before one of its scrapes that was on disk
    # (scrapes are written in the order they are served), unless the agent could not complete
    # it: a recorded gap, never a silent loss. A run's scrapes are those on its connections: a
    # request that a killed agent had sent can reach the server after the next run started.
    port = {s.n: s.client_port for s in served}
    runs = [
        (first, max(disk), {port[n] for n in disk})
        for first, disk in zip(firsts, on_disk, strict=True)
    ]
    flushed = [
        s
        for first, last, ports in runs
        for s in served
        if first <= s.n <= last and s.client_port in ports
    ]
    assert len(flushed) >= KILLS * FLUSHED_FIRST
    failed = [
        (g.start_ns, g.end_ns if g.end_ns is not None else 2**63)
        for g in capture.gaps
        if g.source != "collector"
    ]
    lost = [
        (s.n, s.wall_ns)
        for s in flushed
        if s.n not in kept and not any(a <= s.wall_ns <= b for a, b in failed)
    ]
    assert lost == [], (capture.gaps, capture.diagnostics)
    # the log was followed across every restart: each line once, in order
    lines = capture.logs[str(log)].text
    assert [int(line.rsplit(" ", 1)[1]) for line in lines] == written
    # and the capture says when the collector was not running, and that it was killed
    down = [g for g in capture.gaps if g.source == "collector"]
    assert len(down) == KILLS
    assert all("killed or crashed" in g.reason for g in down)
