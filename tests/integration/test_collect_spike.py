"""End to end through a real collector process: a spike planted in the served KV usage and a
burst of log lines are in the capture, at the right times; SIGTERM and SIGINT close cleanly.

"The right times" are bounded by events, never by margins: a scrape is stamped after the scrape
before it was served and before its own was, and a log line after it was written and before the
test saw it on disk."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
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


def start_agent(url: str, log: Path, out: Path) -> subprocess.Popen[str]:
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
        "50ms",
        "--log-interval",
        "50ms",
        "--timeout",  # never give up on a scrape: every one served is captured
        f"{HANG_S:g}s",
    ]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def gauge(text: str, name: str) -> float:
    (line,) = [ln for ln in text.splitlines() if ln.startswith(f"vllm:{name}{{")]
    return float(line.rsplit(" ", 1)[1])


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_a_planted_spike_and_log_burst_are_captured_at_their_times(
    tmp_path: Path, stop_signal: signal.Signals
) -> None:
    # GIVEN a server at 20 % KV usage (each reply numbered by its running count) and an engine
    # log with a few lines
    spiked = threading.Event()

    def reply(n: int) -> Reply:
        return Reply(body=vllm_metrics(kv=0.98 if spiked.is_set() else 0.2, running=n).encode())

    log, out = tmp_path / "vllm.log", tmp_path / "capture"
    log.write_text("INFO 03-11 06:18:40 [api_server.py:1] Started server process\n")
    with (
        metrics_server(reply) as server,
        killed_at_exit(start_agent(server.url, log, out)) as process,
    ):
        assert wait_until(lambda: len(server.served) >= 5)
        # WHEN usage jumps to 98 % and the engine logs a burst of 50 lines at the same moment
        spike_ns = time.time_ns()
        spiked.set()
        with log.open("a") as f:
            f.writelines(f"WARNING 03-11 06:18:50 [scheduler.py:1] burst {i}\n" for i in range(50))

        # AND the agent is stopped once a 98 % scrape and the whole burst are on disk
        def on_disk(capture: CaptureReadResult) -> bool:
            scrapes = capture.prometheus.get(server.url)
            lines = capture.logs.get(str(log))
            return (
                scrapes is not None
                and lines is not None
                and any(
                    gauge(text, "kv_cache_usage_perc") == 0.98
                    for text, info in zip(scrapes.text, scrapes.info, strict=True)
                    if not info
                )
                and sum(" burst " in text for text in lines.text) == 50
            )

        wait_for_capture(out, on_disk)
        seen_ns = time.time_ns()
        process.send_signal(stop_signal)
        _, stderr = process.communicate(timeout=HANG_S)
        served = list(server.served)
    # THEN the agent stopped cleanly, saying why
    assert process.returncode == 0
    assert f"stopped by {stop_signal.name}" in stderr
    capture = read_capture(out)
    assert all(s.closed_cleanly for s in capture.segments)
    assert capture.diagnostics == ()
    # AND every scrape is stamped when it started: before its reply was served, and after the
    # scrape before it got its own (where the agent completed that one)
    scrapes = capture.prometheus[server.url]
    values = [
        (ts, int(gauge(text, "num_requests_running")), gauge(text, "kv_cache_usage_perc"))
        for ts, text, info in zip(scrapes.ts_ns, scrapes.text, scrapes.info, strict=True)
        if not info
    ]
    completed = {n for _, n, _ in values}
    for ts, n, _ in values:
        assert ts <= served[n - 1].wall_ns
        if n - 1 in completed:
            assert served[n - 2].wall_ns <= ts
    # AND the values change once, at the spike
    first_high = next(ts for ts, _, value in values if value == 0.98)
    assert all(value == 0.2 for ts, _, value in values if ts < first_high)
    assert all(value == 0.98 for ts, _, value in values if ts >= first_high)
    # AND every burst line is stamped on arrival: after the burst was written, and before the
    # test saw it on disk
    lines = capture.logs[str(log)]
    burst = [ts for ts, text in zip(lines.ts_ns, lines.text, strict=True) if " burst " in text]
    assert len(burst) == 50
    assert all(spike_ns <= ts <= seen_ns for ts in burst)
