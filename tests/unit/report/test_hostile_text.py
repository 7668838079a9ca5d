"""Text from logs is data, never markup: a request id full of markup renders as text in every
format of the report."""

from __future__ import annotations

import json
import re

import pytest

from oomtrace.report import ReportInputs, build_report, render
from oomtrace.terminal import render_report
from tests.hostile import HOSTILE, Collector, markdown_html
from tests.unit.report.scenario import incident_findings, incident_lanes, incident_trace


@pytest.fixture(scope="module")
def hostile_report() -> object:
    ids = HOSTILE[:3]
    trace = incident_trace(ids)
    return build_report(ReportInputs(incident_findings(ids), trace, lanes=incident_lanes(ids)))


def test_markup_ids_are_text_in_the_terminal(hostile_report: object) -> None:
    text = render_report(hostile_report)  # type: ignore[arg-type]
    for hostile in HOSTILE[:3]:
        assert hostile in text
    assert "\x1b" not in text


def test_markup_ids_are_text_in_json(hostile_report: object) -> None:
    doc = json.loads(render(hostile_report, "json").text)  # type: ignore[arg-type]
    ids = [c["request_id"] for c in doc["verdict"]["culprits"]]
    assert ids == list(HOSTILE[:3])


def test_markup_ids_are_text_in_markdown(hostile_report: object) -> None:
    # GIVEN the Markdown report, rendered as a tracker would render it
    rendered = markdown_html(render(hostile_report, "markdown", asset_dir="c").text)  # type: ignore[arg-type]
    parsed = Collector()
    parsed.feed(rendered)
    # THEN no element came from an id, and every id reads as itself
    assert "script" not in parsed.tags
    assert parsed.tags.count("img") == 4  # the four charts, nothing else
    assert all(re.fullmatch(r"c/\w+\.svg", src) for src in re.findall(r'src="([^"]+)"', rendered))
    text = "".join(parsed.text)
    for hostile in HOSTILE[:3]:
        assert hostile in text


def test_markup_ids_are_text_in_html(hostile_report: object) -> None:
    # GIVEN the HTML page without its scripts (the browser test runs them)
    page = render(hostile_report, "html").text  # type: ignore[arg-type]
    body = page[: page.index("<script>")]
    parsed = Collector()
    parsed.feed(body)
    # THEN the ids are text nodes and created no element
    assert "img" not in parsed.tags
    assert "script" not in parsed.tags
    text = "".join(parsed.text)
    for hostile in HOSTILE[:3]:
        assert hostile in text
    specs = page[page.index('id="oomtrace-specs">') :]
    assert "<script>alert" not in specs[: specs.index("</script>")]
