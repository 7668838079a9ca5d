"""``oomtrace inspect``: which parser recognises a file, what it extracts, what it skipped."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from oomtrace.cli._options import ingest_options, to_ingest_options


@click.command(name="inspect")
@click.argument("path", required=False, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--rows", default=5, show_default=True, help="First rows to show per table.")
@click.option("--formats", is_flag=True, help="List the parsers and exit.")
@ingest_options
def command(path: Path | None, as_json: bool, rows: int, formats: bool, **kwargs: Any) -> None:
    """Show which parser recognises PATH, what it extracts (counts per table, the first rows)
    and the diagnostics."""
    from oomtrace.errors import UsageError
    from oomtrace.ingest import inspect_path
    from oomtrace.ingest.base import registry

    if formats:
        for name, parser in sorted(registry().items()):
            click.echo(f"{name:24} {parser.description}")
        return
    if path is None:
        raise UsageError("inspect needs a file (or --formats to list the parsers)")
    item, trace = inspect_path(path, to_ingest_options(kwargs))
    assert item.parser is not None  # inspect_path raises otherwise
    tables = {t: trace.table(t) for t in ("samples", "requests", "events")}
    if as_json:
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
    from oomtrace.cli._render import sources_table

    click.echo(f"{item.source.name}: {item.parser.name} ({item.parser.description})")
    for table, frame in tables.items():
        click.echo(f"\n{table}: {frame.height:,} rows")
        if frame.height:
            click.echo(str(frame.drop("node", "source").head(rows)))
    if trace.manifest.engine_config:
        click.echo("\nengine_config: " + json.dumps(trace.manifest.engine_config, sort_keys=True))
    click.echo("\n" + sources_table(trace.manifest.sources))


def _rows(frame: Any, n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = frame.head(n).to_dicts()
    return out
