"""The agent's settings, parsed from the command line's text with one clear error per mistake.

Standard library only (the collectors never import the analyzer), so byte sizes are parsed here
by the same rules as ``oomtrace.units.parse_bytes``: binary (KiB, MiB, GiB, TiB) and decimal (KB,
MB, GB, TB) units are different amounts, and a single letter (``2G``) is refused. A test checks
that both parsers agree.
"""

from __future__ import annotations

import importlib.util
import os
import re
import socket
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

from collectors.retention import RetentionPolicy
from collectors.writer import MiB, WriterSettings

# Help text shared by ``oomtrace collect`` and ``python -m collectors``.
HELP = {
    "prometheus": "an engine's /metrics URL to scrape (repeatable)",
    "nvml": "sample GPU memory per device and per process through NVML",
    "log": "an engine log file to follow across rotation (repeatable)",
    "out": "capture directory (created if missing)",
    "prometheus-interval": "time between scrapes, e.g. 100ms or 10Hz",
    "nvml-interval": "time between NVML polls",
    "nvml-write-interval": "at most one NVML record per this time (with the peak since the last)",
    "log-interval": "time between checks of the log files",
    "retain": "delete segments older than this (OOM evidence is kept longer)",
    "max-disk": "hard cap on the capture directory, e.g. 2GiB",
    "keep-oom-for": "how long segments around an OOM are kept past --retain",
    "flush-interval": "how often buffered records are written (1s at most)",
    "timeout": "deadline of one scrape",
    "max-response": "largest /metrics response accepted",
    "node": "node name written into every segment (default: host name)",
    "duration": "stop after this long (default: run until SIGTERM or SIGINT)",
    "log-from-end": "start following at the end of each log instead of its start",
}

# Defaults of the options that take a time or a size, in the words a user would write them:
# ``build_config``, ``oomtrace collect`` and ``python -m collectors`` all take them from here.
DEFAULTS = {
    "prometheus-interval": "100ms",
    "nvml-interval": "20ms",
    "nvml-write-interval": "100ms",
    "log-interval": "100ms",
    "retain": "6h",
    "max-disk": "2GiB",
    "keep-oom-for": "7d",
    "flush-interval": "500ms",
    "timeout": "1s",
    "max-response": "16MiB",
}


class ConfigError(ValueError):
    """A setting that cannot be used; the message names it and says what to write instead."""


_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h|d|hz)\s*$", re.IGNORECASE)
_SECONDS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]+)\s*$", re.IGNORECASE)
_SIZE_UNITS = {
    "b": 1,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
}


def parse_duration(text: str, *, what: str) -> float:
    """``'100ms'``, ``'1.5s'``, ``'6h'``, ``'7d'`` or a rate ``'10Hz'`` (= 0.1 s) in seconds."""
    match = _DURATION.match(text)
    if match is None:
        raise ConfigError(
            f"{what} {text!r} is not a duration; write e.g. '100ms', '1s', '6h' or '10Hz'"
        )
    number, unit = float(match.group(1)), match.group(2).lower()
    if number <= 0:
        raise ConfigError(f"{what} {text!r} must be more than zero")
    return 1.0 / number if unit == "hz" else number * _SECONDS[unit]


