"""Options shared by the commands that read raw inputs (ingest, inspect, analyze, report), and
the analysis options that ``oomtrace analyze`` and ``oomtrace report`` both take."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:  # heavy imports stay inside the commands
    from oomtrace.analysis.options import AnalyzeOptions
    from oomtrace.trace import Manifest

F = TypeVar("F", bound=Callable[..., Any])


def ingest_options(func: F) -> F:
    """``--format``, ``--node``, ``--year``, ``--tz``: passed to the command as keywords and
    turned into :class:`oomtrace.ingest.IngestOptions` by :func:`to_ingest_options`."""
    return ingest_options_named("--format")(func)


def ingest_options_named(format_flag: str) -> Callable[[F], F]:
    """:func:`ingest_options` with the parser option spelt ``format_flag``: for a command whose
    ``--format`` means its output format (``oomtrace report``)."""

    def decorate(func: F) -> F:
        return _decorate(func, format_flag)

    return decorate


def _decorate(func: F, format_flag: str) -> F:
    decorators = [
        click.option(
            format_flag,
            "format_name",
            metavar="NAME",
            help="Parser to use instead of sniffing (see `oomtrace inspect --formats`).",
        ),
        click.option(
            "--node",
            metavar="NAME",
            help="Node label for every row (default: from "
            "the input: a host it names, else its folder or file name).",
        ),
        click.option(
            "--year",
            type=int,
            help="Year of year-less log timestamps (default: from the file's modification time).",
        ),
        click.option(
            "--tz",
            metavar="ZONE",
            help="IANA time zone of zone-less timestamps (default: UTC, recorded as assumed).",
        ),
    ]
    for decorator in reversed(decorators):
        func = decorator(func)
    return func


def to_ingest_options(kwargs: dict[str, Any]) -> Any:
    """Pop the shared options from ``kwargs`` and build the library's options object."""
    from oomtrace.ingest import IngestOptions

    return IngestOptions(
        format=kwargs.pop("format_name", None),
        node=kwargs.pop("node", None),
        year=kwargs.pop("year", None),
        tz=kwargs.pop("tz", None),
    )


def analysis_options(func: F) -> F:
    """``--window``, ``--top``, ``--config``, ``--kv-cache-dtype``, ``--tensor-parallel``: passed
    as keywords and turned into :class:`oomtrace.analysis.options.AnalyzeOptions` by
    :func:`to_analyze_options`."""
    from oomtrace.budget.dtypes import KV_CACHE_DTYPES

    decorators = [
        click.option(
            "--window",
            default="60s",
            show_default=True,
            help="Look-back before each peak: growth, admissions and spikes are measured over it "
            "(e.g. 30s, 2m).",
        ),
        click.option(
            "--top",
            default=10,
            show_default=True,
            type=click.IntRange(min=1),
            help="Culprits kept per incident.",
        ),
        click.option(
            "--config",
            "config_path",
            type=click.Path(path_type=Path),
            help="The model's config.json (or its directory): bytes per token from the "
            "architecture instead of the engine's startup statements.",
        ),
        click.option(
            "--kv-cache-dtype",
            type=click.Choice(KV_CACHE_DTYPES),
            default="auto",
            show_default=True,
            help="KV cache element type the server ran with (with --config).",
        ),
        click.option(
            "--tensor-parallel",
            type=click.IntRange(min=1),
            help="GPUs sharding the KV heads (with --config; default: what the trace states, "
            "else 1).",
        ),
    ]
    for decorator in reversed(decorators):
        func = decorator(func)
    return func


def to_analyze_options(
    kwargs: dict[str, Any], manifest: Manifest, node: str | None
) -> AnalyzeOptions:
    """Pop the analysis options from ``kwargs``; with ``--config``, the KV rule comes from the
    model's architecture (the tensor-parallel size defaulting to what ``manifest`` states)."""
    from oomtrace.analysis.kvmodel import architecture_spec
    from oomtrace.analysis.options import AnalyzeOptions, parse_duration

    window_s = parse_duration(kwargs.pop("window"), what="--window")
    top = kwargs.pop("top")
    config_path = kwargs.pop("config_path")
    kv_cache_dtype = kwargs.pop("kv_cache_dtype")
    tensor_parallel = kwargs.pop("tensor_parallel")
    spec, label = None, "architecture"
    if config_path is not None:
        spec, label = architecture_spec(
            config_path, manifest, kv_cache_dtype=kv_cache_dtype, tensor_parallel=tensor_parallel
        )
    return AnalyzeOptions(
        window_s=window_s, top_culprits=top, node=node, kv_spec=spec, kv_spec_label=label
    )
