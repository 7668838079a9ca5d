"""Docs cannot drift: README commands are the ones CI runs; every command is documented; every
document the code cites is in the repository."""

from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Final

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


def test_ci_runs_the_readme_full_test_command() -> None:
    # GIVEN the README's test command, and the full one it gives (the opt-in tests too)
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    test_command = _first_commands()[1].split("&&")[-1].strip()
    full = f"{test_command} --full"
    assert f"`{full}`" in README
    # THEN CI runs the full one as it is written, and "no tests" fails it
    assert full in [line.strip() for line in ci]
    assert any('"$rc" -eq 5' in line for line in ci)


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


# Where docstrings and comments may cite documents.
CITING_DIRS: Final = ("oomtrace", "collectors", "tools", "benchmarks", "tests")
_URL = re.compile(r"https?://\S+")
# A Markdown document (``docs/kv-math.md``, ``collectors/FORMAT.md``, ``README.md``) or any path
# under docs/.
_CITED = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w.-]+\.md)\b|(?<![\w/.-])(docs/[\w./-]*[\w/])")
# A file name after an output flag is an example of output, not a citation (``-o incident.md``).
_OUTPUT_FLAG = re.compile(r"(?:-o|--out)\s+$")


def _tracked() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [path for path in listed if (ROOT / path).exists()]


def _docs_and_comments(path: Path) -> Iterator[tuple[int, str]]:
    """``(line, text)`` of every docstring and comment in one Python file."""
    source = path.read_text(encoding="utf-8")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            text = ast.get_docstring(node, clean=False)
            if text is not None:
                yield node.body[0].lineno, text
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string


def citations(path: Path) -> Iterator[tuple[int, str]]:
    """The documents a file's docstrings and comments cite, by line."""
    for line, written in _docs_and_comments(path):
        text = _URL.sub("", written)  # upstream pages are cited by address, not checked here
        for match in _CITED.finditer(text):
            if not _OUTPUT_FLAG.search(text[: match.start()]):
                yield line, match.group(1) or match.group(2)


def test_every_document_a_docstring_or_comment_cites_is_in_the_repository() -> None:
    # GIVEN every docstring and comment of the code, the tools, the benchmarks and the tests
    tracked = _tracked()
    names = {PurePosixPath(path).name for path in tracked}
    missing, seen = [], 0
    for relative in tracked:
        if not relative.endswith(".py") or not relative.startswith(CITING_DIRS):
            continue
        path = ROOT / relative
        for line, cited in citations(path):
            seen += 1
            # THEN each cited path exists from the repository root or from the citing file's
            # folder, and a bare file name (``FORMAT.md``) names a file of the repository
            found = (ROOT / cited).exists() or (path.parent / cited).exists()
            if "/" not in cited:
                found = found or cited in names
            if not found:
                missing.append(f"{relative}:{line} cites {cited}")
    assert seen > 10
    assert missing == []


def test_the_citation_scan_finds_paths_and_leaves_output_names_and_addresses(
    tmp_path: Path,
) -> None:
    module = tmp_path / "cites.py"
    module.write_text(
        '"""Rules in docs/kv-math.md §2 and ``collectors/FORMAT.md``; see FORMAT.md.\n\n'
        "    oomtrace report trace/ -o incident.md\n"
        '"""\n'
        "# from https://pytorch.org/docs/stable/notes/cuda.html and docs/formats/\n",
        encoding="utf-8",
    )
    found = [cited for _, cited in citations(module)]
    assert found == ["docs/kv-math.md", "collectors/FORMAT.md", "FORMAT.md", "docs/formats/"]
