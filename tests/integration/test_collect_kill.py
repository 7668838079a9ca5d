"""A collector process SIGKILLed at random moments, twenty times: every scrape it had flushed
before each kill is read back intact, and the log it followed is captured exactly once."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from collectors.segments import read_capture
from tests.unit.collectors.factories import Reply, metrics_server, vllm_metrics, wait_until

KILLS = 20
FLUSH_S = 0.1
# A scrape served this long before a kill must be on disk: the flush interval plus generous
# room for a loaded two-core machine to schedule the flusher thread.
SETTLED_S = FLUSH_S + 0.4


def agent(url: str, log: Path, out: Path, *extra: str) -> subprocess.Popen[bytes]:
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
        f"{int(FLUSH_S * 1000)}ms",
        *extra,
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

    runs: list[tuple[float, float]] = []
    writer = threading.Thread(target=engine)
    writer.start()
    try:
        with metrics_server(reply) as server:
            for _ in range(KILLS):
                before = len(server.served)
                started = time.monotonic()
                process = agent(server.url, log, out)
                assert wait_until(lambda: len(server.served) > before + 2, timeout_s=10.0)  # noqa: B023
                time.sleep(rng.uniform(0.3, 1.0))
                killed = time.monotonic()
                os.kill(process.pid, signal.SIGKILL)
                process.wait()
                runs.append((started, killed))
            served = list(server.served)
            stop.set()
            writer.join()
            # a last, clean run picks up the log lines written while nothing was running
            final = agent(server.url, log, out, "--duration", "1s")
            assert final.wait(timeout=20) == 0
    finally:
        stop.set()
        writer.join()

    capture = read_capture(out)
    # THEN nothing is damaged: at most one torn tail per kill, no corrupt record
    kinds = [d.kind for d in capture.diagnostics]
    assert set(kinds) <= {"torn_tail"}
    assert len(kinds) <= KILLS
    # every scrape served well before a kill was flushed and reads back with its value
    scrapes = capture.prometheus[server.url]
    running = {
        int(float(line.rsplit(" ", 1)[1]))
        for text, info in zip(scrapes.text, scrapes.info, strict=True)
        if not info
        for line in text.splitlines()
        if line.startswith("vllm:num_requests_running{")
    }
    settled = [
        s for s in served if any(start <= s.monotonic < kill - SETTLED_S for start, kill in runs)
    ]
    assert len(settled) > KILLS * 5
    # a scrape the agent could not complete is a recorded gap, never a silent loss
    failed = [
        (g.start_ns, g.end_ns if g.end_ns is not None else 2**63)
        for g in capture.gaps
        if g.source != "collector"
    ]
    lost = [
        (s.n, s.wall_ns)
        for s in settled
        if s.n not in running and not any(a <= s.wall_ns <= b for a, b in failed)
    ]
    assert lost == [], (capture.gaps, capture.diagnostics)
    # the log was followed across every restart: each line once, in order
    lines = capture.logs[str(log)].text
    assert [int(line.rsplit(" ", 1)[1]) for line in lines] == written
    # and the capture says when the collector was not running, and that it was killed
    down = [g for g in capture.gaps if g.source == "collector"]
    assert len(down) == KILLS
    assert all("killed or crashed" in g.reason for g in down)
