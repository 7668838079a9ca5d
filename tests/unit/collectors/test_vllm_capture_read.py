"""The vLLM plugin's records read back by read_capture: every step, lifecycle event and block
change in order, snapshots once each across rotated segments, and a newer plugin's records
refused with the version named."""

from __future__ import annotations

import os
from pathlib import Path

from collectors.format import Header, encode
from collectors.segments import read_capture
from collectors.vllm_plugin import records
from collectors.vllm_plugin.settings import PluginSettings
from collectors.writer import WriterSettings
from tests import vllm_fakes as fakes


def _run_recorded(directory: Path, *, segment_bytes: int = 64 << 20) -> None:
    settings = PluginSettings(
        directory=directory,
        node="n1",
        writer=WriterSettings(max_segment_bytes=segment_bytes),
        snapshot_interval_s=0.0005,
    )
    fakes.recorded_run(directory, [(100, 120)] * 3 + [(20, 10)] * 8, settings=settings)


def test_steps_lifecycle_and_blocks_read_back_in_order(tmp_path: Path) -> None:
    _run_recorded(tmp_path)
    vllm = read_capture(tmp_path).vllm

    steps = vllm.steps.as_dict()
    assert steps["step"] == list(range(1, len(vllm.steps) + 1))
    assert set(steps["stream"]) == {f"vllm-{os.getpid()}"}
    life = vllm.lifecycle.as_dict()
    events = set(life["event"])
    assert {"new", "preempted", "resumed", "finished"} <= events
    preempted = [b for e, b in zip(life["event"], life["blocks"], strict=True) if e == "preempted"]
    assert all(b > 0 for b in preempted)
    assert len(vllm.admitted) == 11
    assert sorted(vllm.released.as_dict()["api_id"]) == [f"cmpl-{i:04d}-0" for i in range(11)]
    assert set(vllm.released.as_dict()["finish_reason"]) == {"length"}
    engine = next(iter(vllm.engines.values()))
    assert engine["record_version"] == records.RECORD_VERSION


def test_each_rotated_segment_starts_with_the_latest_snapshot_read_once(tmp_path: Path) -> None:
    _run_recorded(tmp_path, segment_bytes=6000)
    segments = sorted(tmp_path.glob("*.oseg"))
    assert len(segments) > 5
    for path in segments[1:]:
        kinds = [
            line.split(b'"k":"', 1)[1].split(b'"', 1)[0] for line in path.read_bytes().splitlines()
        ]
        # header, then the sticky info and the latest snapshot: a segment reads alone
        assert kinds[:3] == [b"header", b"info", b"vllm_snap"] or kinds[:3] == [
            b"header", b"vllm_snap", b"info"
        ]  # fmt: skip
    vllm = read_capture(tmp_path).vllm
    snaps = vllm.snapshots.as_dict()
    assert len(set(zip(snaps["stream"], snaps["ts_ns"], strict=True))) == len(vllm.snapshots)


def test_a_newer_plugins_records_are_refused_with_its_version(tmp_path: Path) -> None:
    header = Header(1, "n1", "vllm-9", records.WRITER, 9, 1_000, 1).to_record()
    lines = [
        header,
        {"k": "info", "ts": 1_001, "src": records.ENGINE_SOURCE,
         "data": {"plugin": records.PLUGIN_NAME, "record_version": 7}},
        {"k": records.STEP, "ts": 1_002, "src": records.ENGINE_SOURCE, "n": 1, "run": 1,
         "wait": 0, "tok": 5, "new": ["r"], "meaning": "changed"},
        {"k": records.STEP, "ts": 1_003, "src": records.ENGINE_SOURCE, "n": 2, "run": 1,
         "wait": 0, "tok": 1},
        {"k": "s", "ts": 1_004, "src": "collector.nvml", "dev": 0,
         "m": {"device_used_bytes": 5}},
    ]  # fmt: skip
    (tmp_path / "seg-20260101T000000.000000Z-vllm-9-000001.oseg").write_bytes(
        b"".join(encode(line) for line in lines)
    )

    capture = read_capture(tmp_path)

    assert not capture.vllm
    (diag,) = [d for d in capture.diagnostics if d.kind == "newer_plugin"]
    assert diag.count == 2
    assert "version 7" in diag.detail
    assert "upgrade oomtrace" in diag.detail
    assert capture.samples.metric == ["device_used_bytes"]  # the rest is still read


def test_a_plugin_drop_is_reported_with_its_reason(tmp_path: Path) -> None:
    header = Header(1, "n1", "vllm-9", records.WRITER, 9, 1_000, 1).to_record()
    drop = {"k": "drop", "ts": 1_002, "src": records.ENGINE_SOURCE, "n": 12,
            "why": "the plugin's step queue was full"}  # fmt: skip
    (tmp_path / "seg-20260101T000000.000000Z-vllm-9-000001.oseg").write_bytes(
        encode(header) + encode(drop)
    )
    (diag,) = read_capture(tmp_path).diagnostics
    assert (diag.kind, diag.count, diag.detail) == (
        "dropped_records",
        12,
        "the plugin's step queue was full",
    )
