"""The CLI shell: instant help, one-line errors, exit codes."""

from __future__ import annotations

import subprocess
import sys

from oomtrace import __version__


def test_help_lists_the_commands_without_importing_polars() -> None:
    code = (
        "import sys\n"
        "from oomtrace.cli import cli\n"
        "try:\n    cli(['--help'], prog_name='oomtrace')\n"
        "except SystemExit:\n    pass\n"
        "print('polars' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "Usage: oomtrace" in out.stdout
    assert out.stdout.strip().endswith("False")


def test_python_dash_m_runs_the_cli() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "oomtrace", "--version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == f"oomtrace, version {__version__}"


def test_unknown_command_is_a_usage_error() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "oomtrace", "frobnicate"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 2
    assert "No such command 'frobnicate'" in out.stderr


def test_the_sources_table_counts_request_rows_as_request_events() -> None:
    # GIVEN a log whose 296 requests gave 592 request rows (an arrival and an end each)
    from oomtrace.terminal import sources_table
    from oomtrace.diagnostics import SourceDiagnostics

    source = SourceDiagnostics(
        "vllm.log", "vllm-log", "n1", rows={"events": 6, "requests": 592, "samples": 0}
    )

    # WHEN `oomtrace ingest` / `inspect` list it
    text = sources_table([source])

    # THEN the rows are named as what they are, as in the report's inputs table (tables that
    # gave nothing are left out)
    assert text == "vllm.log  [vllm-log]  6 events, 592 request events"
