"""``oomtrace analyze``: find the requests and the moment that ran the GPU out of memory."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from oomtrace.errors import InputError

if TYPE_CHECKING:
    from oomtrace.trace import Trace


def load_trace(paths: Sequence[Path]) -> Trace:
    """The one place where ``analyze`` turns its arguments into a trace.

    It reads a trace directory (written by ``oomtrace ingest`` or a collector). When ingest can
    read raw files on the fly (``oomtrace.ingest.load_any``), this function is the single switch
    to make.
    """
    from oomtrace.trace import is_trace_dir, read_trace

    for path in paths:
        if not path.exists():
            raise InputError(f"{path}: no such file or directory")
    if len(paths) == 1 and is_trace_dir(paths[0]):
        return read_trace(paths[0])
    shown = " ".join(str(p) for p in paths)
    raise InputError(
        f"{shown}: not a trace directory; ingest first with `oomtrace ingest {shown} --out DIR`, "
        "then run `oomtrace analyze DIR`"
    )


@click.command("analyze")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--window",
    default="60s",
    show_default=True,
    help="Look-back before each peak: growth, admissions and spikes are measured over it "
    "(e.g. 30s, 2m).",
)
@click.option(
    "--top",
    default=10,
    show_default=True,
    type=click.IntRange(min=1),
    help="Culprits kept per incident.",
)
@click.option("--node", default=None, help="Analyse only this node of a multi-node trace.")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the full findings as a versioned JSON document instead of the summary.",
)
def command(
    paths: tuple[Path, ...], window: str, top: int, node: str | None, as_json: bool
) -> None:
    """Find the requests and the moment that ran the GPU out of memory.

    PATHS is a trace directory (from `oomtrace ingest` or a collector). Prints a summary: the
    incident, its class with the reason, the top culprits with their numbers, the attribution
    coverage and the data gaps. With --json, prints the findings document instead.
    """
    from oomtrace.analysis.findings import dumps
    from oomtrace.analysis.options import AnalyzeOptions, parse_duration
    from oomtrace.analysis.summary import render_summary
    from oomtrace.attribution import analyze

    options = AnalyzeOptions(
        window_s=parse_duration(window, what="--window"), top_culprits=top, node=node
    )
    findings = analyze(load_trace(paths), options)
    click.echo(dumps(findings) if as_json else render_summary(findings), nl=False)
