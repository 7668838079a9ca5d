"""The sample incidents under ``sample_logs/``: every fact in each ``expected.toml`` is found by
the whole chain on the raw folder (ingest -> analyze -> report, through the CLI), each incident's
report matches its golden files, and the generator writes the committed files byte for byte.

The facts were worked out by hand from the files (each incident's README shows how); a failure
here means the analysis changed its answer on a real-looking outage, or the samples drifted from
their generator.
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from oomtrace.analysis import analyze
from oomtrace.analysis.options import AnalyzeOptions
from oomtrace.cli import cli
from oomtrace.ingest import IngestOptions, load_any
from oomtrace.report import build_report, render
from oomtrace.report.inputs import from_findings_object
from oomtrace.terminal import render_report
from tests.unit.report.golden import check_golden
from tools.sample_incidents import HAND_WRITTEN, INCIDENTS, RECORDED, generate

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_logs"
GENERATED = sorted(INCIDENTS)
NAMES = sorted([*INCIDENTS, *RECORDED])


def expected(name: str) -> dict[str, Any]:
    with (SAMPLES / name / "expected.toml").open("rb") as f:
        return tomllib.load(f)


def ingest_args(facts: dict[str, Any]) -> list[str]:
    options = facts.get("ingest", {})
    args = [f"--year={options['year']}"] if "year" in options else []
    return args + ([f"--tz={options['tz']}"] if "tz" in options else [])


def run(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def when(text: str) -> datetime:
    return datetime.fromisoformat(text)


@pytest.fixture(scope="module", params=NAMES)
def chain(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One incident through the CLI: ``analyze --json`` and ``report -o report.json``."""
    name = str(request.param)
    facts = expected(name)
    folder = str(SAMPLES / name)
    findings = json.loads(run("analyze", folder, *ingest_args(facts), "--json"))
    out = tmp_path_factory.mktemp(name) / "report.json"
    run("report", folder, *ingest_args(facts), "-o", str(out))
    return name, facts, findings, json.loads(out.read_text(encoding="utf-8"))


