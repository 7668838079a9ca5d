"""The vLLM plugin's records as first-class evidence: a run of the miniature scheduler
(tests/vllm_fakes.py), recorded by the plugin's recorder beside a tailed log, ingested and
analysed. The plugin's account replaces the log's where both speak, and the analysis reads the
engine's own figures: exact lifecycle, blocks per request, the running count at the peak."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from collectors.format import Header, encode
from collectors.segments import read_capture
from oomtrace.analysis import analyze
from oomtrace.ingest import IngestOptions, ingest_paths
from oomtrace.trace import Trace
from tests import vllm_fakes as fakes

LONG, SHORT = (100, 120), (20, 10)


def _log_segment(directory: Path, lines: list[str]) -> None:
    """What the agent's log tail writes: the server's lines, as read."""
    now = time.time_ns()
    header = Header(1, "node-a", "agent-7", "agent", 7, now, 1).to_record()
    chunk = {"k": "log", "ts": now, "src": "collector.log", "path": "/var/log/vllm.log",
             "dev": 1, "ino": 2, "gen": 0, "off": 0, "end": 100, "lines": lines}  # fmt: skip
    name = f"seg-{time.strftime('%Y%m%dT%H%M%S', time.gmtime(now / 1e9))}.000000Z-agent-7-000001"
    (directory / f"{name}.oseg").write_bytes(encode(header) + encode(chunk))


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    directory = tmp_path_factory.mktemp("capture")
    api_ids = fakes.recorded_run(directory, [LONG] * 3 + [SHORT] * 8)
    stamp = time.strftime("%m-%d %H:%M:%S", time.gmtime())
    prefix = f"(APIServer pid=21722) INFO {stamp} [request_logger.py:65] "
    # the log names the first request with another max_tokens than the engine ran it with
    _log_segment(
        directory,
        [
            prefix + f"Received request {api_ids[0]}: params: SamplingParams(n=1, max_tokens=999"
            ", min_tokens=0), lora_request: None.",
            prefix + f"Received request {api_ids[1]}: params: SamplingParams(n=1, max_tokens=120"
            ", min_tokens=0), lora_request: None.",
        ],
    )
    return directory, api_ids


@pytest.fixture(scope="module")
def trace(captured: tuple[Path, list[str]]) -> Trace:
    return ingest_paths([captured[0]], IngestOptions())


def _plugin(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.filter(pl.col("source").str.contains("collector.vllm"))


def test_every_request_has_its_exact_lifecycle(
    trace: Trace, captured: tuple[Path, list[str]]
) -> None:
    requests = _plugin(trace.requests)
    events = requests.group_by("request_id").agg(pl.col("event").unique())
    for row in events.iter_rows(named=True):
        assert {"arrived", "admitted", "progress", "finished"} <= set(row["event"])
    assert sorted(events["request_id"]) == sorted(captured[1])
    preempted = requests.filter(pl.col("event") == "preempted")
    assert preempted.height > 0
    assert (preempted["kv_blocks"] > 0).all()
    assert preempted["output_tokens"].is_not_null().all()
    resumed = requests.filter(pl.col("event") == "resumed")
    assert resumed.height == preempted.height  # every victim came back and finished


def test_the_plugin_wins_where_the_log_also_speaks(trace: Trace) -> None:
    # the log's two request rows are set aside, and its disagreement is said
    assert trace.requests.filter(pl.col("source").str.contains("collector.log")).is_empty()
    notes = [n for s in trace.manifest.sources for n in s.notes]
    assert any("2 request rows of 2 requests from the log set aside" in n for n in notes)
    assert any("1 disagreed" in n and "max 999 in the log" in n for n in notes)


def test_the_engine_states_its_pool_and_settings(trace: Trace) -> None:
    config = trace.manifest.engine_config
    assert (config["block_size"], config["num_gpu_blocks"], config["dtype"]) == (16, 24, "float32")
    # 16 tokens x 2 layers x 2 (K, V) x 2 heads x 32 dims x 4 bytes
    assert config["kv_bytes_per_block"] == 16 * 2 * 2 * 2 * 32 * 4
    assert config["stated_by"]["block_size"] == "the vLLM plugin (engine core)"
    running = _plugin(trace.samples).filter(pl.col("metric") == "requests_running")
    assert running.height > 3
    total = _plugin(trace.samples).filter(pl.col("metric") == "kv_blocks_total")["value"]
    assert set(total) == {23.0}  # 24 blocks less vLLM's null block


def _engine_state_at(directory: Path, ts_ns: int) -> tuple[int, dict[str, int]]:
    """The running count and the blocks per API id the engine recorded at its step of ``ts``."""
    vllm = read_capture(directory).vllm
    steps = pl.DataFrame(vllm.steps.as_dict()).filter(pl.col("ts_ns") // 1000 <= ts_ns // 1000)
    step = steps.sort("ts_ns").row(-1, named=True)
    held: dict[str, int] = {}
    for row in pl.DataFrame(vllm.blocks.as_dict()).sort("ts_ns").iter_rows(named=True):
        if row["step"] <= step["step"]:
            held[row["engine_id"]] = row["blocks"]
    life = pl.DataFrame(vllm.lifecycle.as_dict()).filter(pl.col("step") <= step["step"])
    for row in life.sort("step").iter_rows(named=True):
        if row["event"] in ("preempted", "finished"):
            held.pop(row["engine_id"], None)
    names = dict(zip(vllm.admitted.engine_id, vllm.admitted.api_id, strict=True))
    return step["running"], {names[k]: v for k, v in held.items()}


def test_the_ledger_at_the_peak_is_the_engines_own(
    trace: Trace, captured: tuple[Path, list[str]]
) -> None:
    incident = analyze(trace).incidents[0]
    assert incident.cls == "kv_exhaustion"
    ledger = incident.ledger
    running, held = _engine_state_at(captured[0], int(ledger.ts.timestamp() * 1e6) * 1000)
    assert ledger.resident_requests == running
    assert {r.request_id: r.blocks for r in ledger.rows} == held
    assert {r.blocks_basis for r in ledger.rows} == {"engine"}


def test_the_long_requests_lead_with_exact_figures_and_their_preemptions(
    trace: Trace, captured: tuple[Path, list[str]]
) -> None:
    incident = analyze(trace).incidents[0]
    longs = set(captured[1][:3])
    resident_longs = [c for c in incident.culprits if c.request_id in longs]
    assert resident_longs
    assert [c.request_id for c in incident.culprits[: len(resident_longs)]] == [
        c.request_id for c in resident_longs
    ]
    assert {c.basis for c in resident_longs} == {"exact"}
    counts: dict[str, Any] = (
        _plugin(trace.requests).filter(pl.col("event") == "preempted")
        .group_by("request_id").len().rows_by_key("request_id", unique=True)
    )  # fmt: skip
    for culprit in incident.culprits:
        assert culprit.preemptions == (
            counts[culprit.request_id][0] if culprit.request_id in counts else 0
        )
