"""The whole chain: scenario traces with known culprits -> ``analyze`` -> report, in every format,
from the findings object and from its JSON document alike."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from oomtrace.analysis import analyze
from oomtrace.analysis.findings import dumps
from oomtrace.report import build_report, render
from oomtrace.report.inputs import from_findings_document, from_findings_object
from oomtrace.terminal import render_report
from tests import scenarios
from tests.unit.report.golden import check_golden

SHAPES: list[Callable[[], scenarios.Scenario]] = [
    scenarios.long_requests_growing,
    scenarios.prefill_peak,
    scenarios.admission_burst,
    scenarios.foreign_process,
    scenarios.slow_leak,
    scenarios.fragmentation,
    scenarios.startup_misfit,
]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.__name__)
def test_the_report_names_the_class_and_culprits_the_analysis_found(
    shape: Callable[[], scenarios.Scenario],
) -> None:
    # GIVEN a trace whose class and culprits are known by construction
    scenario = shape()
    findings = analyze(scenario.trace)
    # WHEN the report is built from the findings
    report = build_report(from_findings_object(findings, scenario.trace))
    doc = json.loads(render(report, "json").text)
    # THEN its verdict is the analysis' class and its culprits come in the analysis' order
    assert doc["verdict"]["class"] == scenario.cls
    named = [c["request_id"] for c in doc["verdict"]["culprits"]]
    shown = min(len(named), len(scenario.culprits))
    assert named[:shown] == list(scenario.culprits)[:shown]
    assert bool(named) == bool(scenario.culprits)
    text = render_report(report)
    for request_id in scenario.culprits:
        assert request_id in text


@pytest.mark.parametrize("shape", SHAPES[:3], ids=lambda s: s.__name__)
def test_the_findings_document_gives_the_same_report_as_the_object(
    shape: Callable[[], scenarios.Scenario],
) -> None:
    # GIVEN the findings of one analysis, in memory and as `analyze --json` wrote them
    scenario = shape()
    findings = analyze(scenario.trace)
    document = json.loads(dumps(findings))
    # WHEN a report is built from each
    from_object = build_report(from_findings_object(findings, scenario.trace))
    from_document = build_report(from_findings_document(document, scenario.trace))
    # THEN the verdict, the culprits, the ledger and the swimlanes agree
    assert from_document.verdict == from_object.verdict
    assert from_document.section("ledger") == from_object.section("ledger")
    lanes_a = from_object.section("lanes").charts[0].data
    lanes_b = from_document.section("lanes").charts[0].data
    assert lanes_a.equals(lanes_b)


def test_a_kv_exhaustion_report_matches_its_golden_files() -> None:
    scenario = scenarios.long_requests_growing()
    report = build_report(from_findings_object(analyze(scenario.trace), scenario.trace))
    check_golden("report/long-requests-growing/report.txt", render_report(report))
    check_golden(
        "report/long-requests-growing/report.md",
        render(report, "markdown", asset_dir="report-charts").text,
    )
