"""A real vLLM 0.32.0 server (CPU build, tiny dummy model, a pool that runs dry) with oomtrace
attached the way a user attaches it: the plugin installed into the server's environment and
pointed at the capture directory, ``oomtrace collect`` scraping ``/metrics`` and following the
server's log into the same directory. Four long requests among forty short ones exhaust the
pool; the test checks what was captured against what the client and the engine saw, and what
``oomtrace analyze --json`` and ``oomtrace report`` make of it, with request logging on and off
(the default since vLLM 0.11).

About 3 minutes per run on 2 cores, plus 5 to 13 minutes to build the pinned vLLM environment
the first time (``.ci/vllm-env``). Skipped, with the reason, only where vLLM cannot be built or
run (not Linux x86_64, no wheel for the pinned torch); never under CI=true.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from collectors.format import decode
from collectors.vllm_plugin import records
from tests.waiting import HANG_S, wait_until
from tools.vllm_server import (
    Sent,
    VllmServer,
    VllmUnavailableError,
    free_port,
    send_load,
    server_environment,
    vllm_environment,
)

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

# token ids nobody sends by chance: if this run shows up on disk, a prompt was stored
PLANTED = [31337, 27182, 16180, 14142, 17320, 22360, 26457, 28284]
POOL_BLOCKS = 40  # --num-gpu-blocks-override; vLLM keeps one as its null block


@pytest.fixture(scope="module")
def server_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        env = vllm_environment()
    except VllmUnavailableError as err:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the real-vLLM test, but: {err}")
        pytest.skip(f"this machine cannot run the pinned vLLM: {err}")
    return server_environment(env, tmp_path_factory.mktemp("server-env"))


@dataclass
class Recorded:
    workdir: Path
    capture: Path
    log: Path
    sent: list[Sent]
    metrics: str
    log_requests: bool

    def records(self) -> list[dict[str, Any]]:
        return read_records(self.capture)


def read_records(capture: Path) -> list[dict[str, Any]]:
    """Every intact record of the capture, file by file (a torn last line is skipped)."""
    lines = [
        line
        for path in sorted(capture.glob("*.oseg"))
        for line in path.read_bytes().split(b"\n")[:-1]
        if line
    ]
    return [decode(line) for line in lines]


def _released(capture: Path) -> set[str]:
    return {
        str(record["api"]) for record in read_records(capture) if record["k"] == records.FINISHED
    }


def _log_read_to_end(capture: Path, log: Path) -> bool:
    """The collector's log tail has read every complete line of ``log`` (its records say up to
    which byte they read)."""
    complete = log.read_bytes().rfind(b"\n") + 1
    path = str(log.absolute())
    ends = [r["end"] for r in read_records(capture) if r["k"] == "log" and r["path"] == path]
    return max(ends, default=0) >= complete


def record_incident(python: Path, workdir: Path, *, log_requests: bool) -> Recorded:
    """Start collect and the server, send the load, stop both; what they left behind."""
    capture, log = workdir / "capture", workdir / "vllm.log"
    log.touch()
    server = VllmServer(
        python, workdir / "model", log, capture, free_port(), log_requests=log_requests
    )
    agent = subprocess.Popen(
        [sys.executable, "-m", "oomtrace", "collect", "--out", str(capture),
         "--prometheus", f"{server.base_url}/metrics", "--log", str(log)],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        server.start()
        sent = send_load(server, planted=PLANTED)
        metrics = server.metrics()
        # vLLM stops its engine core with SIGKILL right after SIGTERM: stop once the plugin
        # has written every request's release (it writes every 100 ms)
        wanted = {f"{s.client_id}-0" for s in sent}
        assert wait_until(lambda: wanted <= _released(capture), poll_s=0.1)
    finally:
        server.stop()
        # the log is complete once the server is stopped: stop collect once it has read it all
        wait_until(lambda: _log_read_to_end(capture, log), poll_s=0.1)
        agent.send_signal(signal.SIGTERM)
        _, agent_err = agent.communicate(timeout=HANG_S)
    assert agent.returncode == 0, agent_err
    return Recorded(workdir, capture, log, sent, metrics, log_requests)


@pytest.fixture(scope="module", params=[True, False], ids=["request-logging", "default-logging"])
def recorded(
    request: pytest.FixtureRequest, server_python: Path, tmp_path_factory: pytest.TempPathFactory
) -> Recorded:
    workdir = tmp_path_factory.mktemp("logging-on" if request.param else "logging-off")
    return record_incident(server_python, workdir, log_requests=request.param)


def _metric(text: str, name: str) -> float:
    values = [
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith((name + "{", name + " "))
    ]
    return sum(values)


def test_the_plugin_maps_every_request_the_client_saw(recorded: Recorded) -> None:
    recs = recorded.records()
    admitted = {r["api"]: r for r in recs if r["k"] == records.REQUEST}
    done = {r["api"]: r for r in recs if r["k"] == records.DONE}
    # the completions endpoint names choice 0 of response "cmpl-x" as "cmpl-x-0", and the
    # engine adds 8 hex digits to that
    for sent in recorded.sent:
        api = f"{sent.client_id}-0"
        assert admitted[api]["id"].startswith(api + "-")
        assert admitted[api]["pt"] == sent.prompt_tokens
        assert admitted[api]["mt"] == sent.max_tokens
        assert done[api]["gt"] == sent.completion_tokens == sent.max_tokens
    assert len(admitted) == len(recorded.sent) == 44


def test_every_preemption_is_seen_by_request_and_matches_the_engines_count(
    recorded: Recorded,
) -> None:
    recs = recorded.records()
    steps = [r for r in recs if r["k"] == records.STEP]
    preempted = [rid for r in steps for rid in r.get("pre", {})]
    engine_total = _metric(recorded.metrics, "vllm:num_preemptions_total")
    assert engine_total > 0, "the pool did not run dry: the scenario is broken"
    assert len(preempted) == engine_total
    finished = {r["id"]: r for r in recs if r["k"] == records.FINISHED}
    for rid in set(preempted):
        assert finished[rid]["pre"] == preempted.count(rid)
    assert sum(r["pre"] for r in recs if r["k"] == records.DONE) == engine_total
    assert any(r.get("free") == 0 for r in steps)


def test_the_ledger_in_every_snapshot_is_the_engines_own(recorded: Recorded) -> None:
    recs = recorded.records()
    info = next(r["data"] for r in recs if r["k"] == "info" and "engine" in r.get("data", {}))
    assert info["engine"]["block_size"] == 128
    assert info["engine"]["dtype"] == "float32"
    assert info["pool_blocks"] == POOL_BLOCKS
    snaps = [r for r in recs if r["k"] == records.SNAPSHOT]
    assert snaps
    for snap in snaps:
        assert len(snap["req"]) == snap["run"]
        # distinct prompts share no prefix block: blocks held add up to the pool's used blocks
        assert sum(row[1] for row in snap["req"]) == POOL_BLOCKS - 1 - snap["free"]


def test_the_steps_block_changes_replay_to_every_snapshot(recorded: Recorded) -> None:
    # the steps carry only the blocks that changed: replayed from the first snapshot, they give
    # at every later snapshot exactly what the KV cache manager held
    held: dict[str, int] | None = None
    checked = 0
    for rec in recorded.records():
        if rec["k"] == records.SNAPSHOT:
            snap = {row[0]: row[1] for row in rec["req"]}
            if held is not None:
                assert held == snap, rec["n"]
                checked += 1
            held = snap
        elif rec["k"] == records.STEP and held is not None:
            for rid in [*rec.get("pre", {}), *rec.get("fin", [])]:
                held.pop(rid, None)
            held.update((rid, pair[0]) for rid, pair in rec.get("blk", {}).items())
    assert checked > 10


def test_collect_captured_metrics_and_the_log_beside_the_plugin(recorded: Recorded) -> None:
    recs = recorded.records()
    kinds = {r["k"] for r in recs}
    assert {"prom", "log", records.STEP, records.DONE} <= kinds
    lines = [line for r in recs if r["k"] == "log" for line in r["lines"]]
    assert any("CPU KV cache size: 5,120 tokens" in line for line in lines)
    assert any("Engine 000:" in line and "CPU KV cache usage" in line for line in lines)
    assert any("Added request" in line for line in lines) == recorded.log_requests


def test_no_prompt_reaches_any_file_oomtrace_wrote(recorded: Recorded) -> None:
    # the planted ids in a row, as any list or log would print them (one id alone could be a
    # digit run inside a nanosecond timestamp)
    needles = [sep.join(map(str, PLANTED[:3])).encode() for sep in (", ", ",", " ")]
    for path in recorded.capture.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert not any(needle in data for needle in needles), path
    assert json.dumps(recorded.sent[0].client_id)  # the client did get ids back


# --- what oomtrace makes of it --------------------------------------------------------------


def _oomtrace(*args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "oomtrace", *args], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return done


@pytest.fixture(scope="module")
def analysed(recorded: Recorded) -> dict[str, Any]:
    findings = json.loads(_oomtrace("analyze", str(recorded.capture), "--json").stdout)
    out = recorded.workdir / "findings.json"
    out.write_text(json.dumps(findings))
    return dict(findings)


def test_analyze_names_the_long_requests_first_with_the_engines_figures(
    recorded: Recorded, analysed: dict[str, Any]
) -> None:
    incident = analysed["incidents"][0]
    assert incident["class"] == "kv_exhaustion"
    longs = {f"{s.client_id}-0" for s in recorded.sent if s.long}
    named = [c["request_id"] for c in incident["culprits"]]
    resident_longs = [r for r in named if r in longs]
    # the long requests resident at the peak lead, every short one after them
    assert len(resident_longs) >= 2
    assert named[: len(resident_longs)] == resident_longs
    for culprit in incident["culprits"][: len(resident_longs)]:
        assert (culprit["basis"], culprit["blocks_basis"]) == ("exact", "engine")
    assert analysed["kv_model"]["block_size"] == 128
    assert analysed["kv_model"]["sources"]["block_size"] == "the vLLM plugin (engine core)"


def test_preemptions_are_attributed_to_the_requests_that_suffered_them(
    recorded: Recorded, analysed: dict[str, Any]
) -> None:
    recs = recorded.records()
    names = {r["id"]: r["api"] for r in recs if r["k"] == records.REQUEST}
    suffered: dict[str, int] = {}
    for rec in recs:
        if rec["k"] == records.STEP:
            for rid in rec.get("pre", {}):
                suffered[names[rid]] = suffered.get(names[rid], 0) + 1
    incident = analysed["incidents"][0]
    for row in [*incident["culprits"], *incident["ledger"]["rows"]]:
        assert row["preemptions"] == suffered.get(row["request_id"], 0), row["request_id"]
    # the requests the class's evidence cites (preemptions within a second of the peak) are
    # ones the engine preempted
    cited = [e["values"] for e in incident["evidence"] if e["table"] == "requests"]
    assert all(v["event"] == "preempted" and v["request_id"] in suffered for v in cited)


def test_the_ledger_at_the_spike_is_the_engines_running_set(
    recorded: Recorded, analysed: dict[str, Any]
) -> None:
    ledger = analysed["incidents"][0]["ledger"]
    at = datetime.fromisoformat(ledger["ts"])
    at_us = round(at.timestamp() * 1e6)
    steps = [r for r in recorded.records() if r["k"] == records.STEP]
    step = max((s for s in steps if s["ts"] // 1000 <= at_us), key=lambda s: s["ts"])
    assert ledger["resident_requests"] == step["run"]
    used = sum(row["blocks"] for row in ledger["rows"])
    assert used == POOL_BLOCKS - 1 - step["free"]


def test_the_report_tells_it_and_nothing_of_a_prompt_is_on_disk(
    recorded: Recorded, analysed: dict[str, Any]
) -> None:
    report = recorded.workdir / "report.md"
    _oomtrace("report", str(recorded.capture), "-o", str(report), "--force")
    text = report.read_text()
    assert "KV cache pool exhausted" in text
    top = analysed["incidents"][0]["culprits"][0]["request_id"]
    assert top in text
    trace = recorded.workdir / "trace"
    _oomtrace("ingest", str(recorded.capture), "--out", str(trace), "--force")
    needles = [sep.join(map(str, PLANTED[:3])).encode() for sep in (", ", ",", " ")]
    written = [p for p in recorded.workdir.rglob("*") if p.is_file() and p.name != "vllm.log"]
    assert len(written) > 5
    for path in written:
        data = path.read_bytes()
        assert not any(needle in data for needle in needles), path
