"""The ``oomtrace`` command line: one module per command, loaded only when that command runs.

This is the only layer that catches :class:`oomtrace.errors.OomtraceError` and sets exit codes.
Commands parse options, call one library function and render; they never compute. Heavy imports
(polars, altair) happen inside the command modules, so ``oomtrace --help`` stays instant.
"""

from __future__ import annotations

import importlib
import logging
import os
from typing import Any

import click

from oomtrace import __version__
from oomtrace.errors import OomtraceError

# The command line does no linear algebra: numpy's OpenBLAS would only start a thread per core
# that spins when woken (2.7 % of `oomtrace ingest`'s CPU samples on a 1 GB log, perf, 2026-12).
# Set before numpy is first imported (no command module is loaded yet); a user's value wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

# name -> (module, one-line help). Every built-in command is registered here and nowhere else.
COMMANDS: dict[str, tuple[str, str]] = {
    "analyze": (
        "oomtrace.cli.analyze",
        "Find the requests and the moment that ran the GPU out of memory.",
    ),
    "budget": ("oomtrace.cli.budget", "GPU memory budget worksheet for serving a model."),
    "ingest": ("oomtrace.cli.ingest", "Turn logs, metrics and captures into a canonical trace."),
    "inspect": ("oomtrace.cli.inspect", "Show what oomtrace reads from one file."),
    "report": (
        "oomtrace.cli.report",
        "Write the incident report: terminal, Markdown, JSON or HTML.",
    ),
    "collect": ("oomtrace.cli.collect", "Sample a serving node into crash-safe segments."),
    "replay": ("oomtrace.cli.replay", "Replay recorded traffic under other admission limits."),
}


def one_line(text: str) -> str:
    """Errors are one line: a message that spans lines is joined with '; '."""
    parts = [p.strip() for p in text.strip().splitlines() if p.strip()]
    return "; ".join(parts) if parts else "unknown error"


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use, and the one place where library
    errors become exit codes."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except OomtraceError as err:
            click.echo(f"oomtrace: error: {one_line(str(err))}", err=True)
            ctx.exit(err.exit_code)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        module = importlib.import_module(entry[0])
        command: click.Command = module.command
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="oomtrace")
def cli() -> None:
    """Find the requests that ran an LLM server out of GPU memory, and budget memory defensibly.

    \b
    Typical use after an outage:
      oomtrace report server.log gpu.csv -o incident.html
    Before one:
      oomtrace budget --config config.json --device-memory 80GiB --max-input 4096 --max-new 1024
    """


def main() -> None:
    """Console-script entry point."""
    logging.basicConfig(level=logging.WARNING, format="oomtrace: %(message)s")
    cli(prog_name="oomtrace")
