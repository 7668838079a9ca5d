"""Options shared by the commands that read raw inputs (ingest, inspect, analyze, report)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

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
