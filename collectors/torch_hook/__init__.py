"""The in-process PyTorch hook: allocator statistics and OOM events from inside the server.

Three ways to turn it on:

* environment, for an unmodified server and all its worker processes::

      export OOMTRACE_TORCH_HOOK_DIR=/var/lib/oomtrace
      export PYTHONPATH="$(python -m collectors.torch_hook --pythonpath)${PYTHONPATH:+:$PYTHONPATH}"
      vllm serve ...

  (a ``sitecustomize`` in that directory starts the hook at interpreter start-up, then runs any
  ``sitecustomize`` it shadows);
* import: ``import collectors.torch_hook.auto`` starts it when ``OOMTRACE_TORCH_HOOK_DIR`` is set;
* code: ``collectors.torch_hook.install("/var/lib/oomtrace")``.

Optional settings: ``OOMTRACE_TORCH_HOOK_INTERVAL`` (default ``100ms``), ``OOMTRACE_NODE``,
``OOMTRACE_RETAIN`` (``6h``), ``OOMTRACE_MAX_DISK`` (``2GiB``). How the hook avoids disturbing
the engine's own peak measurements is explained in :mod:`collectors.torch_hook.stats`.
"""

from __future__ import annotations

import atexit
import logging
import os
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from collectors.config import ConfigError, parse_duration, parse_size
from collectors.retention import KeepMarker, RetentionPolicy
from collectors.schedule import HealthReporter, Schedule, SourceRunner
from collectors.torch_hook.source import TorchSource
from collectors.torch_hook.stats import LiveTorchStats, TorchStats
from collectors.writer import SegmentWriter, WriterSettings

logger = logging.getLogger(__name__)

ENV_DIR = "OOMTRACE_TORCH_HOOK_DIR"
ENV_INTERVAL = "OOMTRACE_TORCH_HOOK_INTERVAL"
AUTOLOAD_DIR = Path(__file__).resolve().parent / "_autoload"


@dataclass(frozen=True)
class HookSettings:
    directory: Path
    interval_s: float = 0.1
    node: str = field(default_factory=socket.gethostname)
    retention: RetentionPolicy = field(default_factory=RetentionPolicy)
    writer: WriterSettings = field(default_factory=WriterSettings)


class TorchHook:
    """A running hook: its writer, its sampling thread and its health reporter."""

    def __init__(self, settings: HookSettings, stats: TorchStats) -> None:
        self.settings, self.stats = settings, stats
        self.stop_event = threading.Event()
        self.writer = SegmentWriter(
            settings.directory,
            node=settings.node,
            stream=f"torch-{os.getpid()}",
            writer="torch_hook",
            settings=settings.writer,
            retention=settings.retention,
        )
        self.source = TorchSource(
            stats, self.writer, keep=KeepMarker(settings.directory), flush=self.writer.flush
        )
        self.runner = SourceRunner(
            self.source, Schedule(settings.interval_s), self.writer, self.stop_event
        )
        self.health = HealthReporter([self.runner], self.writer, self.stop_event)

    def start(self) -> TorchHook:
        self.writer.start()
        self.runner.start()
        self.health.start()
        return self

    def close(self) -> None:
        self.stop_event.set()
        self.runner.join(2.0)
        self.health.join(2.0)
        self.health.report()
        self.writer.close()


class _Active:
    """The one hook of this process (a class attribute, not a ``global`` statement)."""

    hook: TorchHook | None = None
    fork_handler_registered = False
    lock = threading.Lock()


def install(
    directory: str | Path,
    *,
    interval_s: float = 0.1,
    node: str | None = None,
    retention: RetentionPolicy | None = None,
    stats: TorchStats | None = None,
) -> TorchHook:
    """Start the hook in this process (once; later calls return the running hook)."""
    with _Active.lock:
        if _Active.hook is not None:
            return _Active.hook
        settings = HookSettings(
            Path(directory),
            interval_s=interval_s,
            node=node or socket.gethostname(),
            retention=retention or RetentionPolicy(),
        )
        hook = TorchHook(settings, stats or LiveTorchStats()).start()
        _Active.hook = hook
        if not _Active.fork_handler_registered:
            _Active.fork_handler_registered = True
            os.register_at_fork(after_in_child=_restart_in_child)
            atexit.register(uninstall)
        return hook


def uninstall() -> None:
    """Stop the hook and close its segment (runs at interpreter exit)."""
    with _Active.lock:
        hook, _Active.hook = _Active.hook, None
    if hook is not None:
        hook.close()


def _restart_in_child() -> None:
    """A forked child has none of the parent's threads: start a hook of its own, writing its own
    segments, and never flush what the parent had buffered."""
    hook = _Active.hook
    _Active.lock = threading.Lock()
    if hook is None:
        return
    hook.writer.abandon_after_fork()
    _Active.hook = None
    settings = hook.settings
    try:
        install(
            settings.directory,
            interval_s=settings.interval_s,
            node=settings.node,
            retention=settings.retention,
            stats=hook.stats,
        )
    except OSError as err:
        logger.warning("oomtrace torch hook not restarted after fork: %s", err)


def install_from_environment(environ: Mapping[str, str] | None = None) -> TorchHook | None:
    """Start the hook when ``OOMTRACE_TORCH_HOOK_DIR`` is set. A bad setting is logged and the
    hook stays off: it must never stop the server from starting."""
    env = os.environ if environ is None else environ
    directory = env.get(ENV_DIR)
    if not directory:
        return None
    try:
        interval_s = parse_duration(env.get(ENV_INTERVAL, "100ms"), what=ENV_INTERVAL)
        retention = RetentionPolicy(
            retain_s=parse_duration(env.get("OOMTRACE_RETAIN", "6h"), what="OOMTRACE_RETAIN"),
            max_bytes=parse_size(env.get("OOMTRACE_MAX_DISK", "2GiB"), what="OOMTRACE_MAX_DISK"),
        )
        return install(
            directory, interval_s=interval_s, node=env.get("OOMTRACE_NODE"), retention=retention
        )
    except (ConfigError, OSError) as err:
        logger.warning("oomtrace torch hook not started: %s", err)
        return None
