"""A real collector capture is one ingest input: its samples, scrapes and log lines become the
same canonical rows as files would, with the collector's arrival times."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest

from collectors.reader import CaptureReadResult
from collectors.segments import read_capture
from oomtrace.errors import InputError
from oomtrace.ingest import IngestOptions, ingest_paths
from tests.unit.collectors.factories import (
    Reply,
    killed_at_exit,
    metrics_server,
    vllm_metrics,
    wait_for_capture,
)
from tests.waiting import HANG_S, wait_until

SGLANG = "[{t}] Decode batch, #running-req: {n}, #token: {tok}, token usage: {u:.2f}, cuda graph: True, gen throughput (token/s): 100.00, #queue-req: 0\n"  # noqa: E501


@dataclass(frozen=True)
class Captured:
    out: Path
    log: Path
    written_ns: int  # just before the 97 % line was appended
    seen_ns: int  # once it and a 98 % scrape were on disk


def _capture(tmp_path: Path) -> Captured:
    spiked = threading.Event()

    def reply(n: int) -> Reply:
        return Reply(body=vllm_metrics(kv=0.98 if spiked.is_set() else 0.2).encode())

    log, out = tmp_path / "sglang.log", tmp_path / "capture"
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S")
    log.write_text(SGLANG.format(t=stamp, n=4, tok=1000, u=0.1))

    def on_disk(capture: CaptureReadResult) -> bool:
        lines = capture.logs.get(str(log))
        scrapes = capture.prometheus.get(server.url)
        return (
            lines is not None
            and len(lines.text) == 2
            and scrapes is not None
            and any("kv_cache_usage_perc" in t and " 0.98" in t for t in scrapes.text)
        )

    with metrics_server(reply) as server:
        command = [sys.executable, "-m", "collectors", "--prometheus", server.url, "--log",
                   str(log), "--out", str(out), "--prometheus-interval", "50ms",
                   "--log-interval", "50ms"]  # fmt: skip
        with killed_at_exit(subprocess.Popen(command, stderr=subprocess.PIPE, text=True)) as agent:
            assert wait_until(lambda: len(server.served) >= 5)
            spiked.set()
            stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S")
            written_ns = time.time_ns()
            with log.open("a") as f:
                f.write(SGLANG.format(t=stamp, n=40, tok=90000, u=0.97))
            wait_for_capture(out, on_disk)
            seen_ns = time.time_ns()
            agent.send_signal(signal.SIGTERM)
            agent.communicate(timeout=HANG_S)
    assert agent.returncode == 0
    return Captured(out, log, written_ns, seen_ns)


def _ns(frame: pl.DataFrame) -> list[tuple[int, float]]:
    return frame.select(pl.col("ts").dt.epoch("ns"), "value").rows()


def test_a_capture_directory_ingests_scrapes_and_log_lines_with_arrival_times(
    tmp_path: Path,
) -> None:
    captured = _capture(tmp_path)
    trace = ingest_paths([captured.out], IngestOptions())
    (source,) = trace.manifest.sources
    assert source.parser == "collector-capture"
    # every scrape is a KV usage row at the time the collector stamped it
    kv = trace.samples.filter(pl.col("metric") == "kv_usage_ratio").sort("ts")
    scraped = kv.filter(pl.col("source").str.contains("collector.prometheus"))
    (scrapes,) = read_capture(captured.out).prometheus.values()
    stamped = [ts for ts, info in zip(scrapes.ts_ns, scrapes.info, strict=True) if not info]
    assert [ts for ts, _ in _ns(scraped)] == stamped
    # low until the spike, high after it
    values = [value for _, value in _ns(scraped)]
    assert values == sorted(values)
    assert set(values) == {0.2, 0.98}
    # the log lines are read with the SGLang parser, at their arrival: the high one after it
    # was written and before the test saw it on disk (sub-second, not the printed second)
    logged = kv.filter(pl.col("source").str.contains("collector.log"))
    assert logged["value"].to_list() == [0.1, 0.97]
    (high_line,) = [ts for ts, value in _ns(logged) if value == 0.97]
    assert captured.written_ns <= high_line <= captured.seen_ns
    assert high_line % 1_000_000_000 != 0
    assert any("read with sglang-log" in n for n in source.notes)


def test_a_directory_without_segments_is_not_a_capture(tmp_path: Path) -> None:
    (tmp_path / "seg-broken.oseg").write_bytes(b"garbage\n")
    with pytest.raises(InputError, match="no readable segment"):
        ingest_paths([tmp_path], IngestOptions())
