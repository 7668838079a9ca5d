"""The data gaps section lists every diagnostic once, under its source, with assumptions and
gaps in separate tables; the JSON tags each row with its category."""

from __future__ import annotations

import json
from collections import Counter

from oomtrace.analysis.findings import Gap
from oomtrace.analysis.gaps import manifest_gaps
from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.report.document import Section
from oomtrace.report.gaps_section import gaps_section
from oomtrace.report.jsonout import _section
from oomtrace.trace import Manifest
from tests.factories import at


def _manifest() -> Manifest:
    log = SourceDiagnostics("incident/vllm.log", "vllm-log", "node-a", lines_read=100)
    log.lines_recognised = 80
    log.skip("uvicorn access line", 20, 'INFO: 10.0.0.1 - "POST /<b>x</b>" 200')
    log.clock = {
        "tz": "UTC",
        "tz_assumed": False,
        "tz_source": "kubectl/docker timestamps",
        "year_source": "kubectl/docker timestamps",
    }
    csv = SourceDiagnostics("incident/gpu.csv", "nvidia-smi-csv", "node-a", lines_read=10)
    csv.lines_recognised = 10
    csv.clock = {"tz": "UTC", "tz_assumed": True, "tz_source": "default"}
    csv.note("nvidia-smi timestamps are local time without a zone; read as UTC (pass --tz ZONE)")
    csv.note("memory.used: 2 value(s) were [N/A]; left out", lost=True)
    return Manifest(nodes=["node-a"], sources=[log, csv])


def _section_of(manifest: Manifest) -> Section:
    # The analysis' gaps restate the manifest's diagnostics, as `oomtrace analyze` gives them.
    hole = Gap(
        "hole",
        "vllm-log:incident/vllm.log",
        "running (vllm-log:incident/vllm.log) silent for 80.0 s (usually every 10 s)",
        None,
        at(0),
        at(80),
    )
    analysis = [*manifest_gaps(manifest), hole, Gap("no_admission", None, "3 residencies ...", 3)]
    return gaps_section(manifest, [g.to_json() for g in analysis])


def test_every_diagnostic_appears_once_under_its_source() -> None:
    section = _section_of(_manifest())
    tables = dict(section.tables)
    assert list(tables) == ["inputs", "assumptions", "gaps"]
    details = [row[4] for name in ("assumptions", "gaps") for row in tables[name].rows]
    assert [d for d, n in Counter(details).items() if n > 1] == []
    assert [r[:3] for r in tables["gaps"].rows] == [
        ("incident/vllm.log", "vllm-log", "skipped: uvicorn access line"),
        ("incident/vllm.log", "vllm-log", "hole"),
        ("incident/gpu.csv", "nvidia-smi-csv", "note"),
    ]
    assert [r[:3] for r in tables["assumptions"].rows] == [
        ("incident/vllm.log", "vllm-log", "clock"),
        ("incident/gpu.csv", "nvidia-smi-csv", "note"),
        ("analysis", "", "no_admission"),
    ]
    # The hole's detail no longer repeats the source its row already names.
    assert tables["gaps"].rows[1][4] == "running silent for 80.0 s (usually every 10 s)"


def test_the_clock_is_one_sentence_per_source_not_raw_keys() -> None:
    rows = dict(_section_of(_manifest()).tables)["assumptions"].rows
    clock = [r[4] for r in rows if r[2] == "clock"]
    assert clock == [
        (
            "times from the kubectl/docker timestamps, which state their zone; "
            "year from the same timestamps"
        )
    ]  # the CSV's zone is told once, by its own note


def test_json_rows_carry_their_category() -> None:
    document = json.loads(json.dumps(_section(_section_of(_manifest()))))
    tables = document["tables"]
    assert {r["category"] for r in tables["assumptions"]["rows"]} == {"assumption"}
    assert {r["category"] for r in tables["gaps"]["rows"]} == {"gap"}
    assert "category" not in tables["inputs"]["rows"][0]


def test_a_trace_written_before_per_source_clocks_gets_one_clock_sentence() -> None:
    manifest = _manifest()
    for source in manifest.sources:
        source.clock = {}
    manifest.clock = {"tz": "UTC", "tz_assumed": True}
    rows = dict(gaps_section(manifest, []).tables)["assumptions"].rows
    assert (
        "node-a",
        "",
        "clock",
        None,
        "read as UTC because the log states no zone (pass --tz ZONE)",
    ) in rows


def test_an_inputs_request_rows_read_as_request_events_not_requests() -> None:
    # GIVEN a log whose 296 requests gave 592 request rows (an arrival and an end each)
    manifest = _manifest()
    manifest.sources[0].rows = {"requests": 592, "samples": 377, "events": 6}
    # WHEN the section lists the inputs
    inputs = dict(gaps_section(manifest, []).tables)["inputs"]
    # THEN the counts say what a row is: a request event, not a request
    assert inputs.records()[0]["detail"] == "6 events, 592 request events, 377 samples"
