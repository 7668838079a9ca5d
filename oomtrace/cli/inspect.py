"""``oomtrace inspect``: which parser recognises a file, what it extracts, what it skipped."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from oomtrace.cli._options import ingest_options, json_option

if TYPE_CHECKING:
    from oomtrace.ingest import IngestOptions


@click.command(name="inspect")
@click.argument("path", required=False, type=click.Path(path_type=Path))
@json_option("Machine-readable output.")
@click.option("--rows", default=5, show_default=True, help="First rows to show per table.")
@click.option("--formats", is_flag=True, help="List the parsers and exit.")
@ingest_options
def command(
    *, path: Path | None, as_json: bool, rows: int, formats: bool, ingest: IngestOptions
) -> None:
    """Show which parser recognises PATH, what it extracts (counts per table, the first rows)
    and the diagnostics."""
    from oomtrace.errors import UsageError
    from oomtrace.ingest import inspect_path, registry
    from oomtrace.terminal import render_formats, render_inspection

    if formats:
        descriptions = {name: parser.description for name, parser in registry().items()}
        click.echo(render_formats(descriptions), nl=False)
        return
    if path is None:
        raise UsageError("inspect needs a file (or --formats to list the parsers)")
    item, trace = inspect_path(path, ingest)
    assert item.parser is not None  # inspect_path raises otherwise
    if as_json:
        tables = {t: trace.table(t) for t in ("samples", "requests", "events")}
        doc = {
            "input": item.source.name,
            "parser": item.parser.name,
            "confidence": round(item.confidence, 3),
            "counts": {t: f.height for t, f in tables.items()},
            "first_rows": {t: _rows(f, rows) for t, f in tables.items()},
            "manifest": trace.manifest.to_json(),
        }
        click.echo(json.dumps(doc, indent=2, sort_keys=True, default=str))
        return
    parser = item.parser
    text = render_inspection(item.source.name, parser.name, parser.description, trace, rows)
    click.echo(text, nl=False)


def _rows(frame: Any, n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = frame.head(n).to_dicts()
    return out
