"""Options that several commands share, each declared once: its flag, the parameter it fills, its
type and choices. Where the same flag means something different to two commands (the tensor
parallel size defaults to the trace's in ``analyze`` and to 1 in ``budget``), the command passes
its own help and default; the declaration stays here.

Groups of options reach the command as one typed value: :func:`ingest_options` as
``ingest: IngestOptions``, :func:`analysis_options` as ``analysis: AnalysisChoices``. Heavy
imports stay inside the functions, so ``oomtrace --help`` does not load Polars.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from oomtrace.budget.dtypes import KV_CACHE_DTYPES

if TYPE_CHECKING:  # heavy imports stay inside the commands
    from oomtrace.analysis.options import AnalyzeOptions
    from oomtrace.trace import Manifest

Command = Callable[..., Any]
Decorator = Callable[[Command], Command]


def _stack(func: Command, decorators: list[Decorator]) -> Command:
    for decorator in reversed(decorators):
        func = decorator(func)
    return func


# The model options: the model's architecture, and how the server cached and sharded it.


def config_option(help_text: str) -> Decorator:
    """``--config``: a config.json or the directory holding it, as ``config_path``."""
    return click.option("--config", "config_path", type=click.Path(path_type=Path), help=help_text)


def kv_cache_dtype_option(help_text: str) -> Decorator:
    """``--kv-cache-dtype``: one of the KV cache element types, ``auto`` by default."""
    return click.option(
        "--kv-cache-dtype",
        type=click.Choice(KV_CACHE_DTYPES),
        default="auto",
        show_default=True,
        help=help_text,
    )


def tensor_parallel_option(help_text: str, default: int | None = None) -> Decorator:
    """``--tensor-parallel``: GPUs the model is sharded over (at least 1)."""
    return click.option(
        "--tensor-parallel",
        type=click.IntRange(min=1),
        default=default,
        show_default=default is not None,
        help=help_text,
    )


def trace_model_options(func: Command) -> Command:
    """The model options of the commands that read a trace (``analyze``, ``report``,
    ``replay``): bytes per token from the architecture, sized as the trace's server ran it."""
    return _stack(
        func,
        [
            config_option(
                "The model's config.json (or its directory): bytes per token from the "
                "architecture instead of the engine's startup statements."
            ),
            kv_cache_dtype_option("KV cache element type the server ran with (with --config)."),
            tensor_parallel_option(
                "GPUs sharding the KV heads (with --config; default: what the trace states, "
                "else 1)."
            ),
        ],
    )


# Options of the commands that size a KV pool from a device (``budget``, ``replay``).


def device_memory_option(help_text: str, *, required: bool = False) -> Decorator:
    """``--device-memory``: a size with its unit (``24GiB``, ``80GB``)."""
    return click.option("--device-memory", required=required, help=help_text)


def reserve_option(help_text: str) -> Decorator:
    """``--reserve``: the runtime's own memory, a size with its unit."""
    return click.option("--reserve", help=help_text)


def block_size_option(help_text: str, default: int | None = None) -> Decorator:
    """``--block-size``: tokens per paged KV block."""
    return click.option(
        "--block-size",
        type=click.IntRange(min=1),
        default=default,
        show_default=default is not None,
        help=help_text,
    )


def max_num_batched_tokens_option(
    help_text: str, *, default: int | None = None, least: int = 1
) -> Decorator:
    """``--max-num-batched-tokens``: vLLM's prefill token budget per step."""
    return click.option(
        "--max-num-batched-tokens",
        type=click.IntRange(min=least),
        default=default,
        show_default=default is not None,
        help=help_text,
    )


def json_option(help_text: str) -> Decorator:
    """``--json``: the command's result as a JSON document, as ``as_json``."""
    return click.option("--json", "as_json", is_flag=True, help=help_text)


# Reading raw inputs (``ingest``, ``inspect``, ``analyze``, ``report``, ``replay``).


def ingest_options(func: Command) -> Command:
    """``--format``, ``--node``, ``--year``, ``--tz``, ``--max-input-size``: the command
    receives them as ``ingest``, an :class:`oomtrace.ingest.IngestOptions`."""
    return ingest_options_named("--format")(func)


