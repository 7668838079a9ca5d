"""The agent against a real loopback HTTP server: metrics that change over time, and an endpoint
that fails every way it can while the agent keeps running and other sources keep their pace."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from pathlib import Path

from collectors.agent import Agent
from collectors.config import build_config
from collectors.reader import CaptureReadResult
from collectors.segments import read_capture
from tests.unit.collectors.factories import Reply, metrics_server, vllm_metrics, wait_for_capture
from tests.waiting import HANG_S, wait_until


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
            timeout=f"{HANG_S:g}s",  # no scrape given up on: every one served is captured
        )
        agent = Agent(config)
        # WHEN the agent runs for fifteen scrapes
        agent.start()
        try:
            assert wait_until(lambda: len(server.served) >= 15)
        finally:
            agent.stop()
        served = list(server.served)
    # THEN every scrape is there, in order, with the value served at that time
    scrapes = read_capture(tmp_path).prometheus[server.url]
    texts = [t for t, info in zip(scrapes.text, scrapes.info, strict=True) if not info]
    times = [t for t, info in zip(scrapes.ts_ns, scrapes.info, strict=True) if not info]
    assert kv_values(texts) == [s.n / 100 for s in served]
    # stamped when the scrape started: before its reply was served, after the one before
    assert times == sorted(times)
    for ts, served_one in zip(times, served, strict=True):
        assert ts <= served_one.wall_ns
    for ts, previous in zip(times[1:], served, strict=False):
        assert previous.wall_ns <= ts


def test_a_misbehaving_endpoint_is_a_gap_per_failure_and_never_stops_the_agent(
    tmp_path: Path,
) -> None:
    # GIVEN an endpoint that is fine, then returns 500, garbage, stalls, sends too much, then
    # recovers, each until the agent has it on disk (the test moves it on); and a log that an
    # engine appends to meanwhile
    stalled = threading.Event()
    phases = [
        (Reply(body=vllm_metrics(kv=0.1).encode()), 0.1),
        (Reply(status=500, body=b"Internal Server Error"), "HTTP 500 Internal Server Error"),
        (
            Reply(body=b"<html><body>502 Bad Gateway</body></html>"),
            "response is not Prometheus text exposition",
        ),
        (Reply(body=vllm_metrics().encode(), hold=stalled), "no complete response within 0.15 s"),
        (Reply(body=b"x" * 200_000), "response of 200000 bytes is over the 102400 byte cap"),
        (Reply(body=vllm_metrics(kv=0.2).encode()), 0.2),
    ]
    phase = [0]

    def reply(n: int) -> Reply:
        return phases[phase[0]][0]

    log, out = tmp_path / "engine.log", tmp_path / "capture"
    log.write_text("")
    written: list[str] = []

    def recorded(expected: float | str) -> Callable[[CaptureReadResult], bool]:
        """On disk: every line written so far, and the scrape's value or the failure's gap."""

        def seen(capture: CaptureReadResult) -> bool:
            lines, scrapes = capture.logs.get(str(log)), capture.prometheus.get(url)
            if lines is None or lines.text != written:
                return False
            if isinstance(expected, str):
                return any(g.reason == f"FetchError: {expected}" for g in capture.gaps)
            return scrapes is not None and kv_values(scrapes.text)[-1:] == [expected]

        return seen

    with metrics_server(reply) as server:
        url = server.url
        config = build_config(
            out=str(out),
            prometheus=[url],
            logs=[str(log)],
            prometheus_interval="20ms",
            log_interval="20ms",
            timeout="150ms",
            max_response="100KiB",
            flush_interval="50ms",
        )
        agent = Agent(dataclasses.replace(config, max_backoff_s=0.05))
        agent.start()
        try:
            for i, (_, expected) in enumerate(phases):
                phase[0] = i
                if i == len(phases) - 1:
                    stalled.set()
                # WHEN the endpoint serves the phase's answer, the engine logs ten lines: they
                # reach the disk while the endpoint answers that way
                with log.open("a") as f:
                    for _ in range(10):
                        written.append(f"line {len(written)}")
                        f.write(written[-1] + "\n")
                wait_for_capture(out, recorded(expected))
        finally:
            stalled.set()
            summary = agent.stop()
    capture = read_capture(out)
    # THEN each kind of failure is one closed gap with its reason, and the agent recovered
    reasons = [g.reason for g in capture.gaps if g.source == "collector.prometheus"]
    for _, expected in phases[1:-1]:
        assert f"FetchError: {expected}" in reasons
    assert all(g.end_ns is not None for g in capture.gaps)
    assert kv_values(capture.prometheus[url].text)[-1] == 0.2
    (prom,) = [s for s in summary.sources if s.name == "collector.prometheus"]
    assert prom.errors >= 4
    # AND the log kept its pace: every line captured once, in order
    assert capture.logs[str(log)].text == written


def test_an_endpoint_that_is_down_is_a_gap_until_the_end(tmp_path: Path) -> None:
    config = build_config(
        out=str(tmp_path),
        prometheus=["http://127.0.0.1:9/metrics"],
        prometheus_interval="20ms",
        flush_interval="50ms",
    )
    agent = Agent(config)
    agent.start()
    try:
        wait_for_capture(tmp_path, lambda capture: bool(capture.gaps))
    finally:
        agent.stop()
    (gap,) = read_capture(tmp_path).gaps
    assert gap.reason.startswith("FetchError: ConnectionRefusedError")
    assert gap.end_ns is not None  # closed when the agent stopped
