"""End to end: a real collector process samples a loopback vLLM endpoint and a growing engine log,
then `oomtrace analyze` on the capture directory finds the planted KV exhaustion and names the
requests that caused it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from collectors.reader import CaptureReadResult
from collectors.segments import read_capture
from oomtrace.cli import cli
from tests.unit.collectors.factories import (
    Reply,
    killed_at_exit,
    metrics_server,
    vllm_metrics,
    wait_for_capture,
)
from tests.waiting import HANG_S, wait_until

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
PREFIX = "(APIServer pid=1222) INFO {t} [{f}] "
PARAMS = (
    "SamplingParams(n=1, presence_penalty=0.0, temperature=0.7, top_p=1.0, seed=None, "
    "stop=[], max_tokens={max_tokens}, min_tokens=0, logprobs=None)"
)


def _now() -> str:
    return datetime.now(UTC).strftime("%m-%d %H:%M:%S")


def _received(rid: str, prompt_tokens: int, max_tokens: int) -> str:
    ids = ", ".join(str(1000 + i % 3000) for i in range(prompt_tokens))
    return (
        PREFIX.format(t=_now(), f="logger.py:41")
        + f"Received request {rid}: prompt: 'secret prompt of {rid}', params: "
        + PARAMS.format(max_tokens=max_tokens)
        + f", prompt_token_ids: [{ids}], prompt_embeds shape: None, lora_request: None.\n"
        + PREFIX.format(t=_now(), f="async_llm.py:321")
        + f"Added request {rid}.\n"
    )


def _finished(rid: str, output_tokens: int) -> str:
    ids = ", ".join("11" for _ in range(output_tokens))
    return (
        PREFIX.format(t=_now(), f="logger.py:72")
        + f"Generated response {rid}: output: 'secret answer', output_token_ids: [{ids}], "
        + "finish_reason: stop\n"
    )


def _startup() -> str:
    engine = "(EngineCore_DP0 pid=1300) INFO {t} [{f}] "
    return (
        engine.format(t=_now(), f="gpu_worker.py:349") + "Available KV cache memory: 2.00 GiB\n"
        + engine.format(t=_now(), f="kv_cache_utils.py:1229")
        + "GPU KV cache size: 16,384 tokens\n"
        + engine.format(t=_now(), f="kv_cache_utils.py:1234")
        + "Maximum concurrency for 8,192 tokens per request: 2.00x\n"
    )  # fmt: skip


@pytest.mark.slow
def test_analyze_on_a_live_capture_finds_the_planted_exhaustion_and_its_requests(
    tmp_path: Path,
) -> None:
    # GIVEN an engine whose metrics endpoint and log the collector follows
    state = {"kv": 0.05, "running": 0, "waiting": 0, "preemptions": 0}
    lock = threading.Lock()

    def reply(n: int) -> Reply:
        with lock:
            body = vllm_metrics(
                kv=state["kv"], running=int(state["running"]), waiting=int(state["waiting"]),
                preemptions=int(state["preemptions"]), blocks=1024,
            )  # fmt: skip
        return Reply(body=body.encode())

    def engine(**values: float) -> None:
        with lock:
            state.update(values)

    def kv_scrapes(capture: CaptureReadResult) -> list[tuple[int, float]]:
        """(stamp, KV usage) of every scrape on disk."""
        scrapes = capture.prometheus.get(server.url)
        if scrapes is None:
            return []
        return [
            (ts, float(line.rsplit(" ", 1)[1]))
            for ts, text in zip(scrapes.ts_ns, scrapes.text, strict=True)
            for line in text.splitlines()
            if line.startswith("vllm:kv_cache_usage_perc{")
        ]

    def scraped(kv: float) -> Callable[[CaptureReadResult], bool]:
        return lambda capture: any(value == kv for _, value in kv_scrapes(capture))

    log, out = tmp_path / "vllm.log", tmp_path / "capture"
    log.write_text(_startup())
    with metrics_server(reply) as server:
        command = [sys.executable, "-m", "collectors", "--prometheus", server.url, "--log",
                   str(log), "--out", str(out), "--prometheus-interval", "100ms",
                   "--log-interval", "50ms"]  # fmt: skip
        with killed_at_exit(subprocess.Popen(command, stderr=subprocess.PIPE, text=True)) as agent:
            assert wait_until(lambda: len(server.served) >= 3)
            # WHEN two short requests come and go (each step waits until the agent has it on
            # disk)
            with log.open("a") as f:
                f.write(_received("cmpl-short-1", 300, 64) + _received("cmpl-short-2", 200, 64))
            engine(kv=0.04, running=2)
            wait_for_capture(out, scraped(0.04))
            with log.open("a") as f:
                f.write(_finished("cmpl-short-1", 40) + _finished("cmpl-short-2", 30))
            engine(kv=0.01, running=0)
            wait_for_capture(out, scraped(0.01))
            # AND three long requests arrive and fill the pool until it preempts
            with log.open("a") as f:
                for i, prompt in enumerate((5200, 5000, 4800), start=1):
                    f.write(_received(f"cmpl-long-{i}", prompt, 4096))
            engine(kv=0.92, running=3)
            wait_for_capture(out, scraped(0.92))
            engine(kv=1.0, running=2, waiting=1, preemptions=4)
            wait_for_capture(out, scraped(1.0))
            stop_ns = time.time_ns()
            agent.send_signal(signal.SIGTERM)
            agent.communicate(timeout=HANG_S)
    assert agent.returncode == 0

    # THEN analyze, on the capture directory alone, names the incident and its requests
    result = CliRunner().invoke(cli, ["analyze", str(out), "--json"])
    assert result.exit_code == 0, result.output
    findings = json.loads(result.output)
    incident = findings["incidents"][0]
    assert incident["class"] == "kv_exhaustion"
    # at the spike: after the last scrape of a pool below full, before the agent was stopped
    # (in microseconds, the findings' precision)
    peak_us = (datetime.fromisoformat(incident["peak_ts"]) - EPOCH) // timedelta(microseconds=1)
    below_full = max(ts for ts, value in kv_scrapes(read_capture(out)) if value < 1.0)
    assert below_full // 1000 <= peak_us <= stop_ns // 1000
    named = [c["request_id"] for c in incident["culprits"][:3]]
    assert named == ["cmpl-long-1", "cmpl-long-2", "cmpl-long-3"]
    assert not {c["request_id"] for c in incident["culprits"]} & {"cmpl-short-1", "cmpl-short-2"}
    # AND no prompt text reached the capture or the findings
    assert "secret" not in result.output
    assert not any(b"secret" in p.read_bytes() for p in out.iterdir())