def ingest_options_named(format_flag: str) -> Decorator:
    """:func:`ingest_options` with the parser option spelt ``format_flag``: for a command whose
    ``--format`` means its output format (``oomtrace report``)."""

    def decorate(func: Command) -> Command:
        @functools.wraps(func)
        def command(
            *args: Any,
            format_name: str | None,
            node: str | None,
            year: int | None,
            tz: str | None,
            max_input_size: str | None,
            **kwargs: Any,
        ) -> Any:
            from oomtrace.ingest import IngestOptions
            from oomtrace.units import parse_bytes

            ingest = IngestOptions(format=format_name, node=node, year=year, tz=tz)
            if max_input_size is not None:
                size = parse_bytes(max_input_size, what="--max-input-size")
                ingest = dataclasses.replace(ingest, max_input_bytes=size)
            return func(*args, ingest=ingest, **kwargs)

        return _stack(
            command,
            [
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
                    help="Year of year-less log timestamps (default: inferred from another "
                    "input of the incident that states its times, else the file's modification "
                    "time).",
                ),
                click.option(
                    "--tz",
                    metavar="ZONE",
                    help="IANA time zone of zone-less timestamps (default: the offset inferred "
                    "from another input of the incident that states its times, else UTC, "
                    "recorded as assumed).",
                ),
                click.option(
                    "--max-input-size",
                    metavar="SIZE",
                    help="Largest input read, once decompressed (default 1GiB): a larger one "
                    "is refused before it is parsed, which bounds ingest's memory.",
                ),
            ],
        )

    return decorate


# The analysis options ``oomtrace analyze`` and ``oomtrace report`` both take.


@dataclass(frozen=True)
class AnalysisChoices:
    """The analysis options as given on the command line (``--window`` still text)."""

    window: str
    top: int
    config_path: Path | None
    kv_cache_dtype: str
    tensor_parallel: int | None

    def options(self, manifest: Manifest, node: str | None) -> AnalyzeOptions:
        """The library's options; with ``--config``, the KV rule comes from the model's
        architecture (the tensor-parallel size defaulting to what ``manifest`` states). A KV
        exhaustion's remedy is sized by replaying its traffic (:mod:`oomtrace.replay.limits`)."""
        from oomtrace.analysis import AnalyzeOptions
        from oomtrace.analysis.kvmodel import architecture_spec
        from oomtrace.analysis.options import parse_duration
        from oomtrace.analysis.step_bytes import model_dims
        from oomtrace.replay.limits import replay_limits

        window_s = parse_duration(self.window, what="--window")
        spec, label, dims = None, "architecture", None
        if self.config_path is not None:
            dims = model_dims(self.config_path)
            spec, label = architecture_spec(
                self.config_path,
                manifest,
                kv_cache_dtype=self.kv_cache_dtype,
                tensor_parallel=self.tensor_parallel,
            )
        return AnalyzeOptions(
            window_s=window_s,
            top_culprits=self.top,
            node=node,
            kv_spec=spec,
            kv_spec_label=label,
            limit_search=replay_limits,
            model_dims=dims,
        )


def analysis_options(func: Command) -> Command:
    """``--window``, ``--top`` and the model options: the command receives them as
    ``analysis``, an :class:`AnalysisChoices`."""

    @functools.wraps(func)
    def command(
        *args: Any,
        window: str,
        top: int,
        config_path: Path | None,
        kv_cache_dtype: str,
        tensor_parallel: int | None,
        **kwargs: Any,
    ) -> Any:
        choices = AnalysisChoices(window, top, config_path, kv_cache_dtype, tensor_parallel)
        return func(*args, analysis=choices, **kwargs)

    window = click.option(
        "--window",
        default="60s",
        show_default=True,
        help="Look-back before each peak: growth, admissions and spikes are measured over it "
        "(e.g. 30s, 2m).",
    )
    top = click.option(
        "--top",
        default=10,
        show_default=True,
        type=click.IntRange(min=1),
        help="Culprits kept per incident.",
    )
    return _stack(command, [window, top, trace_model_options])
