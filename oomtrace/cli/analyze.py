"""``oomtrace analyze``: find the requests and the moment that ran the GPU out of memory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from oomtrace.budget.dtypes import KV_CACHE_DTYPES
from oomtrace.cli._options import ingest_options, to_ingest_options


@click.command("analyze")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=Path))
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
@click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path),
    help="The model's config.json (or its directory): bytes per token from the architecture "
    "instead of the engine's startup statements.",
)
@click.option(
    "--kv-cache-dtype",
    type=click.Choice(KV_CACHE_DTYPES),
    default="auto",
    show_default=True,
    help="KV cache element type the server ran with (with --config).",
)
@click.option(
    "--tensor-parallel",
    type=click.IntRange(min=1),
    help="GPUs sharding the KV heads (with --config; default: what the trace states, else 1).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the full findings as a versioned JSON document instead of the summary.",
)
@ingest_options
def command(
    inputs: tuple[Path, ...],
    window: str,
    top: int,
    config_path: Path | None,
    kv_cache_dtype: str,
    tensor_parallel: int | None,
    as_json: bool,
    **kwargs: Any,
) -> None:
    """Find the requests and the moment that ran the GPU out of memory.

    INPUTS is a trace directory (from `oomtrace ingest` or a collector), or the raw files and
    folders a server left behind, ingested on the fly. With --node, a trace directory is
    analysed on that node only. Prints the incident, its class and reason, the top culprits with
    their numbers, the attribution coverage and the data gaps; --json prints the findings.
    """
    from oomtrace.analysis.findings import dumps
    from oomtrace.analysis.kvmodel import architecture_spec
    from oomtrace.analysis.options import AnalyzeOptions, parse_duration
    from oomtrace.analysis.summary import render_summary
    from oomtrace.attribution import analyze, open_trace
    from oomtrace.ingest import load_any
    from oomtrace.trace import is_trace_dir

    window_s = parse_duration(window, what="--window")
    ingest = to_ingest_options(kwargs)
    paths = list(inputs)
    # A trace directory is scanned (only what the analysis reads); raw files are ingested.
    one_dir = len(paths) == 1 and is_trace_dir(paths[0])
    trace = open_trace(paths[0]) if one_dir else load_any(paths, ingest)
    spec, label = None, "architecture"
    if config_path is not None:
        spec, label = architecture_spec(
            config_path,
            trace.manifest,
            kv_cache_dtype=kv_cache_dtype,
            tensor_parallel=tensor_parallel,
        )
    options = AnalyzeOptions(
        window_s=window_s, top_culprits=top, node=ingest.node, kv_spec=spec, kv_spec_label=label
    )
    findings = analyze(trace, options)
    click.echo(dumps(findings) if as_json else render_summary(findings), nl=False)
