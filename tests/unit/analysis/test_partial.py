"""Partial traces are analysed with their gaps stated; an unusable one gets a one-line reason."""

from __future__ import annotations

import pytest

from oomtrace.analysis import analyze
from oomtrace.analysis.options import AnalyzeOptions
from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.errors import InputError
from oomtrace.schema import empty
from oomtrace.terminal import render_summary
from oomtrace.trace import Manifest, Trace
from oomtrace.units import GiB
from tests import scenarios
from tests.factories import at, events, requests, samples

MANIFEST = Manifest(
    engine_config={"block_size": 16, "num_gpu_blocks": 100, "available_kv_cache_bytes": 100 * 2**20}
)


def gap_kinds(trace: Trace) -> set[str]:
    return {g.kind for g in analyze(trace).gaps}


def test_an_empty_trace_cannot_be_analysed_and_says_why() -> None:
    with pytest.raises(InputError) as err:
        analyze(Trace())
    assert str(err.value) == (
        "the trace holds no samples, requests or events: nothing to analyse; check that ingest "
        "recognised the input files (see manifest.json sources)"
    )


def test_a_node_that_is_not_in_the_trace_is_refused_with_the_nodes_it_has() -> None:
    trace = scenarios.fragmentation().trace
    with pytest.raises(
        InputError, match=r"^--node 'gpu-9': no rows on that node; the trace has node-a$"
    ):
        analyze(trace, AnalyzeOptions(node="gpu-9"))


def test_without_requests_the_incident_is_found_but_names_no_culprits() -> None:
    # GIVEN memory samples and an OOM, but no request lifecycle
    full = scenarios.prefill_peak().trace
    trace = Trace(full.samples, empty("requests"), full.events, full.manifest)
    findings = analyze(trace)
    incident = findings.primary
    assert incident is not None
    assert incident.culprits == ()
    assert incident.coverage == 0.0
    assert "no_requests" in {g.kind for g in findings.gaps}


def test_without_samples_an_oom_still_anchors_the_incident() -> None:
    # GIVEN only the engine log: requests and an OOM whose text gave no totals
    trace = Trace(
        requests=requests(
            {
                "ts": at(0),
                "request_id": "a",
                "event": "admitted",
                "prompt_tokens": 900,
                "max_tokens": 9,
            },
        ),
        events=events({"ts": at(5), "kind": "oom", "requested_bytes": GiB}),
        manifest=MANIFEST,
    )
    findings = analyze(trace)
    incident = findings.primary
    assert incident is not None
    assert (incident.anchor, incident.peak_ts) == ("oom", at(5))
    assert incident.coverage is None
    assert incident.coverage_basis == "nothing observed at the peak"
    assert incident.ledger.resident_requests == 1
    assert {"no_samples", "single_source"} <= {g.kind for g in findings.gaps}


def _requests_alone(*extra: dict[str, object]) -> Trace:
    return Trace(
        requests=requests(
            *[
                {
                    "ts": at(i),
                    "request_id": f"r{i}",
                    "event": "admitted",
                    "prompt_tokens": 300,
                    "max_tokens": 5,
                }
                for i in range(6)
            ],
            {"ts": at(60), "request_id": "r0", "event": "finished", "output_tokens": 5},
            *extra,
        ),
        manifest=MANIFEST,
    )


def test_requests_alone_are_analysed_on_the_modelled_pool() -> None:
    # GIVEN only request lines, whose model fills the pool, and a preemption the engine stated
    trace = _requests_alone({"ts": at(8), "request_id": "r5", "event": "preempted"})
    findings = analyze(trace)
    incident = findings.primary
    assert incident is not None
    assert incident.spikes[0].kind == "modelled"
    assert incident.coverage is None


def test_a_modelled_pool_alone_is_not_evidence_of_an_incident() -> None:
    # GIVEN the same requests without any preemption: the model counts the five that never
    # finished until the trace ends, and nothing the engine said shows pressure
    findings = analyze(_requests_alone())
    # THEN the modelled spike stays a spike; a model that over-counts is not an incident
    assert findings.spikes
    assert findings.incidents == ()


def test_requests_without_any_kv_bytes_statement_are_analysed_in_tokens() -> None:
    # GIVEN requests and a KV usage series, but no statement of KV bytes (a log rotated after
    # start-up, no --config): the KV model has tokens and blocks only
    trace = Trace(
        samples=samples(
            *[
                {"ts": at(t), "metric": "kv_usage_ratio", "value": 0.99 if t >= 20 else 0.1}
                for t in range(60)
            ]
        ),
        requests=requests(
            {"ts": at(1), "request_id": "a", "event": "arrived", "prompt_tokens": 100},
            {"ts": at(50), "request_id": "a", "event": "finished", "output_tokens": 40},
            {"ts": at(2), "request_id": "b", "event": "arrived", "prompt_tokens": 10},
            {"ts": at(9), "request_id": "b", "event": "finished", "output_tokens": 4},
        ),
        manifest=Manifest(nodes=["node-a"]),
    )
    # WHEN it is analysed
    findings = analyze(trace)
    # THEN the request resident at the peak is named with its tokens and no bytes
    assert findings.kv_model["basis"] == "none"
    assert findings.primary is not None
    (culprit,) = findings.primary.culprits
    assert (culprit.request_id, culprit.bytes) == ("a", None)
    assert culprit.tokens is not None


