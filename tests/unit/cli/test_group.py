"""The CLI shell: instant help, one-line errors, exit codes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from oomtrace import __version__
from oomtrace.trace import write_trace
from tests import scenarios


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


# What reading a trace directory never needs: the parsers of raw files, the analysis' stages.
PARSERS = ("oomtrace.ingest.orchestrator", "oomtrace.ingest.vllm", "oomtrace.ingest.prometheus")
ANALYSIS = ("oomtrace.analysis.pipeline", "oomtrace.analysis.classify")


# What only drawing a chart needs (HTML, Markdown): Altair, vl-convert and the chart code.
DRAWING = ("altair", "vl_convert", "oomtrace.report.charts", "oomtrace.report.vega")


def loaded_by(*args: str) -> set[str]:
    """The modules of ``oomtrace`` and of the drawing libraries that running the command
    imported (in a fresh interpreter)."""
    code = (
        "import sys\n"
        "from oomtrace.cli import cli\n"
        f"cli.main({list(args)!r}, prog_name='oomtrace', standalone_mode=False)\n"
        "print(' '.join(m for m in sys.modules if m.split('.')[0] in ('oomtrace', 'altair',"
        " 'vl_convert')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(out.stdout.splitlines()[-1].split())


@pytest.mark.parametrize(
    ("command", "unused"),
    [
        (("replay", "--json"), PARSERS + ANALYSIS),
        (("analyze", "--json"), PARSERS + DRAWING),
        (("report", "--format", "json"), PARSERS + DRAWING),
        (("report", "--format", "text"), PARSERS + DRAWING),
    ],
)
def test_a_trace_directory_is_read_without_raw_file_parsers_or_chart_code(
    tmp_path: Path, command: tuple[str, ...], unused: tuple[str, ...]
) -> None:
    trace_dir = tmp_path / "trace"
    write_trace(scenarios.long_requests_growing().trace, trace_dir)
    loaded = loaded_by(command[0], str(trace_dir), *command[1:])
    assert "oomtrace.trace" in loaded  # the command ran
    assert not loaded & set(unused)

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
