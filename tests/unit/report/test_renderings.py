"""What each format shows the reader: the verdict first (what, who by whole id, the fix), the
header in the server's own words, plain Markdown tables, terminal text that fits its width."""

from __future__ import annotations

import re

import pytest

from oomtrace.report import ReportInputs, build_report, render
from oomtrace.report.document import Report
from oomtrace.report.header import engine_text
from oomtrace.terminal import render_report, render_report_summary
from oomtrace.trace import Manifest, Trace
from tests.hostile import Collector, markdown_html
from tests.unit.report.scenario import incident_findings, incident_lanes, incident_trace

LONG = (
    "cmpl-858c08ce99bf0b8b50aaa8ab891a490f-0",
    "cmpl-9b9ebd0efb5e7c252755c1dece2ca2e9-0",
    "cmpl-52cbd4358a2ed11fbf1dc22694964dc3-0",
)


@pytest.fixture(scope="module")
def report() -> Report:
    return build_report(
        ReportInputs(incident_findings(LONG), incident_trace(LONG), lanes=incident_lanes(LONG))
    )


def test_the_verdict_is_three_lines_what_who_and_the_fix(report: Report) -> None:
    assert report.verdict.lines == (
        "KV cache pool exhausted at 2025-03-14T09:02:00.000Z",
        "Culprits: " + ", ".join(LONG),
        "Fix (replay): set --max-num-seqs 12",
    )
    # AND every remedy is listed, in the analysis' order, with the numbers behind it
    actions = [r["action"] for r in report.verdict.remedies.records()]
    assert actions == ["set --max-num-seqs 12", "set --max-model-len 8192"]


def test_remedies_of_another_incident_are_not_this_ones(report: Report) -> None:
    findings = incident_findings(LONG)
    findings["remedies"] = [{**r, "incident": "I2"} for r in findings["remedies"]]
    other = build_report(ReportInputs(findings, Trace()))
    assert other.verdict.lines[2].startswith("Fix: the analysis computed none")
    assert other.verdict.remedies.rows == ()


@pytest.mark.parametrize(
    ("engine", "text"),
    [
        ({"name": "vllm", "version": "0.13.0", "version_family": "v1-0.12"}, "vLLM 0.13.0"),
        (
            {"name": "sglang", "version_family": "0.5.0-0.5.3"},
            "SGLang (version not printed; formats of 0.5.0-0.5.3)",
        ),
        ({"name": "llama.cpp"}, "llama.cpp (version not printed)"),
        # a family ingest could not place is not shown (vllm#15105's pasted excerpt)
        ({"name": "vllm", "version_family": "unknown"}, "vLLM (version not printed)"),
    ],
)
def test_the_header_names_the_version_the_server_printed(engine: dict[str, str], text: str) -> None:
    assert engine_text(engine) == text


def test_the_header_names_engine_model_node_and_gpu() -> None:
    trace = incident_trace()
    manifest = Manifest(
        nodes=["gpu-node-12"],
        engine={"name": "vllm", "version": "0.13.0", "version_family": "v1-0.12"},
        engine_config={"served_model_name": "Qwen/Qwen2.5-7B-Instruct"},
    )
    report = build_report(
        ReportInputs({}, Trace(trace.samples, trace.requests, trace.events, manifest))
    )
    assert report.subtitle.startswith(
        "vLLM 0.13.0 · Qwen/Qwen2.5-7B-Instruct · node gpu-node-12 · GPU 24.00 GiB · "
    )
    assert "v1-0.12" not in report.subtitle


def test_markdown_tables_are_plain_with_numbers_as_they_read_and_ids_as_code(
    report: Report,
) -> None:
    text = render(report, "markdown", asset_dir="c").text
    # numbers, sizes and times are never backslash-escaped
    assert "\\." not in text.split("## Data gaps")[0]
    assert "| 1 | `cmpl-858c08ce99bf0b8b50aaa8ab891a490f-0` | 41.0% | 1.64 GiB |" in text
    # the verdict names the culprits as code spans, whole
    assert "- Culprits: `" + "`, `".join(LONG) + "`" in text
    # and a tracker renders every id as the literal text, in a code element
    html = markdown_html(text)
    parsed = Collector()
    parsed.feed(html)
    for request_id in LONG:
        assert f"<code>{request_id}</code>" in html


def test_an_id_with_backticks_and_pipes_stays_one_cell_of_code() -> None:
    tricky = ("a|b`c`d", "``x``", "plain")
    report = build_report(ReportInputs(incident_findings(tricky), incident_trace(tricky)))
    html = markdown_html(render(report, "markdown", asset_dir="c").text)
    rows = re.findall(r"<tr>\s*<td>1</td>\s*<td>(.*?)</td>", html, flags=re.DOTALL)
    assert rows == ["<code>a|b`c`d</code>"]
    assert "<code>``x``</code>" in html


def test_html_shows_ids_whole_as_code_in_the_verdict(report: Report) -> None:
    page = render(report, "html").text
    lines = page[page.index('<ol class="lines">') : page.index("</ol>")]
    for request_id in LONG:
        assert f'<code class="id">{request_id}</code>' in lines


@pytest.mark.parametrize("width", [50, 72, 100, 160])
def test_terminal_text_fits_its_width_and_never_cuts_an_id(report: Report, width: int) -> None:
    for text in (render_report(report, width), render_report_summary(report, width)):
        assert max(len(line) for line in text.splitlines()) <= max(width, 40)
        for request_id in LONG:
            assert request_id in text
        assert "…" not in text


def test_a_table_too_wide_for_the_terminal_is_printed_row_by_row(report: Report) -> None:
    text = render_report(report, 80)
    culprits = text[text.index("Culprits\n") :]
    assert culprits.splitlines()[1] == f"  #1 {LONG[0]}"
    assert culprits.splitlines()[2].startswith("      share: 41.0%; bytes: 1.64 GiB")
    # and one that fits stays a table
    wide = render_report(report, 200)
    assert "  rank  request" in wide
