"""``oomtrace report``: the incident report as terminal text, Markdown, JSON or one HTML file."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Final

import click

from oomtrace.cli._options import AnalysisChoices, analysis_options, ingest_options_named

if TYPE_CHECKING:
    from oomtrace.ingest import IngestOptions

FORMAT_CHOICES: Final = ("text", "markdown", "json", "html")
SUFFIXES: Final[dict[str, str]] = {
    ".html": "html",
    ".htm": "html",
    ".md": "markdown",
    ".markdown": "markdown",
    ".json": "json",
    ".txt": "text",
}


def output_format(out: Path | None, given: str | None) -> str:
    """``--format`` if given, else from the ``-o`` extension, else ``summary``: the concise
    text for the terminal."""
    from oomtrace.errors import UsageError

    if given is not None:
        return given
    if out is None:
        return "summary"
    fmt = SUFFIXES.get(out.suffix.lower())
    if fmt is None:
        raise UsageError(
            f"-o {out}: cannot tell the format from {out.suffix or 'no extension'!r}; name the "
            "file .html, .md, .json or .txt, or pass --format"
        )
    return fmt


def planned_files(out: Path, assets: dict[str, bytes]) -> list[Path]:
    return [out, *(out.parent / name for name in sorted(assets))]


@click.command(name="report")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "-o",
    "--out",
    type=click.Path(path_type=Path, dir_okay=False),
    help="File to write (.html, .md, .json, .txt); without it the report goes to stdout.",
)
@click.option(
    "--format",
    "report_format",
    type=click.Choice(FORMAT_CHOICES),
    help="Output format (default: from the -o extension; text on a terminal).",
)
@click.option("--force", is_flag=True, help="Overwrite existing output files.")
@click.option(
    "--findings",
    "findings_path",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="Render these findings (`oomtrace analyze --json` output) instead of analysing anew.",
)
@click.option(
    "--worksheet",
    "worksheet_path",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="A budget worksheet (`oomtrace budget --json` output) to set against what was observed.",
)
@analysis_options
@click.option("--max-points", default=1000, show_default=True, help="Time slices per chart.")
@click.option(
    "--context-lanes",
    default=20,
    show_default=True,
    help="Requests drawn in the swimlanes besides the culprits (those that stored the most).",
)
@ingest_options_named("--input-format")
def command(
    *,
    inputs: tuple[Path, ...],
    out: Path | None,
    report_format: str | None,
    force: bool,
    findings_path: Path | None,
    worksheet_path: Path | None,
    max_points: int,
    context_lanes: int,
    analysis: AnalysisChoices,
    ingest: IngestOptions,
) -> None:
    """Write the incident report for INPUTS: a trace directory, or the raw files and folders a
    server left behind (ingested on the fly, as `oomtrace ingest` would).

    \b
    oomtrace report trace/                      the summary, fitted to the terminal
    oomtrace report trace/ -o incident.html     one self-contained page, opens offline
    oomtrace report server.log gpu.csv -o incident.md   Markdown, charts as SVG beside it
    oomtrace report trace/ --format json        stable, versioned JSON on stdout
    oomtrace report trace/ --findings f.json -o incident.html   saved findings, no analysis
    """
    import shutil

    from oomtrace.analysis import open_trace
    from oomtrace.errors import UsageError
    from oomtrace.report import Rendered, ReportOptions, build_report, render
    from oomtrace.report.inputs import (
        from_findings_document,
        from_findings_object,
        load_document,
        load_findings,
    )
    from oomtrace.trace import is_trace_dir

    fmt = output_format(out, report_format)
    if max_points < 1 or context_lanes < 0:
        raise UsageError("--max-points must be at least 1 and --context-lanes at least 0")
    paths = list(inputs)
    # A trace directory is scanned, as analyze scans it: the report reads only what it draws.
    one_dir = len(paths) == 1 and is_trace_dir(paths[0]) and ingest.node is None
    if one_dir:
        trace = open_trace(paths[0])
    else:
        from oomtrace.ingest import load_any  # every parser: only for raw files

        trace = load_any(paths, ingest)
    worksheet = load_document(worksheet_path, "--worksheet") if worksheet_path else None
    if findings_path is None:
        from oomtrace.analysis import analyze

        options = analysis.options(trace.manifest, ingest.node)
        inputs_ = from_findings_object(analyze(trace, options), trace, worksheet)
    else:
        inputs_ = from_findings_document(load_findings(findings_path), trace, worksheet)
    report = build_report(inputs_, ReportOptions(buckets=max_points, context_lanes=context_lanes))
    asset_dir = f"{out.stem}-charts" if out is not None else "charts"
    # On a terminal, text fits its width (COLUMNS, else the terminal's, else 100); in a file, 100.
    width = shutil.get_terminal_size((100, 24)).columns if out is None else 100
    if fmt in ("summary", "text"):
        from oomtrace.terminal import render_report, render_report_summary

        draw = render_report_summary if fmt == "summary" else render_report
        rendered = Rendered(draw(report, width))
    else:
        rendered = render(report, fmt, asset_dir=asset_dir)  # type: ignore[arg-type]
    if out is None:
        if rendered.assets:
            raise UsageError("Markdown writes its charts beside the file: pass -o report.md")
        click.echo(rendered.text, nl=False)
        return
    files = planned_files(out, rendered.assets)
    existing = [f for f in files if f.exists()]
    if existing and not force:
        raise UsageError(f"{existing[0]}: already exists; pass --force to overwrite it")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(rendered.text, encoding="utf-8")
    for name, data in rendered.assets.items():
        (out.parent / name).parent.mkdir(parents=True, exist_ok=True)
        (out.parent / name).write_bytes(data)
    size = sum(f.stat().st_size for f in files)
    click.echo(
        f"wrote {out} ({fmt}, {size / 1e6:.2f} MB"
        + (f", {len(files) - 1} charts)" if len(files) > 1 else ")")
    )