def test_the_primary_incident_has_the_expected_class_and_peak(chain: Any) -> None:
    # GIVEN an incident folder as a team would have it, and the facts worked out by hand
    _, facts, findings, report = chain
    # WHEN it went through ingest, analyze and report (the fixture)
    if facts["class"] == "none":  # a healthy server: no incident and nothing to remedy
        assert findings["incidents"] == []
        assert findings["remedies"] == []
        assert report["verdict"]["class"] == "none"
        return
    primary = findings["incidents"][0]
    # THEN the analysis and the report agree with the facts
    assert primary["class"] == facts["class"], primary["reason"]
    assert when(primary["peak_ts"]) == when(facts["peak_ts"])
    assert report["verdict"]["class"] == facts["class"]
    section = next(s for s in report["sections"] if s["key"] == "incidents")
    (row, *_) = section["tables"]["incidents"]["rows"]
    # the report prints milliseconds (a peak from the vLLM plugin's steps has microseconds)
    peak = when(facts["peak_ts"])
    assert when(row["peak_ts"]) == peak.replace(microsecond=peak.microsecond // 1000 * 1000)


def test_the_culprits_are_named_most_responsible_first(chain: Any) -> None:
    _, facts, findings, report = chain
    primary = findings["incidents"][0] if findings["incidents"] else {"culprits": []}
    named = [c["request_id"] for c in primary["culprits"]]
    in_report = [c["request_id"] for c in report["verdict"]["culprits"]]
    want = facts["culprits"]
    ordered = facts.get("culprits_in_order", len(want))
    # THEN the expected culprits lead, the first ones in their order, and the report agrees
    assert named[:ordered] == want[:ordered]
    assert set(named[: len(want)]) == set(want)
    assert in_report == named
    if not want:
        assert named == []


def test_the_peak_bytes_are_what_the_files_say(chain: Any) -> None:
    _, facts, findings, _ = chain
    if "peak_bytes" not in facts:
        pytest.skip("this incident has no measured peak (see its expected.toml)")
    found = findings["incidents"][0]["peak_bytes"]
    tolerance = facts.get("peak_bytes_tolerance", 0.0)
    assert abs(found - facts["peak_bytes"]) <= tolerance * facts["peak_bytes"], found


def test_the_incident_specific_facts_hold(chain: Any) -> None:
    name, facts, findings, _ = chain
    # one incident per folder, or none: nothing else the files show is an incident
    count = facts.get("incidents", 1)
    assert len(findings["incidents"]) == count, [i["class"] for i in findings["incidents"]]
    if count == 0:
        return
    primary = findings["incidents"][0]
    if "remedy" in facts:  # the first remedy, as a person would type it
        assert findings["remedies"][0]["action"] == facts["remedy"]
    if "foreign_pid" in facts:
        assert [p["pid"] for p in primary["processes"]][:1] == [facts["foreign_pid"]]
    if "kv_needed_bytes" in facts:
        refusal = [
            e
            for e in primary["evidence"]
            if e.get("values", {}).get("kind") == ("startup_kv_insufficient")
        ]
        assert refusal, name
        assert refusal[0]["values"]["requested_bytes"] == facts["kv_needed_bytes"]


@pytest.mark.parametrize("name", NAMES)
def test_the_report_matches_its_golden_files(name: str) -> None:
    # GIVEN an incident folder, WHEN its report is rendered as text and Markdown
    facts = expected(name)
    options = facts.get("ingest", {})
    trace = load_any(
        [SAMPLES / name], IngestOptions(year=options.get("year"), tz=options.get("tz"))
    )
    report = build_report(from_findings_object(analyze(trace, AnalyzeOptions()), trace))
    # THEN both are the reviewed ones, byte for byte
    check_golden(f"samples/{name}/report.txt", render_report(report))
    markdown = render(report, "markdown", asset_dir=f"{name}-charts")
    check_golden(f"samples/{name}/report.md", markdown.text)
    assert all(svg.startswith(b"<svg") for svg in markdown.assets.values())


# What each sample's README once told the reader to pass: the server's zone and year, known from
# the story. Alignment must find the same from the files alone.
KNOWN_CLOCKS: dict[str, IngestOptions] = {
    "sglang-retraction": IngestOptions(tz="Europe/Berlin"),
    "vllm-foreign-process": IngestOptions(year=2025),
    "vllm-startup-misfit": IngestOptions(year=2025),
}


@pytest.mark.parametrize("name", sorted(KNOWN_CLOCKS))
def test_alignment_places_every_row_where_the_known_year_and_zone_do(name: str) -> None:
    # GIVEN a sample whose log states no year or no zone, beside an input that states its times
    folder = SAMPLES / name
    # WHEN it is read without --year/--tz, and with the year and zone the story knows
    inferred = load_any([folder], IngestOptions())
    known = load_any([folder], KNOWN_CLOCKS[name])
    # THEN every row of every table is at the same instant: nothing set apart, nothing moved
    for table in ("samples", "requests", "events"):
        assert inferred.table(table)["ts"].to_list() == known.table(table)["ts"].to_list(), table
    statuses = {s.name: s.clock.get("status") for s in inferred.manifest.sources}
    assert "aligned" in statuses.values(), statuses
    assert set(statuses.values()) <= {"stated", "assumed", "aligned"}, statuses


def test_no_sample_needs_year_or_tz() -> None:
    # The facts of every sample are checked without clock options (expected.toml has none), and
    # its README's commands pass none.
    for name in NAMES:
        assert "ingest" not in expected(name), name
        readme = (SAMPLES / name / "README.md").read_text(encoding="utf-8")
        commands = re.findall(r"```sh\n(.+?)\n```", readme, flags=re.DOTALL)
        assert not any("--year" in c or "--tz" in c for c in commands), name


@pytest.mark.slow
def test_the_generator_writes_the_committed_files_byte_for_byte(tmp_path: Path) -> None:
    # GIVEN the committed sample folders, WHEN the generator writes them again elsewhere
    generate(tmp_path)
    # THEN every file is identical, and nothing committed is missing from the generator's output
    for name in GENERATED:
        made = {p.relative_to(tmp_path / name) for p in (tmp_path / name).rglob("*") if p.is_file()}
        committed = {
            p.relative_to(SAMPLES / name)
            for p in (SAMPLES / name).rglob("*")
            if p.is_file() and p.name not in HAND_WRITTEN
        }
        assert made == committed, name
        for rel in sorted(made):
            same = (tmp_path / name / rel).read_bytes() == (SAMPLES / name / rel).read_bytes()
            assert same, f"{name}/{rel} differs from what the generator writes"
        assert {p.name for p in (SAMPLES / name).iterdir()} >= HAND_WRITTEN, name


def test_readmes_first_command_writes_the_report_of_a_shipped_incident(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN README's first command, and a working directory that has the repository's samples
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first = re.findall(r"```sh\n(.+?)\n```", readme, flags=re.DOTALL)[0]
    command = shlex.split(first.split("&& oomtrace ", 1)[1])
    (tmp_path / "sample_logs").symlink_to(SAMPLES)
    monkeypatch.chdir(tmp_path)
    # WHEN its oomtrace part runs exactly as written, twice (it must be safe to repeat)
    run(*command)
    run(*command)
    # THEN it wrote the report of the KV exhaustion sample
    html = (tmp_path / "incident.html").read_text(encoding="utf-8")
    assert "KV cache pool exhausted at 2025-03-14T14:05:10.417Z" in html


@pytest.mark.parametrize(
    ("name", "status"), [("vllm-healthy-day", 0), ("vllm-oom-names-process", 1)]
)
def test_fail_on_incident_gates_a_script_on_the_samples(name: str, status: int) -> None:
    # GIVEN a healthy day and an outage, WHEN a CI step runs analyze --fail-on-incident on each
    result = CliRunner().invoke(cli, ["analyze", str(SAMPLES / name), "--fail-on-incident"])
    # THEN the exit status says whether an incident was found, as `git diff --exit-code` does
    assert result.exit_code == status, result.output
