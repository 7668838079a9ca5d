"""``oomtrace analyze``: find the requests and the moment that ran the GPU out of memory."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from oomtrace.cli._options import AnalysisChoices, analysis_options, ingest_options, json_option

if TYPE_CHECKING:
    from oomtrace.ingest import IngestOptions


@click.command("analyze")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=Path))
@analysis_options
@json_option("Print the full findings as a versioned JSON document instead of the summary.")
@click.option(
    "--fail-on-incident",
    is_flag=True,
    help="Exit 1 when an incident is found (0 when none; 2 stays bad input), for scripts and CI.",
)
@ingest_options
def command(
    *,
    inputs: tuple[Path, ...],
    as_json: bool,
    fail_on_incident: bool,
    analysis: AnalysisChoices,
    ingest: IngestOptions,
) -> None:
    """Find the requests and the moment that ran the GPU out of memory.

    INPUTS is a trace directory (from `oomtrace ingest` or a collector), or the raw files and
    folders a server left behind, ingested on the fly. With --node, a trace directory is
    analysed on that node only. Prints the incident, its class and reason, the top culprits with
    their numbers, the attribution coverage and the data gaps, after the remedies that would
    have prevented it; --json prints the findings. With --fail-on-incident the exit status says
    whether an incident was found (1) or not (0), as `git diff --exit-code` does.
    """
    from oomtrace.analysis import analyze, open_trace
    from oomtrace.analysis.findings import dumps
    from oomtrace.terminal import render_summary
    from oomtrace.trace import is_trace_dir

    paths = list(inputs)
    # A trace directory is scanned (only what the analysis reads); raw files are ingested.
    if len(paths) == 1 and is_trace_dir(paths[0]):
        trace = open_trace(paths[0])
    else:
        from oomtrace.ingest import load_any  # every parser: only for raw files

        trace = load_any(paths, ingest)
    findings = analyze(trace, analysis.options(trace.manifest, ingest.node))
    click.echo(dumps(findings) if as_json else render_summary(findings), nl=False)
    if fail_on_incident and findings.incidents:
        click.get_current_context().exit(1)
