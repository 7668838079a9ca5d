"""Calibration against the observed run: errors, preemption counts and the verdict."""

from __future__ import annotations

from typing import Any

import pytest

from oomtrace.errors import InputError
from oomtrace.replay import build_workload, calibrate, recorded_settings
from oomtrace.trace import Manifest
from tests.factories import at
from tests.unit.replay.helpers import lifecycle, trace_of

CONFIG = {"num_gpu_blocks": 100, "block_size": 16, "max_num_seqs": 8}


def kv_used(*points: tuple[float, float]) -> list[dict[str, Any]]:
    return [
        {"ts": at(t), "metric": "kv_blocks_used", "value": v, "device": None} for t, v in points
    ]


def one_request(samples: list[dict[str, Any]]) -> Any:
    # a 64-token prompt (4 blocks), a token a second from 1 s: 5 blocks from 1 s (65 tokens),
    # 6 blocks from 17 s (81 tokens), finished at 33 s
    return trace_of(
        lifecycle("a", 0.0, prompt=64, output=33, prefill_s=1.0, decode_s=32.0),
        samples=samples,
        engine_config=CONFIG,
    )


def test_a_replay_that_reproduces_the_observed_pool_is_called_close() -> None:
    # GIVEN observed block counts that match the request's growth, and no preemptions
    samples = kv_used((0.5, 4), (10, 5), (20, 6))
    samples += [
        {"ts": at(t), "metric": "preemptions_total", "value": 0.0, "device": None}
        for t in (0.0, 30.0)
    ]
    trace = one_request(samples)
    # WHEN calibrated with the recorded settings
    cal = calibrate(trace, build_workload(trace), recorded_settings(trace.manifest))
    # THEN the error is zero and the verdict says how far to trust the what-if
    assert (cal.samples, cal.kv_usage_mae, cal.kv_usage_max_error) == (3, 0.0, 0.0)
    assert (cal.preemptions_observed, cal.preemptions_simulated) == (0, 0)
    assert cal.preemptions_observed_from == "increase of preemptions_total"
    assert cal.verdict == (
        "close: simulated KV usage is off by 0.0 points on average (0.0 at worst) over 3 "
        "sample(s); preemptions simulated 0, observed 0; the what-if can be trusted for overflow, "
        "peaks and preemption counts to within about that error"
    )


def test_a_replay_far_from_the_observed_pool_is_called_poor() -> None:
    # GIVEN an engine that reported 50 blocks used while the request held 5
    trace = one_request(kv_used((10, 50), (20, 56)))
    # WHEN calibrated
    cal = calibrate(trace, build_workload(trace), recorded_settings(trace.manifest))
    # THEN the error is 45 and 50 points and the verdict warns against the numbers
    assert cal.kv_usage_mae == pytest.approx(0.475)
    assert cal.kv_usage_max_error == pytest.approx(0.5)
    assert cal.verdict.startswith("poor: simulated KV usage is off by 47.5 points on average")
    assert cal.verdict.endswith(
        "do not rely on the what-if's numbers: the replay does not reproduce this run"
    )


def test_a_reset_preemption_counter_counts_again_from_zero() -> None:
    # GIVEN a counter that rises 5 -> 7, restarts at 2, rises to 4
    samples = [
        {"ts": at(t), "metric": "preemptions_total", "value": v, "device": None}
        for t, v in ((1, 5.0), (2, 7.0), (3, 2.0), (4, 4.0))
    ]
    trace = one_request(samples)
    # WHEN calibrated
    cal = calibrate(trace, build_workload(trace), recorded_settings(trace.manifest))
    # THEN 2 + 2 + 2 preemptions were observed, against none simulated
    assert cal.preemptions_observed == 6
    assert cal.verdict.startswith("unchecked: no KV usage was observed")


def test_recorded_settings_need_the_size_of_the_pool() -> None:
    # GIVEN a manifest with neither num_gpu_blocks nor kv_cache_tokens
    manifest = Manifest(engine_config={"block_size": 16})
    # WHEN the recorded settings are read THEN the error names the remedy
    with pytest.raises(InputError, match="states neither num_gpu_blocks nor the KV cache size"):
        recorded_settings(manifest)


def test_the_caveats_of_one_node_count_only_that_nodes_prefix_cache_hits() -> None:
    # GIVEN a request on node-a, and on node-b a request whose events report prefix-cache hits
    other = [
        {**row, "node": "node-b", "cached_tokens": 16}
        for row in lifecycle("b", 0.0, prompt=64, output=33, prefill_s=1.0, decode_s=32.0)
    ]
    trace = trace_of(
        lifecycle("a", 0.0, prompt=64, output=33, prefill_s=1.0, decode_s=32.0),
        other,
        engine_config=CONFIG,
    )
    # WHEN node-a is calibrated
    workload = build_workload(trace, node="node-a")
    cal = calibrate(trace, workload, recorded_settings(trace.manifest), node="node-a")
    # THEN node-b's prefix-cache hits are not among node-a's caveats
    assert cal.caveats == ()
