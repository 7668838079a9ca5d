"""What ``oomtrace inspect`` and ``oomtrace ingest`` print about each source: counts named as what
they are, and every piece of text from the inputs escaped."""

from __future__ import annotations

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.schema import empty
from oomtrace.terminal import render_formats, render_inspection, sources_table
from oomtrace.trace import Manifest, Trace
from tests import factories
from tests.factories import at


def test_the_sources_table_counts_request_rows_as_request_events() -> None:
    # GIVEN a log whose 296 requests gave 592 request rows (an arrival and an end each)
    source = SourceDiagnostics(
        "vllm.log", "vllm-log", "n1", rows={"events": 6, "requests": 592, "samples": 0}
    )

    # WHEN `oomtrace ingest` / `inspect` list it
    text = sources_table([source])

    # THEN the rows are named as what they are, as in the report's inputs table (tables that
    # gave nothing are left out)
    assert text == "vllm.log  [vllm-log]  6 events, 592 request events"


def test_names_notes_and_skipped_lines_from_the_inputs_cannot_drive_the_terminal() -> None:
    # GIVEN a file whose name, a note and a skipped line carry terminal escapes
    source = SourceDiagnostics("log\x1b[2J.txt", "vllm-log", "n1", lines_read=3)
    source.skip("not a vLLM line", 1, "INFO \x1b]0;title\x07 it's")
    source.skip("blank", 1, "")
    source.note("zone from \x1b[31mthe log")
    # WHEN listed THEN each is shown with the escapes spelt out, a skipped line quoted as a
    # literal would be (an empty one still shows)
    text = sources_table([source])
    assert "\x1b" not in text
    assert "\x07" not in text
    assert text.splitlines() == [
        "log\\x1b[2J.txt  [vllm-log]  no rows",
        "  lines: 3 read, 0 recognised, 2 skipped",
        "  skipped 1 x blank: ''",
        '  skipped 1 x not a vLLM line: "INFO \\x1b]0;title\\x07 it\'s"',
        "  note: zone from \\x1b[31mthe log",
    ]


def test_the_first_rows_show_a_hostile_request_id_escaped() -> None:
    # GIVEN a trace with one request whose id clears the screen
    requests = factories.requests(
        {"ts": at(0), "request_id": "r-1\x1b[2J", "event": "arrived", "prompt_tokens": 9}
    )
    trace = Trace(
        samples=empty("samples"),
        requests=requests,
        manifest=Manifest(nodes=["n1"], engine_config={"block_size": 16}),
    )
    # WHEN inspected
    text = render_inspection("vllm.log", "vllm-log", "vLLM server log", trace, rows=5)
    # THEN the id is in the table with its escape spelt out, and nothing raw reaches the screen
    assert text.startswith("vllm.log: vllm-log (vLLM server log)\n\nsamples: 0 rows\n")
    assert "r-1\\x1b[2J" in text
    assert "\x1b" not in text
    assert '\nengine_config: {"block_size": 16}\n' in text


def test_the_parsers_are_listed_by_name() -> None:
    text = render_formats({"vllm-log": "vLLM server log", "nvidia-smi-csv": "nvidia-smi CSV"})
    assert text == f"{'nvidia-smi-csv':24} nvidia-smi CSV\n{'vllm-log':24} vLLM server log\n"
