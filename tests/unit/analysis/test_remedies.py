"""Remedies: each incident gets the setting that would have prevented it, computed from the trace,
with the numbers behind it (``Findings.remedies``, JSON key ``remedies``)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from oomtrace.analysis import AnalyzeOptions, analyze
from oomtrace.analysis.findings import dumps
from oomtrace.replay import ReplaySettings, build_workload, recorded_settings
from oomtrace.replay import replay as run_replay
from oomtrace.replay.limits import replay_limits
from tests import scenarios


def test_a_kv_exhaustion_gets_the_limits_its_replay_shows_passing() -> None:
    # GIVEN three long generations that fill the pool until it preempts
    scenario = scenarios.long_requests_growing()
    # WHEN analysed with the replay plugged in
    findings = analyze(scenario.trace, AnalyzeOptions(limit_search=replay_limits))
    # THEN every remedy is a limit found by replaying the incident's traffic, with its cost
    by_setting = {r.setting: r for r in findings.remedies}
    assert all(r.incident == "I1" and r.basis == "replay" for r in findings.remedies)
    assert all("queueing p50" in r.detail for r in findings.remedies)
    # the three long requests (contract 1,000 + 8,192) are what a shorter model length refuses
    length = by_setting["--max-model-len"]
    assert length.value == str(1000 + 8192 - 1)
    assert length.action == "set --max-model-len 9191 (refuses 3 of 111 requests)"
    # one sequence at a time never runs dry, but queues for minutes: the action says so
    seqs = by_setting["--max-num-seqs"]
    assert seqs.action.startswith(f"set --max-num-seqs {seqs.value} (costs ")
    # the refusing limit comes first: refusing 3 requests costs less than making all wait
    assert findings.remedies[0] is length
    # AND the value named really passes a replay of the same traffic; one step laxer fails
    workload = build_workload(scenario.trace)
    recorded = recorded_settings(scenario.trace.manifest)
    value = int(seqs.value or 0)
    passing = run_replay(workload, replace(recorded, max_num_seqs=value), series_points=0)
    failing = run_replay(workload, replace(recorded, max_num_seqs=value + 1), series_points=0)
    assert passing.summary.passes
    assert not failing.summary.passes


def test_without_a_replay_a_kv_exhaustion_gets_the_budget_bound_and_says_its_cost_is_unknown() -> (
    None
):
    scenario = scenarios.long_requests_growing()
    findings = analyze(scenario.trace, AnalyzeOptions())
    (remedy,) = findings.remedies
    # every resident request at its whole contract: 16,000 tokens of pool / 9,200 tokens = 1
    contract = 1000 + 8192
    pool = scenario.trace.manifest.engine_config["num_gpu_blocks"] * 16
    assert remedy.basis == "budget"
    assert remedy.setting == "--max-num-seqs"
    assert remedy.value == str(pool // (-(-contract // 16) * 16))
    assert "not measured (no replay was run)" in remedy.detail


def test_fragmentation_gets_the_allocator_setting() -> None:
    findings = analyze(scenarios.fragmentation().trace)
    (remedy,) = findings.remedies
    assert remedy.setting == "PYTORCH_CUDA_ALLOC_CONF"
    assert remedy.value == "expandable_segments:True"
    assert remedy.basis == "allocator"
    assert "6.00 GiB were reserved but unallocated, more than the 3.00 GiB" in remedy.detail
    assert remedy.evidence
    assert remedy.evidence[0].table == "events"


def test_remedies_lead_the_json_document_in_priority_order() -> None:
    findings = analyze(scenarios.long_requests_growing().trace, AnalyzeOptions())
    document = json.loads(dumps(findings))
    (remedy,) = document["remedies"]
    assert set(remedy) >= {"incident", "action", "setting", "value", "basis", "detail", "evidence"}
    assert remedy["figures"]["max_num_seqs"] == int(remedy["value"])


@pytest.mark.parametrize("name", ["sglang"])
def test_a_remedy_names_the_engines_own_flag(name: str) -> None:
    scenario = scenarios.long_requests_growing()
    trace = scenario.trace
    trace.manifest.engine["name"] = name
    (remedy,) = analyze(trace).remedies
    assert remedy.setting == "--max-running-requests"
    assert remedy.action.startswith("set --max-running-requests ")


def test_replay_limits_returns_nothing_without_a_recorded_pool() -> None:
    trace = scenarios.long_requests_growing().trace
    trace.manifest.engine_config.pop("num_gpu_blocks")
    trace.manifest.engine_config.pop("available_kv_cache_bytes")
    assert replay_limits(trace.requests, trace.manifest, kv_bytes_per_token=None) is None
    assert isinstance(ReplaySettings(kv_blocks=1), ReplaySettings)


def test_a_misfit_gets_the_engines_own_estimate_of_the_length_that_fits() -> None:
    # GIVEN vLLM V1's refusal: 16 GiB needed for 131,072 tokens, 9.38 GiB available, and its own
    # estimate of the longest request that fits (its message, as the vLLM parser reads it)
    b = scenarios.ScenarioBuilder(duration=20.0, pool_blocks=100)
    b.events.append(
        {
            "ts": scenarios.at(15.0),
            "kind": "startup_kv_insufficient",
            "requested_bytes": 16 << 30,
            "free_bytes": 10_071_698_309,
            "detail": "max seq len 131072 needs 16.00 GiB of KV cache; 9.38 GiB available; "
            "estimated maximum model length 76784",
        }
    )
    (remedy,) = analyze(b.build()).remedies
    assert remedy.action == "set --max-model-len 76784"
    assert remedy.basis == "budget"
    assert "the engine's own estimate" in remedy.detail
    assert "the model's 131,072 need 16.00 GiB" in remedy.detail


def test_a_transient_peak_gets_a_chunk_that_fits_and_the_utilisation_that_leaves_room() -> None:
    # GIVEN a 24,000-token prompt in prefill when a 6 GiB allocation failed (prefill_peak)
    findings = analyze(scenarios.prefill_peak().trace)
    incident = findings.primary
    assert incident is not None
    assert incident.cls == "transient_peak"
    by_setting = {r.setting: r for r in findings.remedies}
    share = by_setting["--gpu-memory-utilization"]
    # 0.95 less what the allocation lacked as a share of the 30 GiB device, less 1 %
    check = next(c for c in incident.checks if c.cls == "transient_peak")
    lacked = int(check.figure("requested_bytes") or 0) - int(check.figure("room_bytes") or 0)
    expected = int((0.95 - lacked / (30 << 30) - 0.01) * 100) / 100
    assert share.value == f"{expected:.2f}"
    assert share.basis == "budget"
