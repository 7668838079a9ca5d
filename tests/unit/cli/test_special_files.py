"""A named pipe (or socket, or device) given where a file is expected is said to be one, and is
never opened (reading a pipe would wait for a writer forever)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from oomtrace.cli import cli

SAMPLES = Path(__file__).resolve().parents[3] / "sample_logs"


@pytest.fixture
def fifo(tmp_path: Path) -> Iterator[Path]:
    """A named pipe with a writer waiting to hand a reader ``{}``: code that opens it reads a
    JSON object and carries on (so the test fails instead of hanging); the writer is released
    at the end either way."""
    path = tmp_path / "pipe"
    os.mkfifo(path)

    def feed() -> None:
        with path.open("w") as writer:
            writer.write("{}")

    thread = threading.Thread(target=feed, daemon=True)
    thread.start()
    yield path
    if thread.is_alive():  # nothing opened it: open it once so the writer can finish
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        thread.join()
        os.close(fd)


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


@pytest.mark.parametrize(
    "command",
    [
        ["ingest", "{pipe}", "-o", "{tmp}/trace"],
        ["inspect", "{pipe}"],
        ["analyze", "{pipe}"],
        ["report", "{pipe}"],
        ["budget", "--config", "{pipe}", "--device-memory", "80GiB", "--tokens", "1000"],
        ["report", str(SAMPLES / "vllm-foreign-process"), "--findings", "{pipe}"],
        [
            "budget",
            "--config",
            str(SAMPLES / "models/llama-3.1-8b/config.json"),
            "--device-memory",
            "80GiB",
            "--tokens",
            "1000",
            "--ledger",
            "{pipe}",
        ],
    ],
    ids=[
        "ingest",
        "inspect",
        "analyze",
        "report",
        "budget --config",
        "report --findings",
        "budget --ledger",
    ],
)
def test_a_named_pipe_is_named_as_one(fifo: Path, tmp_path: Path, command: list[str]) -> None:
    args = [a.format(pipe=fifo, tmp=tmp_path) for a in command]
    code, out = run(*args)
    assert code == 2
    assert f"{fifo}: a named pipe (FIFO), not a file" in out
    assert "no such file" not in out
