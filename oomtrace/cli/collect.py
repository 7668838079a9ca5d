"""``oomtrace collect``: run the node agent (``collectors``) in the foreground."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from collectors.config import DEFAULTS, HELP
from oomtrace.errors import InputError, UsageError


def _text(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    metavar = {"max-disk": "SIZE", "max-response": "SIZE", "node": "NAME"}.get(name, "TIME")
    default = DEFAULTS.get(name)
    return click.option(
        f"--{name}",
        default=default,
        metavar=metavar,
        show_default=default is not None,
        help=HELP[name],
    )


@click.command("collect")
@click.option("--prometheus", multiple=True, metavar="URL", help=HELP["prometheus"])
@click.option("--nvml", is_flag=True, help=HELP["nvml"])
@click.option("--log", "logs", multiple=True, metavar="PATH", help=HELP["log"])
@click.option("--out", required=True, metavar="DIR", help=HELP["out"])
@_text("prometheus-interval")
@_text("nvml-interval")
@_text("nvml-write-interval")
@_text("log-interval")
@_text("retain")
@_text("max-disk")
@_text("keep-oom-for")
@_text("flush-interval")
@_text("timeout")
@_text("max-response")
@_text("node")
@_text("duration")
@click.option("--log-from-end", is_flag=True, help=HELP["log-from-end"])
def command(*, log_from_end: bool, **options: Any) -> None:
    """Sample a serving node into crash-safe segments.

    \b
    Example:
      oomtrace collect --prometheus http://127.0.0.1:8000/metrics --nvml \\
        --log /var/log/vllm.log --out /var/lib/oomtrace --retain 6h --max-disk 2GiB

    Runs until SIGTERM or SIGINT (or --duration), then flushes and closes. Listens on no port.
    """
    from collectors.agent import run
    from collectors.config import ConfigError, build_config

    try:
        # every other option is one of build_config's keywords, under the same name
        config = build_config(**options, log_from_start=not log_from_end)
    except ConfigError as err:
        raise UsageError(str(err)) from err
    try:
        summary = run(config)
    except OSError as err:
        raise InputError(f"--out {options['out']!r}: {err}; give a writable directory") from err
    click.echo(f"oomtrace: {summary.one_line()}", err=True)
