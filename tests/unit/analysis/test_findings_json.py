"""The findings document: versioned, stable, deterministic, with what the report needs."""

from __future__ import annotations

import json
import re
from typing import Any

import polars as pl
import pytest

from oomtrace.analysis import analyze
from oomtrace.analysis.findings import dumps
from tests import scenarios

ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return json.loads(dumps(analyze(scenarios.long_requests_growing().trace)))


def test_the_document_is_versioned_and_has_the_agreed_keys(document: dict[str, Any]) -> None:
    assert document["findings_version"] == 1
    assert {
        "incidents",
        "spikes",
        "reconciliation",
        "gaps",
        "kv_model",
        "decode_rate",
        "trace",
        "options",
        "series",
    } <= set(document)
    incident = document["incidents"][0]
    assert incident["primary"] is True
    for key in (
        "class",
        "start",
        "peak_ts",
        "peak_bytes",
        "coverage",
        "culprits",
        "evidence",
        "ledger",
    ):
        assert key in incident
    culprit = incident["culprits"][0]
    assert {"request_id", "share", "tokens", "bytes", "reason"} <= set(culprit)
    assert culprit["request_id"] == "long-1"
    assert 0.0 <= incident["coverage"] <= 1.0


def test_the_kv_model_states_its_provenance(document: dict[str, Any]) -> None:
    assert document["kv_model"]["basis"] == "engine_blocks"
    assert document["kv_model"]["bytes_per_block"] == 2 * 2**20


def test_timestamps_are_fixed_width_utc(document: dict[str, Any]) -> None:
    incident = document["incidents"][0]
    for key in ("start", "peak_ts", "window_start"):
        assert ISO.match(incident[key]), incident[key]
    for row in incident["evidence"]:
        assert row["ts"] is None or ISO.match(row["ts"])


def test_two_runs_give_byte_identical_documents() -> None:
    trace = scenarios.prefill_peak().trace
    assert dumps(analyze(trace)) == dumps(analyze(trace))


def test_keys_are_sorted_and_nothing_depends_on_the_run() -> None:
    text = dumps(analyze(scenarios.foreign_process().trace))
    assert text == json.dumps(json.loads(text), indent=2, sort_keys=True, ensure_ascii=True) + "\n"
    assert "/tmp" not in text
    assert "/home" not in text


def test_series_keep_their_peak_after_downsampling() -> None:
    findings = analyze(scenarios.long_requests_growing().trace)
    document = json.loads(dumps(findings))
    kv = next(s for s in document["series"] if s["series"].startswith("kv_used"))
    assert kv["unit"] == "bytes"
    peak = max(v for _, v in kv["points"])
    # the highest observation at full resolution survives downsampling (the incident's moment is
    # the fill, earlier and lower: its peak_bytes are below it)
    full = findings.series.filter(pl.col("series") == kv["series"])["value"].max()
    assert peak == full
    assert peak >= document["incidents"][0]["peak_bytes"]


def test_requests_in_the_window_carry_their_culprit_rank(document: dict[str, Any]) -> None:
    lanes = document["incidents"][0]["requests_in_window"]
    ranks = {lane["request_id"]: lane["culprit_rank"] for lane in lanes}
    assert ranks["long-1"] == 1
    assert all(ISO.match(lane["from_ts"]) for lane in lanes)
