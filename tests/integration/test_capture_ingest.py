"""A real collector capture is one ingest input: its samples, scrapes and log lines become the
same canonical rows as files would, with the collector's arrival times."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest

from oomtrace.errors import InputError
from oomtrace.ingest import IngestOptions, ingest_paths
from tests.unit.collectors.factories import Reply, metrics_server, vllm_metrics, wait_until

SGLANG = "[{t}] Decode batch, #running-req: {n}, #token: {tok}, token usage: {u:.2f}, cuda graph: True, gen throughput (token/s): 100.00, #queue-req: 0\n"  # noqa: E501


def _capture(tmp_path: Path) -> tuple[Path, int]:
    spiked = threading.Event()

    def reply(n: int) -> Reply:
        return Reply(body=vllm_metrics(kv=0.98 if spiked.is_set() else 0.2).encode())

    log, out = tmp_path / "sglang.log", tmp_path / "capture"
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S")
    log.write_text(SGLANG.format(t=stamp, n=4, tok=1000, u=0.1))
    with metrics_server(reply) as server:
        command = [sys.executable, "-m", "collectors", "--prometheus", server.url, "--log",
                   str(log), "--out", str(out), "--prometheus-interval", "50ms",
                   "--log-interval", "50ms"]  # fmt: skip
        process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
        assert wait_until(lambda: len(server.served) >= 5, timeout_s=10.0)
        spike_ns = time.time_ns()
        spiked.set()
        with log.open("a") as f:
            stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S")
            f.write(SGLANG.format(t=stamp, n=40, tok=90000, u=0.97))
        time.sleep(0.5)
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=10)
    assert process.returncode == 0
    return out, spike_ns


@pytest.mark.slow
def test_a_capture_directory_ingests_scrapes_and_log_lines_with_arrival_times(
    tmp_path: Path,
) -> None:
    out, spike_ns = _capture(tmp_path)
    trace = ingest_paths([out], IngestOptions())
    (source,) = trace.manifest.sources
    assert source.parser == "collector-capture"
    kv = trace.samples.filter(pl.col("metric") == "kv_usage_ratio")
    scraped = kv.filter(pl.col("source").str.contains("collector.prometheus"))
    assert scraped.filter(pl.col("value") == 0.98).height > 0
    first_high = scraped.filter(pl.col("value") == 0.98)["ts"].min()
    assert isinstance(first_high, datetime)
    assert abs(first_high.timestamp() * 1e9 - spike_ns) < 0.5e9
    logged = kv.filter(pl.col("source").str.contains("collector.log"))
    assert logged["value"].to_list() == [0.1, 0.97]
    # the log line's time is its arrival (sub-second), not the printed whole second
    high_line = logged.filter(pl.col("value") == 0.97)["ts"][0]
    assert abs(high_line.timestamp() * 1e9 - spike_ns) < 0.5e9
    assert any("read with sglang-log" in n for n in source.notes)


def test_a_directory_without_segments_is_not_a_capture(tmp_path: Path) -> None:
    (tmp_path / "seg-broken.oseg").write_bytes(b"garbage\n")
    with pytest.raises(InputError, match="no readable segment"):
        ingest_paths([tmp_path], IngestOptions())
