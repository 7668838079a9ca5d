"""The agent against a real loopback HTTP server: metrics that change over time, and an endpoint
that fails every way it can while the agent keeps running and other sources keep their pace."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path

from collectors.agent import Agent
from collectors.config import build_config
from collectors.segments import read_capture
from tests.unit.collectors.factories import Reply, metrics_server, vllm_metrics


def kv_values(texts: list[str]) -> list[float]:
    return [
        float(line.rsplit(" ", 1)[1])
        for text in texts
        for line in text.splitlines()
        if line.startswith("vllm:kv_cache_usage_perc{")
    ]


def test_scrapes_follow_the_metrics_as_they_change(tmp_path: Path) -> None:
    # GIVEN a server whose KV usage grows by 1 % per request
    def reply(n: int) -> Reply:
        return Reply(body=vllm_metrics(kv=n / 100, running=n).encode())

    with metrics_server(reply) as server:
        config = build_config(
            out=str(tmp_path),
            prometheus=[server.url],
            prometheus_interval="20ms",
            flush_interval="50ms",
        )
        agent = Agent(config)
        # WHEN the agent runs for a while
        agent.start()
        time.sleep(0.6)
        agent.stop()
        served = list(server.served)
    # THEN every scrape is there, in order, with the value served at that time
    scrapes = read_capture(tmp_path).prometheus[server.url]
    texts = [t for t, info in zip(scrapes.text, scrapes.info, strict=True) if not info]
    times = [t for t, info in zip(scrapes.ts_ns, scrapes.info, strict=True) if not info]
    assert kv_values(texts) == [s.n / 100 for s in served]
    assert times == sorted(times)
    for ts, served_one in zip(times, served, strict=True):
        assert ts <= served_one.wall_ns < ts + 1_000_000_000  # stamped when the scrape started
    assert len(served) >= 15


def test_a_misbehaving_endpoint_is_a_gap_per_failure_and_never_stops_the_agent(
    tmp_path: Path,
) -> None:
    # GIVEN an endpoint that is fine, then returns 500, garbage, stalls, sends too much, then
    # recovers; and a log that an engine appends to every 20 ms meanwhile
    phases = [
        Reply(body=vllm_metrics(kv=0.1).encode()),
        Reply(status=500, body=b"Internal Server Error"),
        Reply(body=b"<html><body>502 Bad Gateway</body></html>"),
        Reply(body=vllm_metrics().encode(), delay_s=0.4),
        Reply(body=b"x" * 200_000),
        Reply(body=vllm_metrics(kv=0.2).encode()),
    ]
    started = time.monotonic()

    def reply(n: int) -> Reply:
        return phases[min(int((time.monotonic() - started) / 0.4), len(phases) - 1)]

    log = tmp_path / "engine.log"
    log.write_text("")
    written: list[tuple[int, str]] = []
    stop_writing = threading.Event()

    def engine() -> None:
        for i in range(1000):
            if stop_writing.wait(0.02):
                return
            with log.open("a") as f:
                f.write(f"line {i}\n")
            written.append((time.time_ns(), f"line {i}"))

    writer_thread = threading.Thread(target=engine)
    with metrics_server(reply) as server:
        config = build_config(
            out=str(tmp_path / "capture"),
            prometheus=[server.url],
            logs=[str(log)],
            prometheus_interval="20ms",
            log_interval="20ms",
            timeout="150ms",
            max_response="100KiB",
            flush_interval="50ms",
        )
        agent = Agent(dataclasses.replace(config, max_backoff_s=0.05))
        agent.start()
        writer_thread.start()
        time.sleep(2.8)
        stop_writing.set()
        writer_thread.join()
        time.sleep(0.1)
        summary = agent.stop()
    capture = read_capture(tmp_path / "capture")
    # THEN each kind of failure is a gap with its reason, and the agent recovered
    reasons = [g.reason for g in capture.gaps if g.source == "collector.prometheus"]
    assert "FetchError: HTTP 500 Internal Server Error" in reasons
    assert "FetchError: response is not Prometheus text exposition" in reasons
    assert "FetchError: no complete response within 0.15 s" in reasons
    assert "FetchError: response of 200000 bytes is over the 102400 byte cap" in reasons
    assert all(g.end_ns is not None for g in capture.gaps)
    assert kv_values(capture.prometheus[server.url].text)[-1] == 0.2
    (prom,) = [s for s in summary.sources if s.name == "collector.prometheus"]
    assert prom.errors >= 4
    # AND the log kept its pace: every line captured, each within 300 ms of being written
    lines = capture.logs[str(log)]
    arrival = dict(zip(lines.text, lines.ts_ns, strict=True))
    assert [text for _, text in written] == lines.text
    late = [(text, (arrival[text] - ts) / 1e6) for ts, text in written if arrival[text] - ts > 3e8]
    assert late == []


def test_an_endpoint_that_is_down_is_a_gap_until_the_end(tmp_path: Path) -> None:
    config = build_config(
        out=str(tmp_path),
        prometheus=["http://127.0.0.1:9/metrics"],
        prometheus_interval="20ms",
        duration="300ms",
    )
    Agent(config).run(handle_signals=False)
    (gap,) = read_capture(tmp_path).gaps
    assert gap.reason.startswith("FetchError: ConnectionRefusedError")
    assert gap.end_ns is not None  # closed when the agent stopped
