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
    """``--format`` if given, else from the ``-o`` extension, else text for the terminal."""
    from oomtrace.errors import UsageError

    if given is not None:
        return given
    if out is None:
        return "text"
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
@click.option("--max-lanes", default=60, show_default=True, help="Requests in the swimlanes.")
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
    max_lanes: int,
    analysis: AnalysisChoices,
    ingest: IngestOptions,
) -> None:
    """Write the incident report for INPUTS: a trace directory, or the raw files and folders a
    server left behind (ingested on the fly, as `oomtrace ingest` would).

    \b
    oomtrace report trace/ -o incident.html     one self-contained page, opens offline
    oomtrace report server.log gpu.csv -o incident.md   Markdown, charts as SVG beside it
    oomtrace report trace/ --format json        stable, versioned JSON on stdout
    """
    from oomtrace.errors import UsageError
    from oomtrace.ingest import load_any
    from oomtrace.report import ReportOptions, build_report, render
    from oomtrace.report.inputs import (
        from_findings_document,
        from_findings_object,
        load_document,
        load_findings,
    )

    fmt = output_format(out, report_format)
    if max_points < 1 or max_lanes < 1:
        raise UsageError("--max-points and --max-lanes must be at least 1")
    trace = load_any(list(inputs), ingest)
    options = analysis.options(trace.manifest, ingest.node)
    worksheet = load_document(worksheet_path, "--worksheet") if worksheet_path else None
    if findings_path is None:
        from oomtrace.analysis import analyze

        inputs_ = from_findings_object(analyze(trace, options), trace, worksheet)
    else:
        inputs_ = from_findings_document(load_findings(findings_path), trace, worksheet)
    report = build_report(inputs_, ReportOptions(buckets=max_points, max_lanes=max_lanes))
    asset_dir = f"{out.stem}-charts" if out is not None else "charts"
    if fmt == "text":
        from oomtrace.report import Rendered
        from oomtrace.terminal import render_report

        rendered = Rendered(render_report(report))
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
