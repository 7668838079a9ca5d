"""The vLLM plugin's hooks on a miniature of vLLM's scheduler (tests/vllm_fakes.py): what a run
of real scheduling writes, what it never writes, and how it behaves when it cannot keep up,
cannot write, or meets a vLLM without one of its hooks. The real engine is exercised by
tests/integration/test_vllm_real.py."""

from __future__ import annotations

import errno
import json
import logging
import os
import sys
import types
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from collectors.format import decode
from collectors.vllm_plugin import capture, hooks, records, register
from collectors.vllm_plugin.recorder import EngineRecorder
from collectors.vllm_plugin.settings import ENV_DIR, PluginSettings
from tests import vllm_fakes as fakes

# a prompt nobody would write: if these ids show up on disk, a prompt was stored
SECRET_PROMPT = [31337, 27182, 16180, 14142] * 40


@dataclass
class FakeVllm:
    scheduler: type[fakes.Scheduler]
    request: type[fakes.Request]


def _install_modules(monkeypatch: pytest.MonkeyPatch, **classes: Any) -> None:
    names = ["vllm", "vllm.v1", "vllm.v1.core", "vllm.v1.core.sched"]
    if "scheduler" in classes:
        names.append("vllm.v1.core.sched.scheduler")
    if "request" in classes:
        names.append("vllm.v1.request")
    modules = {name: types.ModuleType(name) for name in names}
    modules["vllm"].__version__ = "0.32.0"  # type: ignore[attr-defined]
    if "scheduler" in classes:
        modules["vllm.v1.core.sched.scheduler"].Scheduler = classes["scheduler"]  # type: ignore[attr-defined]
    if "request" in classes:
        modules["vllm.v1.request"].Request = classes["request"]  # type: ignore[attr-defined]
    for name in ("vllm", "vllm.v1.core.sched.scheduler", "vllm.v1.request"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)


@pytest.fixture
def plugin_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A process with no plugin state yet; the recorder it starts is closed afterwards."""
    monkeypatch.setattr(hooks._Active, "settings", None)
    monkeypatch.setattr(hooks._Active, "recorder", None)
    monkeypatch.setattr(hooks._Active, "failed", False)
    monkeypatch.setattr(hooks._Active, "hooks", {})
    monkeypatch.setattr(hooks._Active, "api_ids", {})
    yield
    recorder = hooks._Active.recorder
    if recorder is not None:
        recorder.close()


@pytest.fixture
def vllm(monkeypatch: pytest.MonkeyPatch, plugin_state: None) -> FakeVllm:
    # fresh subclasses, so that the wrapping done by one test never leaks into another
    fake = FakeVllm(
        type("Scheduler", (fakes.Scheduler,), {}), type("Request", (fakes.Request,), {})
    )
    _install_modules(monkeypatch, scheduler=fake.scheduler, request=fake.request)
    return fake


def _settings(directory: Path, **kw: Any) -> PluginSettings:
    return PluginSettings(directory=directory, node="n1", **kw)


def _submit(fake: FakeVllm, scheduler: fakes.Scheduler, prompt: list[int], out: int) -> str:
    """The API server's id; the engine's gets vLLM's random 8-hex-digit suffix."""
    api_id = f"cmpl-{uuid.uuid4().hex[:16]}-0"
    core = fakes.EngineCoreRequest(f"{api_id}-{uuid.uuid4().hex[:8]}", prompt, out, api_id)
    scheduler.add_request(fake.request.from_engine_core_request(core, None))
    return api_id


def _run(scheduler: fakes.Scheduler) -> int:
    steps = 0
    while scheduler.requests:
        scheduler.step()
        steps += 1
    scheduler.schedule()  # the step after the last finish reports it, as vLLM's does
    return steps + 1


def _records(directory: Path) -> list[dict[str, Any]]:
    lines = [
        line
        for path in sorted(directory.glob("*.oseg"))
        for line in path.read_bytes().split(b"\n")
        if line
    ]
    return [decode(line) for line in lines]


def _close() -> None:
    recorder = hooks._Active.recorder
    assert recorder is not None
    recorder.close()


