"""The HTML report's Content-Security-Policy lets only its own scripts run: each is allowed by
its SHA-256 hash, nothing inline by default, no eval (charts use Vega's expression
interpreter, so no chart needs it). The browser test checks the page still draws."""

from __future__ import annotations

import base64
import hashlib
import re

import pytest

from oomtrace.report import ReportInputs, build_report, render
from tests.unit.report.scenario import incident_findings, incident_lanes, incident_trace


@pytest.fixture(scope="module")
def page() -> str:
    inputs = ReportInputs(incident_findings(), incident_trace(), lanes=incident_lanes())
    return render(build_report(inputs), "html").text


def script_source(page: str) -> list[str]:
    (policy,) = re.findall(r'http-equiv="Content-Security-Policy" content="([^"]*)"', page)
    (sources,) = [d.split()[1:] for d in policy.split(";") if d.split()[:1] == ["script-src"]]
    return sources


def test_no_script_runs_by_being_inline_or_through_eval(page: str) -> None:
    sources = script_source(page)
    assert "'unsafe-eval'" not in sources
    assert "'unsafe-inline'" not in sources


def test_each_of_the_pages_own_scripts_is_allowed_by_its_hash(page: str) -> None:
    scripts = re.findall(r"<script>(.*?)</script>", page, flags=re.DOTALL)
    assert len(scripts) == 2  # the Vega bundle and the embedding code (the specs are JSON)
    hashes = [
        "'sha256-" + base64.b64encode(hashlib.sha256(s.encode()).digest()).decode() + "'"
        for s in scripts
    ]
    assert script_source(page) == hashes


def test_charts_are_embedded_with_the_expression_interpreter(page: str) -> None:
    assert "ast: true" in page
