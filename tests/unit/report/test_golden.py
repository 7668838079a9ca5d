"""Golden reports: the same inputs give byte-identical reports (no run timestamps, no absolute
paths, fixed number formats), reviewed as diffs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oomtrace.report import Report, ReportInputs, build_report, render
from oomtrace.terminal import render_report
from tests.unit.report.golden import check_golden
from tests.unit.report.scenario import (
    incident_findings,
    incident_lanes,
    incident_trace,
    modelled_series,
)


@pytest.fixture(scope="module")
def report() -> Report:
    inputs = ReportInputs(
        incident_findings(), incident_trace(), modelled_series(), incident_lanes()
    )
    return build_report(inputs)


def test_text_report_matches_its_golden_file(report: Report) -> None:
    check_golden("report/kv-scenario/report.txt", render_report(report))


def test_json_report_matches_its_golden_file(report: Report) -> None:
    check_golden("report/kv-scenario/report.json", render(report, "json").text)


def test_markdown_report_matches_its_golden_file_and_links_its_charts(report: Report) -> None:
    rendered = render(report, "markdown", asset_dir="report-charts")
    check_golden("report/kv-scenario/report.md", rendered.text)
    assert sorted(rendered.assets) == [
        "report-charts/activity.svg",
        "report-charts/budget.svg",
        "report-charts/cause.svg",
        "report-charts/lanes.svg",
        "report-charts/memory.svg",
    ]
    for svg in rendered.assets.values():
        assert svg.startswith(b"<svg")
        assert b"<path" in svg


def test_reports_are_deterministic_and_free_of_paths(report: Report) -> None:
    again = build_report(
        ReportInputs(incident_findings(), incident_trace(), modelled_series(), incident_lanes())
    )
    assert render_report(report) == render_report(again)
    for fmt in ("json", "html"):
        assert render(report, fmt).text == render(again, fmt).text  # type: ignore[arg-type]
    text = render(report, "json").text
    assert str(Path.cwd()) not in text
    assert "/tmp" not in text
    json.loads(text)
