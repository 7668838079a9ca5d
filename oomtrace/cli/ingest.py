"""``oomtrace ingest``: files a server left behind -> one canonical trace directory."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from oomtrace.cli._options import ingest_options

if TYPE_CHECKING:
    from oomtrace.ingest import IngestOptions


@click.command(name="ingest")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--out",
    "-o",
    "out_dir",
    required=True,
    type=click.Path(path_type=Path, file_okay=False),
    help="Trace directory to write (samples/requests/events Parquet and manifest.json).",
)
@click.option("--force", is_flag=True, help="Replace a trace already in --out.")
@ingest_options
def command(*, inputs: tuple[Path, ...], out_dir: Path, force: bool, ingest: IngestOptions) -> None:
    """Parse engine logs, nvidia-smi CSV, Prometheus exports, PyTorch OOM text and snapshots,
    and collector captures into one canonical trace.

    Formats are sniffed per file (gzip is read transparently); several files of one incident
    merge into one trace. Folders are read recursively.
    """
    from oomtrace import escape
    from oomtrace.diagnostics import clock_warning
    from oomtrace.ingest import ingest_paths
    from oomtrace.terminal import sources_table
    from oomtrace.trace import set_aside, write_trace

    trace = ingest_paths(list(inputs), ingest)
    write_trace(trace, out_dir, overwrite=force)
    for source in set_aside(trace.manifest):
        click.echo(f"WARNING  {escape.terminal(clock_warning(source) or source.name)}")
    click.echo(
        f"wrote {out_dir}: {trace.samples.height:,} samples, "
        f"{trace.requests.height:,} request events, {trace.events.height:,} events"
    )
    click.echo(sources_table(trace.manifest.sources))
