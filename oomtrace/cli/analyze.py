"""``oomtrace analyze``: find the requests and the moment that ran the GPU out of memory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from oomtrace.cli._options import (
    analysis_options,
    ingest_options,
    to_analyze_options,
    to_ingest_options,
)


@click.command("analyze")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=Path))
@analysis_options
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the full findings as a versioned JSON document instead of the summary.",
)
@ingest_options
def command(
    inputs: tuple[Path, ...],
    as_json: bool,
    **kwargs: Any,
) -> None:
    """Find the requests and the moment that ran the GPU out of memory.

    INPUTS is a trace directory (from `oomtrace ingest` or a collector), or the raw files and
    folders a server left behind, ingested on the fly. With --node, a trace directory is
    analysed on that node only. Prints the incident, its class and reason, the top culprits with
    their numbers, the attribution coverage and the data gaps; --json prints the findings.
    """
    from oomtrace.analysis import analyze, open_trace
    from oomtrace.analysis.findings import dumps
    from oomtrace.analysis.summary import render_summary
    from oomtrace.ingest import load_any
    from oomtrace.trace import is_trace_dir

    ingest = to_ingest_options(kwargs)
    paths = list(inputs)
    # A trace directory is scanned (only what the analysis reads); raw files are ingested.
    one_dir = len(paths) == 1 and is_trace_dir(paths[0])
    trace = open_trace(paths[0]) if one_dir else load_any(paths, ingest)
    findings = analyze(trace, to_analyze_options(kwargs, trace.manifest, ingest.node))
    click.echo(dumps(findings) if as_json else render_summary(findings), nl=False)
