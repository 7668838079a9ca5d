"""The plugin's settings, read from the server's environment.

``OOMTRACE_VLLM_DIR`` turns the plugin on and names the capture directory (usually the one
``oomtrace collect --out`` writes to, so one capture holds the agent's and the engine's records).
Optional: ``OOMTRACE_NODE`` (default: host name), ``OOMTRACE_RETAIN`` (``6h``),
``OOMTRACE_MAX_DISK`` (``2GiB``), ``OOMTRACE_VLLM_SNAPSHOT_INTERVAL`` (``1s``: how often every
running request's blocks and lengths are written in full; steps in between carry changes only),
``OOMTRACE_VLLM_QUEUE`` (``4096``: steps held in memory for the writing thread; beyond it steps
are dropped and counted, never waited for).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from collectors.config import ConfigError, parse_duration, parse_size
from collectors.retention import RetentionPolicy
from collectors.vllm_plugin.records import WRITER
from collectors.writer import SegmentWriter, WriterSettings

ENV_DIR = "OOMTRACE_VLLM_DIR"
ENV_SNAPSHOT = "OOMTRACE_VLLM_SNAPSHOT_INTERVAL"
ENV_QUEUE = "OOMTRACE_VLLM_QUEUE"


@dataclass(frozen=True)
class PluginSettings:
    directory: Path
    node: str = field(default_factory=socket.gethostname)
    retention: RetentionPolicy = field(default_factory=RetentionPolicy)
    writer: WriterSettings = field(default_factory=WriterSettings)
    snapshot_interval_s: float = 1.0
    # a step with a preemption is snapshotted too, but not more often than this
    preempt_snapshot_interval_s: float = 0.1
    queue_max: int = 4096
    drain_interval_s: float = 0.1
    cost_interval_s: float = 10.0

    def writer_for(
        self, stream: str, *, clock_ns: Callable[[], int] = time.time_ns
    ) -> SegmentWriter:
        """A segment writer of one of the plugin's streams into the capture directory."""
        return SegmentWriter(
            self.directory,
            node=self.node,
            stream=stream,
            writer=WRITER,
            settings=self.writer,
            retention=self.retention,
            clock_ns=clock_ns,
        )


def settings_from_environment(environ: Mapping[str, str] | None = None) -> PluginSettings | None:
    """None when ``OOMTRACE_VLLM_DIR`` is unset; :class:`ConfigError` for a bad value."""
    env = os.environ if environ is None else environ
    directory = env.get(ENV_DIR)
    if not directory:
        return None
    queue_text = env.get(ENV_QUEUE, "4096")
    if not queue_text.strip().isdigit() or int(queue_text) < 16:
        raise ConfigError(f"{ENV_QUEUE} {queue_text!r} is not a whole number of steps >= 16")
    return PluginSettings(
        directory=Path(directory),
        node=env.get("OOMTRACE_NODE") or socket.gethostname(),
        retention=RetentionPolicy(
            retain_s=parse_duration(env.get("OOMTRACE_RETAIN", "6h"), what="OOMTRACE_RETAIN"),
            max_bytes=parse_size(env.get("OOMTRACE_MAX_DISK", "2GiB"), what="OOMTRACE_MAX_DISK"),
        ),
        snapshot_interval_s=parse_duration(env.get(ENV_SNAPSHOT, "1s"), what=ENV_SNAPSHOT),
        queue_max=int(queue_text),
    )
