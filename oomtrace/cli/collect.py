"""``oomtrace collect``: run the node agent (``collectors``) in the foreground."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from collectors.config import DEFAULTS, HELP
from oomtrace.errors import InputError, NothingCollectedError, UsageError


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
def command(
    *,
    prometheus: tuple[str, ...],
    nvml: bool,
    logs: tuple[str, ...],
    out: str,
    prometheus_interval: str,
    nvml_interval: str,
    nvml_write_interval: str,
    log_interval: str,
    retain: str,
    max_disk: str,
    keep_oom_for: str,
    flush_interval: str,
    timeout: str,
    max_response: str,
    node: str | None,
    duration: str | None,
    log_from_end: bool,
) -> None:
    """Sample a serving node into crash-safe segments.

    \b
    Example:
      oomtrace collect --prometheus http://127.0.0.1:8000/metrics --nvml \\
        --log /var/log/vllm.log --out /var/lib/oomtrace --retain 6h --max-disk 2GiB

    Runs until SIGTERM or SIGINT (or --duration), then flushes and closes. Listens on no port.
    Exits 1 when every source failed for the whole run (nothing was collected).
    """
    from collectors.agent import run
    from collectors.config import ConfigError, build_config

    try:
        config = build_config(
            out=out,
            prometheus=prometheus,
            nvml=nvml,
            logs=logs,
            prometheus_interval=prometheus_interval,
            nvml_interval=nvml_interval,
            nvml_write_interval=nvml_write_interval,
            log_interval=log_interval,
            retain=retain,
            max_disk=max_disk,
            keep_oom_for=keep_oom_for,
            flush_interval=flush_interval,
            timeout=timeout,
            max_response=max_response,
            node=node,
            duration=duration,
            log_from_start=not log_from_end,
        )
    except ConfigError as err:
        raise UsageError(str(err)) from err
    try:
        summary = run(config)
    except OSError as err:
        raise InputError(f"--out {out!r}: {err}; give a writable directory") from err
    click.echo(f"oomtrace: {summary.one_line()}", err=True)
    if summary.every_source_failed:
        raise NothingCollectedError(summary.failure_line())
