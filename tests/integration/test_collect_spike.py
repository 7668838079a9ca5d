"""End to end through a real collector process: a spike planted in the served KV usage and a
burst of log lines are in the capture, at the right times; SIGTERM and SIGINT close cleanly."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from collectors.segments import read_capture
from tests.unit.collectors.factories import Reply, metrics_server, vllm_metrics, wait_until

MS = 1_000_000


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
    ]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def kv(text: str) -> float:
    (line,) = [ln for ln in text.splitlines() if ln.startswith("vllm:kv_cache_usage_perc{")]
    return float(line.rsplit(" ", 1)[1])


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_a_planted_spike_and_log_burst_are_captured_at_their_times(
    tmp_path: Path, stop_signal: signal.Signals
) -> None:
    # GIVEN a server at 20 % KV usage and an engine log with a few lines
    spiked = threading.Event()

    def reply(n: int) -> Reply:
        return Reply(body=vllm_metrics(kv=0.98 if spiked.is_set() else 0.2).encode())

    log, out = tmp_path / "vllm.log", tmp_path / "capture"
    log.write_text("INFO 03-11 06:18:40 [api_server.py:1] Started server process\n")
    with metrics_server(reply) as server:
        process = start_agent(server.url, log, out)
        assert wait_until(lambda: len(server.served) >= 5, timeout_s=10.0)
        # WHEN usage jumps to 98 % and the engine logs a burst of 50 lines at the same moment
        spike_ns = time.time_ns()
        spiked.set()
        with log.open("a") as f:
            f.writelines(f"WARNING 03-11 06:18:50 [scheduler.py:1] burst {i}\n" for i in range(50))
        burst_end_ns = time.time_ns()
        time.sleep(0.5)
        process.send_signal(stop_signal)
        _, stderr = process.communicate(timeout=10)
    # THEN the agent stopped cleanly, saying why
    assert process.returncode == 0
    assert f"stopped by {stop_signal.name}" in stderr
    capture = read_capture(out)
    assert all(s.closed_cleanly for s in capture.segments)
    assert capture.diagnostics == ()
    # AND the first 98 % scrape started within one interval of the spike (it may have started
    # just before it, while the server was deciding its answer)
    scrapes = capture.prometheus[server.url]
    values = [
        (ts, kv(text))
        for ts, text, info in zip(scrapes.ts_ns, scrapes.text, scrapes.info, strict=True)
        if not info
    ]
    first_high = next(ts for ts, value in values if value == 0.98)
    assert -100 * MS < first_high - spike_ns < 400 * MS
    assert all(value == 0.2 for ts, value in values if ts < first_high)
    assert all(value == 0.98 for ts, value in values if ts >= first_high)
    # AND every burst line arrived between the burst and one log interval (plus slack) after it
    lines = capture.logs[str(log)]
    burst = [ts for ts, text in zip(lines.ts_ns, lines.text, strict=True) if " burst " in text]
    assert len(burst) == 50
    assert all(spike_ns <= ts <= burst_end_ns + 400 * MS for ts in burst)
