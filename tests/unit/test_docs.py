"""Docs cannot drift: README commands are the ones CI runs; every command is documented."""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

from oomtrace.cli import COMMANDS, cli

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _first_commands() -> list[str]:
    return re.findall(r"```sh\n(.+?)\n```", README, flags=re.DOTALL)[:2]


def test_readme_opens_with_a_main_command_and_a_test_command() -> None:
    main, tests = _first_commands()
    assert main.startswith("python3 -m venv .venv")
    assert "oomtrace " in main
    assert tests.startswith("python3 -m venv .venv")
    assert tests.endswith("python -m pytest")


def test_ci_runs_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    test_command = _first_commands()[1].split("&&")[-1].strip()
    assert test_command in ci
    assert "exit 5" in ci or '"$rc" -eq 5' in ci


def test_every_command_has_a_readme_section_and_help() -> None:
    runner = CliRunner()
    for name in COMMANDS:
        assert f"### `oomtrace {name}`" in README, f"README has no section for {name}"
        result = runner.invoke(cli, [name, "--help"])
        assert result.exit_code == 0, result.output
        assert "Usage: " in result.output


def test_every_readme_command_section_names_a_real_command() -> None:
    documented = set(re.findall(r"^### `oomtrace (\w+)`", README, flags=re.MULTILINE))
    assert documented <= set(COMMANDS) | {"budget"}