def test_holes_in_sample_series_are_gaps_with_their_times() -> None:
    rows = [{"ts": at(t), "metric": "device_used_bytes", "value": float(GiB)} for t in range(10)]
    rows += [
        {"ts": at(t), "metric": "device_used_bytes", "value": float(GiB)} for t in range(40, 50)
    ]
    findings = analyze(Trace(samples=samples(*rows), manifest=MANIFEST))
    holes = [g for g in findings.gaps if g.kind == "hole"]
    assert [(g.start, g.end) for g in holes] == [(at(9), at(40))]
    assert "silent for 31.0 s" in holes[0].detail


def test_source_diagnostics_become_gaps_without_paths() -> None:
    diag = SourceDiagnostics(name="/var/log/vllm/server.log", parser="vllm-log", node="node-a")
    diag.skip("unrecognised line", 12, "garbage")
    diag.note("year assumed 2025")
    manifest = Manifest(sources=[diag], clock={"year": 2025})
    trace = Trace(
        samples=samples({"ts": at(0), "metric": "device_used_bytes", "value": 1.0}),
        manifest=manifest,
    )
    gaps = analyze(trace).gaps
    skipped = next(g for g in gaps if g.kind == "skipped_lines")
    assert (skipped.source, skipped.count) == ("server.log", 12)
    assert any(g.kind == "note" and g.detail == "year assumed 2025" for g in gaps)
    # A manifest written before sources kept their own clock: one sentence for the trace.
    assert any(g.kind == "clock" and g.detail == "year 2025" for g in gaps)
    assert [g.category for g in gaps if g.kind in ("skipped_lines", "clock")] == [
        "gap",
        "assumption",
    ]


def test_missing_kinds_of_series_are_named() -> None:
    trace = Trace(
        samples=samples({"ts": at(0), "metric": "kv_usage_ratio", "value": 0.5}), manifest=MANIFEST
    )
    kinds = gap_kinds(trace)
    assert {"no_device_memory", "no_allocator", "no_requests"} <= kinds
    assert "no_kv_observation" not in kinds


def test_requests_without_stated_ends_or_lengths_are_counted() -> None:
    trace = Trace(
        requests=requests(
            {"ts": at(0), "request_id": "a", "event": "arrived", "max_tokens": 50},
            {"ts": at(1), "request_id": "b", "event": "arrived", "prompt_tokens": 5},
        ),
        manifest=MANIFEST,
    )
    details = {g.kind: g.detail for g in analyze(trace).gaps}
    assert details["no_admission"].startswith("2 residencies without a stated admission")
    assert (
        details["no_prompt_tokens"]
        == "1 requests without prompt_tokens: their stored tokens start from zero"
    )
    assert details["no_max_tokens"] == "1 requests without max_tokens: their upper bound is unknown"


def test_the_summary_lists_real_gaps_once_folded_per_source_and_only_counts_assumptions() -> None:
    # GIVEN a log with two skip reasons, a note on how it was read, and a clock stated by prefix
    diag = SourceDiagnostics(name="logs/vllm.log", parser="vllm-log", node="node-a")
    diag.lines_read, diag.lines_recognised = 40, 10
    diag.skip("uvicorn access line", 20, "INFO: 10.0.0.1 POST")
    diag.skip("vLLM record of a kind not used", 10, "INFO resolved")
    diag.note("stats lines come from 2 data-parallel engines")
    diag.clock = {"tz": "UTC", "tz_source": "kubectl/docker timestamps", "tz_assumed": False}
    trace = Trace(
        samples=samples(
            {"ts": at(0), "metric": "device_used_bytes", "value": 1.0},
            {"ts": at(0), "metric": "kv_usage_ratio", "value": 0.5, "source": "other"},
        ),
        manifest=Manifest(nodes=["node-a"], sources=[diag]),
    )
    # WHEN the terminal summary is written
    findings = analyze(trace)
    text = render_summary(findings)
    gaps = text[text.index("Data gaps") : text.index("KV model")]
    # THEN skipped lines are one line for the source, the missing series are named, and the
    # note and the clock are counted as assumptions, not listed
    assert "  - vllm.log: 30 line(s) skipped (2 reasons; listed in the report)\n" in gaps
    assert "  - no PyTorch allocator series (reserved, allocated)\n" in gaps
    assert "data-parallel" not in gaps
    assert "kubectl" not in gaps
    assert "Assumptions: 2 (how times were placed, what was inferred)" in gaps
    listed = [line for line in gaps.splitlines() if line.startswith("  - ")]
    assert len(listed) == len(set(listed))
    # AND the JSON keeps every entry, each with its category
    document = findings.to_json()["gaps"]
    assert {(g["kind"], g["category"]) for g in document} >= {
        ("skipped_lines", "gap"),
        ("note", "assumption"),
        ("clock", "assumption"),
        ("no_allocator", "gap"),
    }
