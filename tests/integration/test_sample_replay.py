"""`oomtrace replay` on the shipped incidents: the what-if reproduces what the engine did under its
recorded settings (calibration), and a search finds a limit that would have avoided it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from oomtrace.cli import cli

SAMPLES = Path(__file__).resolve().parents[2] / "sample_logs"


def replay(*args: str) -> dict[str, object]:
    result = CliRunner().invoke(cli, ["replay", *args, "--json"])
    assert result.exit_code == 0, result.output
    doc: dict[str, object] = json.loads(result.output)
    return doc


def test_the_kv_exhaustion_replays_as_an_overflow_and_a_search_finds_a_safe_limit() -> None:
    # GIVEN the vLLM incident whose pool ran dry and preempted 26 times
    doc = replay(str(SAMPLES / "vllm-kv-exhaustion"), "--search", "max-num-seqs")
    # THEN replayed under its recorded settings the pool overflows, with about as many
    # preemptions as observed, and calibration calls the what-if close
    assert doc["overflow"] is True
    assert isinstance(doc["preemptions"], int)
    assert 20 <= doc["preemptions"] <= 40
    calibration = doc["calibration"]
    assert isinstance(calibration, dict)
    assert str(calibration["verdict"]).startswith("close")
    # AND the search names a max_num_seqs below the recorded 64 with no overflow, at a queueing cost
    best = doc["best"]
    assert isinstance(best, dict)
    assert 0 < best["setting"]["max_num_seqs"] < 64
    assert best["overflow"] is False
    assert best["preemptions"] == 0
    assert best["queue_delay_p99_s"] > doc["queue_delay_p99_s"]
    # AND bytes come from the engine's start-up statements: 3.85 GiB (printed rounded to 0.01 GiB)
    # over 1,971 blocks is 2 MiB per block of 16 tokens, to within that rounding
    assert doc["peak_bytes"] == pytest.approx(doc["peak_blocks"] * 2 * 1024 * 1024, rel=2e-3)


def test_the_prefill_oom_was_not_a_pool_problem() -> None:
    # GIVEN the transient-peak incident: the pool had room when the OOM struck
    doc = replay(str(SAMPLES / "vllm-prefill-oom"))
    # THEN the replay agrees: the KV pool never runs dry under the recorded settings
    assert doc["overflow"] is False
    assert doc["preemptions"] == 0
