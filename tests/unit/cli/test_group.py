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
