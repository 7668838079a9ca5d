"""``oomtrace report``: format from the extension or --format, never overwrite without --force,
one-line errors with exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from oomtrace.cli import cli
from oomtrace.trace import write_trace
from tests.unit.report.scenario import incident_findings, incident_trace


@pytest.fixture
def inputs(tmp_path: Path) -> tuple[Path, Path]:
    trace_dir = tmp_path / "trace"
    write_trace(incident_trace(), trace_dir)
    findings = tmp_path / "findings.json"
    findings.write_text(json.dumps(incident_findings()), encoding="utf-8")
    return trace_dir, findings


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_without_out_the_summary_goes_to_stdout_verdict_first(inputs: tuple[Path, Path]) -> None:
    trace_dir, findings = inputs
    code, out, err = _run("report", str(trace_dir), "--findings", str(findings))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "GPU memory incident report: node-a"
    # the verdict's three lines come first, after the header
    verdict = lines.index("  KV cache pool exhausted at 2025-03-14T09:02:00.000Z")
    assert verdict <= 4
    assert lines[verdict + 1] == "  Culprits: req-long-1, req-long-2, req-long-3"
    assert lines[verdict + 2] == "  Fix (replay): set --max-num-seqs 12"


@pytest.mark.parametrize("columns", [60, 80, 132])
def test_the_summary_fits_the_terminal_width_and_keeps_ids_whole(
    inputs: tuple[Path, Path], tmp_path: Path, columns: int
) -> None:
    # GIVEN culprits whose ids are as long as vLLM's
    trace_dir, _ = inputs
    ids = (
        "cmpl-858c08ce99bf0b8b50aaa8ab891a490f-0",
        "cmpl-9b9ebd0efb5e7c252755c1dece2ca2e9-0",
        "cmpl-52cbd4358a2ed11fbf1dc22694964dc3-0",
    )
    findings = tmp_path / "long.json"
    findings.write_text(json.dumps(incident_findings(ids)), encoding="utf-8")
    # WHEN the summary is printed on a terminal of that width
    result = CliRunner().invoke(
        cli, ["report", str(trace_dir), "--findings", str(findings)], env={"COLUMNS": str(columns)}
    )
    # THEN no line is wider than the terminal, and every id is there whole
    assert result.exit_code == 0, result.output
    assert max(len(line) for line in result.stdout.splitlines()) <= columns
    for request_id in ids:
        assert request_id in result.stdout
    assert "…" not in result.stdout


@pytest.mark.parametrize(
    ("name", "marker"),
    [("r.html", "<!DOCTYPE html>"), ("r.json", '"report_version": 4'), ("r.txt", "VERDICT")],
)
def test_the_format_follows_the_extension(
    inputs: tuple[Path, Path], tmp_path: Path, name: str, marker: str
) -> None:
    trace_dir, findings = inputs
    out = tmp_path / "out" / name
    code, stdout, err = _run("report", str(trace_dir), "--findings", str(findings), "-o", str(out))
    assert code == 0, err
    assert marker in out.read_text(encoding="utf-8")
    assert stdout.startswith(f"wrote {out} (")


def test_markdown_writes_its_charts_beside_it(inputs: tuple[Path, Path], tmp_path: Path) -> None:
    trace_dir, findings = inputs
    out = tmp_path / "incident.md"
    code, _, err = _run("report", str(trace_dir), "--findings", str(findings), "-o", str(out))
    assert code == 0, err
    assert "](incident-charts/memory.svg)" in out.read_text(encoding="utf-8")
    assert sorted(p.name for p in (tmp_path / "incident-charts").iterdir()) == [
        "activity.svg",
        "budget.svg",
        "cause.svg",
        "lanes.svg",
        "memory.svg",
    ]


def test_format_option_wins_over_the_extension(inputs: tuple[Path, Path], tmp_path: Path) -> None:
    trace_dir, findings = inputs
    out = tmp_path / "report.out"
    code, _, err = _run(
        "report", str(trace_dir), "--findings", str(findings), "-o", str(out), "--format", "json"
    )
    assert code == 0, err
    assert json.loads(out.read_text(encoding="utf-8"))["report_version"] == 4


def test_an_unknown_extension_is_a_usage_error(inputs: tuple[Path, Path], tmp_path: Path) -> None:
    trace_dir, findings = inputs
    out = tmp_path / "report.pdf"
    code, _, err = _run("report", str(trace_dir), "--findings", str(findings), "-o", str(out))
    assert code == 2
    assert err == (
        f"oomtrace: error: -o {out}: cannot tell the format from '.pdf'; name the file .html, "
        ".md, .json or .txt, or pass --format\n"
    )
    assert not out.exists()


def test_an_existing_file_is_kept_without_force(inputs: tuple[Path, Path], tmp_path: Path) -> None:
    # GIVEN a file already where the report would go
    trace_dir, findings = inputs
    out = tmp_path / "incident.html"
    out.write_text("keep me", encoding="utf-8")
    # WHEN the report is written there without --force
    code, _, err = _run("report", str(trace_dir), "--findings", str(findings), "-o", str(out))
    # THEN it refuses, and the file is untouched
    assert code == 2
    assert err == f"oomtrace: error: {out}: already exists; pass --force to overwrite it\n"
    assert out.read_text(encoding="utf-8") == "keep me"
    # AND with --force it overwrites
    code, _, err = _run(
        "report", str(trace_dir), "--findings", str(findings), "-o", str(out), "--force"
    )
    assert code == 0, err
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_an_existing_chart_file_also_needs_force(inputs: tuple[Path, Path], tmp_path: Path) -> None:
    trace_dir, findings = inputs
    (tmp_path / "incident-charts").mkdir()
    (tmp_path / "incident-charts" / "lanes.svg").write_text("old", encoding="utf-8")
    out = tmp_path / "incident.md"
    code, _, err = _run("report", str(trace_dir), "--findings", str(findings), "-o", str(out))
    assert code == 2
    assert err.endswith("lanes.svg: already exists; pass --force to overwrite it\n")
    assert not out.exists()


def test_unreadable_findings_name_the_file(inputs: tuple[Path, Path], tmp_path: Path) -> None:
    trace_dir, _ = inputs
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]", encoding="utf-8")
    code, _, err = _run("report", str(trace_dir), "--findings", str(bad))
    assert code == 2
    assert err == f"oomtrace: error: --findings {bad}: expected a JSON object, found list\n"


DATA = Path(__file__).resolve().parents[2] / "data"


def test_raw_log_files_are_ingested_and_analysed_on_the_fly(tmp_path: Path) -> None:
    # GIVEN only the log an SGLang server left behind (a KV pool filling up, then retractions)
    log = DATA / "sglang" / "v0.4-tp2.log"
    out = tmp_path / "incident.json"
    # WHEN the report is asked for the raw file
    code, _, err = _run("report", str(log), "-o", str(out))
    # THEN the file is ingested, analysed and reported in one step
    assert code == 0, err
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert doc["verdict"]["class"] == "kv_exhaustion"
    gaps = next(s for s in doc["sections"] if s["key"] == "gaps")
    assert [r["source"] for r in gaps["tables"]["inputs"]["rows"]] == ["v0.4-tp2.log"]


def test_a_trace_directory_is_analysed_when_no_findings_are_given(
    inputs: tuple[Path, Path],
) -> None:
    trace_dir, _ = inputs
    code, out, err = _run("report", str(trace_dir), "--format", "json")
    assert code == 0, err
    assert json.loads(out)["report_version"] == 4


def test_a_bad_window_is_refused_in_one_line(inputs: tuple[Path, Path]) -> None:
    trace_dir, _ = inputs
    code, _, err = _run("report", str(trace_dir), "--window", "60")
    assert code == 2
    assert err == (
        "oomtrace: error: --window '60' is not a duration; write e.g. '60s', '2m' or '500ms'\n"
    )


def test_markdown_needs_a_file_for_its_charts(inputs: tuple[Path, Path]) -> None:
    trace_dir, findings = inputs
    code, _, err = _run(
        "report", str(trace_dir), "--findings", str(findings), "--format", "markdown"
    )
    assert code == 2
    assert err == (
        "oomtrace: error: Markdown writes its charts beside the file: pass -o report.md\n"
    )


def test_the_model_config_sets_the_bytes_per_token_as_analyze_does(tmp_path: Path) -> None:
    # GIVEN a shipped incident and its model's config.json
    samples = Path(__file__).resolve().parents[3] / "sample_logs"
    incident = samples / "vllm-kv-exhaustion"
    out = tmp_path / "incident.json"
    # WHEN the report is asked to model KV from the architecture
    code, _, err = _run(
        "report",
        str(incident),
        "--config",
        str(samples / "models" / "llama-3.1-8b"),
        "--year",
        "2025",
        "-o",
        str(out),
    )
    # THEN the ledger says the bytes per token came from the architecture (128 KiB for Llama 3.1 8B)
    assert code == 0, err
    doc = json.loads(out.read_text(encoding="utf-8"))
    ledger = next(s for s in doc["sections"] if s["key"] == "ledger")
    basis = next(p for p in ledger["paragraphs"] if "KV model" in p)
    assert "model architecture (llama-3.1-8b" in basis
    assert "128.00 KiB per token" in basis


@pytest.mark.parametrize(
    ("document", "what"),
    [
        ({"report_version": 2, "verdict": {"class": "none"}}, "an oomtrace report"),
        (
            {"device_bytes": 1, "kv_bytes_per_token": 2, "fits": True},
            "an oomtrace budget worksheet",
        ),
        ({"incidents": []}, "a JSON object without findings_version"),
    ],
)
def test_findings_that_are_not_analyze_output_are_refused_in_one_line(
    inputs: tuple[Path, Path], tmp_path: Path, document: dict[str, object], what: str
) -> None:
    # GIVEN a JSON object that is not what `oomtrace analyze --json` writes (a report, say)
    trace_dir, _ = inputs
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps(document), encoding="utf-8")
    # WHEN it is passed as --findings
    code, out, err = _run("report", str(trace_dir), "--findings", str(wrong))
    # THEN the report is not written as "no incident found": one line says what the file is
    assert code == 2
    assert out == ""
    assert err == (
        f"oomtrace: error: --findings {wrong}: {what}, not the findings of oomtrace analyze; "
        "pass the file `oomtrace analyze TRACE --json > findings.json` wrote\n"
    )


def test_findings_of_another_version_are_refused(inputs: tuple[Path, Path], tmp_path: Path) -> None:
    trace_dir, _ = inputs
    future = tmp_path / "future.json"
    future.write_text(json.dumps({"findings_version": 99, "incidents": []}), encoding="utf-8")
    code, _, err = _run("report", str(trace_dir), "--findings", str(future))
    assert code == 2
    assert err == (
        f"oomtrace: error: --findings {future}: findings version 99, this oomtrace reads version "
        "1; run `oomtrace analyze` again with this version\n"
    )


def test_findings_written_by_analyze_are_rendered_without_analysing_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN the findings `oomtrace analyze --json` wrote for a trace
    trace_dir = tmp_path / "trace"
    write_trace(incident_trace(), trace_dir)
    analysed = CliRunner().invoke(cli, ["analyze", str(trace_dir), "--json"])
    assert analysed.exit_code == 0, analysed.output
    saved = tmp_path / "findings.json"
    saved.write_text(analysed.stdout, encoding="utf-8")

    # WHEN the report is asked for them, with the analysis made to fail if it runs
    def no_analysis(*_: object, **__: object) -> None:
        raise AssertionError("the report analysed the trace again")

    monkeypatch.setattr("oomtrace.analysis.analyze", no_analysis)
    code, out, err = _run("report", str(trace_dir), "--findings", str(saved), "--format", "json")
    # THEN the report is the saved findings' verdict
    assert code == 0, err
    primary = json.loads(analysed.stdout)["incidents"][0]
    assert json.loads(out)["verdict"]["class"] == primary["class"]