def test_a_scheduling_run_is_recorded_step_by_step_with_exact_blocks(
    vllm: FakeVllm, tmp_path: Path
) -> None:
    # GIVEN the plugin installed and a pool too small for 3 long requests beside 12 short ones
    found = hooks.install(_settings(tmp_path, snapshot_interval_s=3600.0))
    assert all(found.values())
    scheduler = vllm.scheduler(num_blocks=24, block_size=16, max_num_batched_tokens=256)
    longs = [_submit(vllm, scheduler, [5] * 100, 120) for _ in range(3)]
    shorts = [_submit(vllm, scheduler, [6] * 20, 10) for _ in range(12)]

    # WHEN the scheduler runs every request to its end, and the engine shuts down
    steps = _run(scheduler)
    scheduler.shutdown()
    recs = _records(tmp_path)
    assert recs[-1] == {"k": "close", "ts": recs[-1]["ts"], "why": "stop"}

    # THEN every admission names both ids and the lengths
    admitted = {r["api"]: r for r in recs if r["k"] == records.REQUEST}
    assert set(admitted) == set(longs + shorts)
    assert all(r["id"].startswith(r["api"] + "-") for r in admitted.values())
    assert {admitted[a]["pt"] for a in longs} == {100}
    assert {admitted[a]["mt"] for a in shorts} == {10}
    # every step is there, in order
    step_recs = [r for r in recs if r["k"] == records.STEP]
    assert [r["n"] for r in step_recs] == list(range(1, steps + 1))
    # the pool ran dry: preemptions, each with the blocks the victim held, match the releases
    finished = {r["api"]: r for r in recs if r["k"] == records.FINISHED}
    assert set(finished) == set(admitted)
    preempted = [(rid, n) for r in step_recs for rid, n in r.get("pre", {}).items()]
    assert preempted, "the pool never ran dry"
    # each victim with the blocks and the tokens it held (blocks of 16 tokens: no more blocks
    # than its tokens need; fewer when it was preempted before its prompt was all computed)
    assert all(0 < blocks <= -(-tokens // 16) for _, (blocks, tokens) in preempted)
    by_engine = {r["id"]: r for r in finished.values()}
    per_request: dict[str, int] = {}
    for rid, _ in preempted:
        per_request[rid] = per_request.get(rid, 0) + 1
    assert per_request == {rid: r["pre"] for rid, r in by_engine.items() if r["pre"]}
    assert {r["why"] for r in finished.values()} == {"length"}
    assert {finished[a]["ot"] for a in longs} == {120}
    # replaying the steps' lifecycle ids and block changes gives the engine's own running count
    # and, at every snapshot, exactly the blocks the KV cache manager held
    running: dict[str, int] = {}
    for rec in recs:
        if rec["k"] == records.STEP:
            for rid in rec.get("pre", {}):
                running.pop(rid)
            for rid in rec.get("fin", []):
                running.pop(rid, None)
            for rid in rec.get("new", []) + rec.get("res", []):
                running[rid] = 0
            for rid, (blocks, stored) in rec.get("blk", {}).items():
                assert blocks == -(-stored // 16)  # the tokens that made it need the block
                running[rid] = blocks
            assert len(running) == rec["run"]
            assert sum(running.values()) == 23 - rec["free"]
        elif rec["k"] == records.SNAPSHOT:
            assert {row[0]: row[1] for row in rec["req"]} == running


def test_no_prompt_token_reaches_the_disk(vllm: FakeVllm, tmp_path: Path) -> None:
    hooks.install(_settings(tmp_path, snapshot_interval_s=0.001))
    scheduler = vllm.scheduler(num_blocks=64)
    for _ in range(4):
        _submit(vllm, scheduler, SECRET_PROMPT, 5)
    _run(scheduler)
    _close()

    data = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    assert b'"pt":160' in data  # its length is recorded
    for needle in (b"31337", b"27182", b"16180"):
        assert needle not in data


def test_a_full_queue_drops_steps_counts_them_and_resynchronises(
    vllm: FakeVllm, tmp_path: Path
) -> None:
    # GIVEN a recorder whose thread does not drain (a stalled disk) and a queue of 16 captures
    hooks.install(_settings(tmp_path, queue_max=16, drain_interval_s=3600.0))
    scheduler = vllm.scheduler(num_blocks=200)
    for _ in range(3):
        _submit(vllm, scheduler, [5] * 30, 60)
    # WHEN the scheduler runs 40 steps (3 admissions + 40 steps > 16)
    for _ in range(40):
        scheduler.step()
    recorder = hooks._Active.recorder
    assert recorder is not None
    # THEN the scheduler was never held up, and the capture says how many were dropped
    assert recorder.dropped == 3 + 40 - 16
    recorder.flush()
    scheduler.step()
    recorder.flush()
    recs = _records(tmp_path)
    drops = [r for r in recs if r["k"] == "drop"]
    assert [(d["n"], d["src"]) for d in drops] == [(27, records.ENGINE_SOURCE)]
    assert "queue" in drops[0]["why"]
    # and the first step after the drop carries a full snapshot, so blocks are exact again
    last_step = [r for r in recs if r["k"] == records.STEP][-1]
    snap = [r for r in recs if r["k"] == records.SNAPSHOT][-1]
    assert last_step["n"] == snap["n"] == 41
    held = scheduler.kv_cache_manager.manager.req_to_blocks
    assert {row[0]: row[1] for row in snap["req"]} == {k: len(v) for k, v in held.items()}


def test_an_unwritable_directory_never_stops_the_engine(
    vllm: FakeVllm, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    hooks.install(_settings(blocker / "capture"))
    scheduler = vllm.scheduler()
    _submit(vllm, scheduler, [5] * 30, 4)
    with caplog.at_level(logging.WARNING, logger=records.LOGGER_NAME):
        steps = _run(scheduler)
    assert steps > 4
    assert not scheduler.requests
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1
    assert "cannot write to" in lines[0]
    assert "runs without it" in lines[0]


def test_a_full_disk_loses_records_not_the_engine(
    vllm: FakeVllm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hooks.install(_settings(tmp_path))
    scheduler = vllm.scheduler()
    _submit(vllm, scheduler, [5] * 30, 4)
    scheduler.step()
    recorder = hooks._Active.recorder
    assert recorder is not None
    recorder.flush()
    real_write = os.write

    def full(fd: int, data: Any) -> int:
        if fd > 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", full)
    _run(scheduler)
    recorder.flush()
    monkeypatch.setattr(os, "write", real_write)
    assert not scheduler.requests
    assert recorder.writer.stats().write_errors > 0


def test_a_vllm_without_some_hooks_says_so_once_and_records_the_rest(
    monkeypatch: pytest.MonkeyPatch, plugin_state: None, tmp_path: Path
) -> None:
    # GIVEN a vLLM whose scheduler has schedule() only, and no v1 Request class
    inner = fakes.Scheduler(num_blocks=64)

    class BareScheduler:
        running = property(lambda self: inner.running)
        waiting = property(lambda self: inner.waiting)
        kv_cache_manager = property(lambda self: inner.kv_cache_manager)

        def schedule(self) -> fakes.SchedulerOutput:
            return inner.schedule()

    _install_modules(monkeypatch, scheduler=BareScheduler)
    found = hooks.install(_settings(tmp_path))
    assert found == {
        "schedule": True,
        "add_request": False,
        "_free_request": False,
        "shutdown": False,
        "from_engine_core_request": False,
    }
    bare = BareScheduler()
    inner.add_request(fakes.Request("r-1-0a1b2c3d", [5] * 20, 3))
    while inner.requests:
        inner.update_from_output(bare.schedule())
    bare.schedule()
    _close()
    steps = [r for r in _records(tmp_path) if r["k"] == records.STEP]
    assert steps[0]["new"] == ["r-1-0a1b2c3d"]
    assert steps[-1]["fin"] == ["r-1-0a1b2c3d"]


def test_missing_hooks_are_each_named_in_one_log_line(
    monkeypatch: pytest.MonkeyPatch,
    plugin_state: None,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    class OnlySchedule:
        def schedule(self) -> None:
            return None

    _install_modules(monkeypatch, scheduler=OnlySchedule)
    with caplog.at_level(logging.WARNING, logger=records.LOGGER_NAME):
        hooks.install(_settings(tmp_path))
        hooks.install(_settings(tmp_path))  # vLLM may load plugins twice: said once
    lines = sorted(r.getMessage() for r in caplog.records)
    assert len(lines) == 4
    assert any("no _free_request to hook" in line for line in lines)
    assert any("no add_request to hook" in line for line in lines)
    assert any("no from_engine_core_request to hook" in line for line in lines)


def test_a_process_without_vllm_v1_records_nothing_and_says_why(
    monkeypatch: pytest.MonkeyPatch,
    plugin_state: None,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    _install_modules(monkeypatch)
    with caplog.at_level(logging.WARNING, logger=records.LOGGER_NAME):
        assert hooks.install(_settings(tmp_path)) == {"schedule": False}
    assert ["no v1 scheduler" in r.getMessage() for r in caplog.records] == [True]
    assert not list(tmp_path.iterdir())


def test_register_is_off_without_the_environment_variable_and_never_raises(
    monkeypatch: pytest.MonkeyPatch, plugin_state: None, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv(ENV_DIR, raising=False)
    register()
    assert hooks._Active.settings is None
    monkeypatch.setenv(ENV_DIR, "/tmp/x")
    monkeypatch.setenv("OOMTRACE_MAX_DISK", "2G")
    with caplog.at_level(logging.WARNING, logger=records.LOGGER_NAME):
        register()
    assert hooks._Active.settings is None
    assert "OOMTRACE_MAX_DISK '2G' is not a size" in caplog.records[0].getMessage()


@pytest.mark.parametrize(
    ("engine_id", "disabled", "api_id"),
    [
        ("cmpl-4f0c2a9e-0-89f58045", "", "cmpl-4f0c2a9e-0"),
        ("chatcmpl-abc-1a2b3c4d", "1", "chatcmpl-abc-1a2b3c4d"),
        ("my-request", "", "my-request"),
        ("req-ABCDEF12", "", "req-ABCDEF12"),
    ],
)
def test_the_api_id_is_the_engine_id_less_vllms_suffix(
    monkeypatch: pytest.MonkeyPatch, engine_id: str, disabled: str, api_id: str
) -> None:
    monkeypatch.setenv(capture.NO_RANDOM_SUFFIX_ENV, disabled)
    assert capture.api_id_from_suffix(engine_id) == api_id


def test_the_recorder_counts_its_own_cost(tmp_path: Path) -> None:
    recorder = EngineRecorder(_settings(tmp_path)).start()
    scheduler = fakes.Scheduler(num_blocks=64)
    scheduler.add_request(fakes.Request("r-0a1b2c3d", [5] * 20, 30))
    while scheduler.requests:
        recorder.on_schedule(scheduler, scheduler.step())
    recorder.close()
    cost = [r for r in _records(tmp_path) if r["k"] == records.COST][-1]
    assert cost["steps"] == recorder.steps == 30  # prefill gives the first token
    assert cost["hook_ns"] > 0
    assert cost["step_ns"] > 0
    assert cost["dropped"] == cost["errors"] == 0


def test_the_stat_logger_writes_the_api_servers_figures(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # GIVEN vLLM's stat-logger base class and the plugin's directory in the environment
    loggers = types.ModuleType("vllm.v1.metrics.loggers")

    class StatLoggerBase:
        pass

    loggers.StatLoggerBase = StatLoggerBase  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm.v1.metrics.loggers", loggers)
    monkeypatch.delitem(sys.modules, "collectors.vllm_plugin.stat_logger", raising=False)
    monkeypatch.setenv(ENV_DIR, str(tmp_path))
    from collectors.vllm_plugin.stat_logger import OomtraceStatLogger

    # WHEN vLLM hands it an iteration with one finished request
    stat_logger = OomtraceStatLogger(vllm_config=None, engine_index=0)
    finished = types.SimpleNamespace(
        request_id="cmpl-4f0c2a9e-0",
        finish_reason=fakes.FinishReason.LENGTH,
        num_prompt_tokens=1500,
        num_generation_tokens=2000,
        num_preemptions=2,
        max_tokens_param=2000,
        queued_time=1.5,
        prefill_time=0.25,
        decode_time=20.0,
        inference_time=20.25,
        e2e_latency=21.75,
    )
    stat_logger.record(None, types.SimpleNamespace(finished_requests=[finished]))
    stat_logger.record(None, None)
    assert stat_logger.writer is not None
    stat_logger.writer.close()

    # THEN one vllm_done record carries the API id, the lengths and the times in ns
    done = [r for r in _records(tmp_path) if r["k"] == records.DONE]
    assert done == [
        {
            "k": "vllm_done",
            "ts": done[0]["ts"],
            "src": "collector.vllm_api",
            "api": "cmpl-4f0c2a9e-0",
            "why": "length",
            "pt": 1500,
            "gt": 2000,
            "pre": 2,
            "mt": 2000,
            "queue_ns": 1_500_000_000,
            "prefill_ns": 250_000_000,
            "decode_ns": 20_000_000_000,
            "inference_ns": 20_250_000_000,
            "e2e_ns": 21_750_000_000,
        }
    ]
    assert json.dumps(done)  # plain JSON values only