def parse_size(text: str, *, what: str) -> int:
    """``'2GiB'`` (binary) or ``'2GB'`` (decimal) in bytes; ``'2G'`` is refused as ambiguous."""
    match = _SIZE.match(text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _SIZE_UNITS:
        raise ConfigError(
            f"{what} {text!r} is not a size; write e.g. '2GiB' (binary, 2**30) or '2GB' "
            "(decimal, 10**9)"
        )
    value = Decimal(match.group(1)) * _SIZE_UNITS[unit]
    return int(value.to_integral_value(rounding=ROUND_HALF_EVEN))


@dataclass(frozen=True)
class AgentConfig:
    out: Path
    prometheus: tuple[str, ...] = ()
    nvml: bool = False
    logs: tuple[Path, ...] = ()
    prometheus_interval_s: float = 0.1
    nvml_interval_s: float = 0.02
    nvml_write_interval_s: float = 0.1
    log_interval_s: float = 0.1
    health_interval_s: float = 1.0
    max_backoff_s: float = 1.0
    timeout_s: float = 1.0
    max_response_bytes: int = 16 * MiB
    log_from_start: bool = True
    node: str = field(default_factory=socket.gethostname)
    duration_s: float | None = None
    retention: RetentionPolicy = field(default_factory=RetentionPolicy)
    writer: WriterSettings = field(default_factory=WriterSettings)


def build_config(
    *,
    out: str,
    prometheus: Sequence[str] = (),
    nvml: bool = False,
    logs: Sequence[str] = (),
    prometheus_interval: str = DEFAULTS["prometheus-interval"],
    nvml_interval: str = DEFAULTS["nvml-interval"],
    nvml_write_interval: str = DEFAULTS["nvml-write-interval"],
    log_interval: str = DEFAULTS["log-interval"],
    retain: str = DEFAULTS["retain"],
    max_disk: str = DEFAULTS["max-disk"],
    keep_oom_for: str = DEFAULTS["keep-oom-for"],
    flush_interval: str = DEFAULTS["flush-interval"],
    timeout: str = DEFAULTS["timeout"],
    max_response: str = DEFAULTS["max-response"],
    node: str | None = None,
    duration: str | None = None,
    log_from_start: bool = True,
) -> AgentConfig:
    """Check and convert every setting; raises :class:`ConfigError` at the first bad one."""
    if not prometheus and not nvml and not logs:
        raise ConfigError("give at least one source: --prometheus URL, --nvml or --log PATH")
    for url in prometheus:
        _check_url(url)
    flush_s = parse_duration(flush_interval, what="--flush-interval")
    if flush_s > 1.0:
        raise ConfigError(
            f"--flush-interval {flush_interval!r} is over 1s; segments are flushed at least "
            "once a second"
        )
    max_disk_bytes = parse_size(max_disk, what="--max-disk")
    if max_disk_bytes < 16 * MiB:
        raise ConfigError(f"--max-disk {max_disk!r} is below 16MiB; give more room for segments")
    config = AgentConfig(
        out=Path(out),
        prometheus=tuple(prometheus),
        nvml=nvml,
        logs=tuple(Path(p) for p in logs),
        prometheus_interval_s=parse_duration(prometheus_interval, what="--prometheus-interval"),
        nvml_interval_s=parse_duration(nvml_interval, what="--nvml-interval"),
        nvml_write_interval_s=parse_duration(nvml_write_interval, what="--nvml-write-interval"),
        log_interval_s=parse_duration(log_interval, what="--log-interval"),
        timeout_s=parse_duration(timeout, what="--timeout"),
        max_response_bytes=parse_size(max_response, what="--max-response"),
        log_from_start=log_from_start,
        node=node or socket.gethostname(),
        duration_s=None if duration is None else parse_duration(duration, what="--duration"),
        retention=RetentionPolicy(
            retain_s=parse_duration(retain, what="--retain"),
            max_bytes=max_disk_bytes,
            keep_for_s=parse_duration(keep_oom_for, what="--keep-oom-for"),
        ),
        writer=WriterSettings(
            flush_interval_s=flush_s,
            # Small enough that retention can keep the cap with some 16 segments on disk.
            max_segment_bytes=max(MiB, min(64 * MiB, max_disk_bytes // 16)),
        ),
    )
    # after the settings: a mistyped value is reported the same with or without the package
    if nvml and importlib.util.find_spec("pynvml") is None:
        raise ConfigError(
            "--nvml needs nvidia-ml-py; install it with: pip install 'oomtrace[nvml]'"
        )
    _writable_directory(out)  # last: a bad setting must not leave a directory behind
    return config


def _check_url(url: str) -> None:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            f"--prometheus {url!r}: only http:// and https:// URLs can be scraped, "
            "e.g. http://127.0.0.1:8000/metrics"
        )


def _writable_directory(out: str) -> None:
    directory = Path(out)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / f".oomtrace-write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise ConfigError(
            f"--out {out!r}: cannot write the capture directory ({reason}); "
            "give a writable directory"
        ) from err
