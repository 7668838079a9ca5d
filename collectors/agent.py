"""The node agent: one writer, one thread per source, a health reporter, a clean shutdown.

It listens on no port and fetches only the URLs it is given. SIGTERM and SIGINT stop it: every
runner finishes its current poll, open gaps are closed, the last health counters are written and
the segment is flushed, marked closed and fsynced.

While it runs, two interpreter settings keep ticks on time (both restored by :meth:`Agent.stop`):

* the GIL switch interval is 1 ms, not 5: the sources' threads, the health reporter and the
  flusher share one interpreter lock, and a sampler that wakes while another thread runs Python
  code waits up to the switch interval before it may run, a whole 5 ms at the default, which is
  the lateness budget of a 100 Hz tick;
* what start-up allocated (modules, configuration, the sources) is frozen out of the garbage
  collector (``gc.freeze``), so a collection that a tick's allocations trigger walks only the
  objects made since, not the whole process.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any

from collectors import __version__
from collectors.config import AgentConfig
from collectors.logtail import LogTailSource, TailSettings, resume_points
from collectors.nvml import NvmlApi, NvmlSource
from collectors.prometheus import HttpFetcher, PrometheusSource
from collectors.retention import KeepMarker
from collectors.schedule import HealthReporter, Schedule, Source, SourceRunner
from collectors.writer import SegmentWriter

logger = logging.getLogger(__name__)

# How long a thread may keep the GIL while a woken sampler waits for it (see the module docstring).
SWITCH_INTERVAL_S = 0.001


@dataclass(frozen=True)
class SourceSummary:
    name: str
    target: str
    samples: int
    errors: int
    misses: int
    last_error: str = ""

    @property
    def failed(self) -> bool:
        """Every poll of the run failed: this source wrote nothing."""
        return self.samples == 0 and self.errors > 0


@dataclass(frozen=True)
class AgentSummary:
    directory: str
    records: int
    bytes_written: int
    dropped: int
    stopped_by: str
    sources: tuple[SourceSummary, ...]

    def one_line(self) -> str:
        parts = ", ".join(
            f"{s.name.removeprefix('collector.')}: {s.samples} polls, {s.errors} errors"
            for s in self.sources
        )
        return (
            f"wrote {self.records} records ({self.bytes_written} bytes) to {self.directory}"
            f" [{parts}]; stopped by {self.stopped_by}"
            + (f"; {self.dropped} records dropped" if self.dropped else "")
        )

    @property
    def every_source_failed(self) -> bool:
        """No source succeeded even once in the whole run: the capture holds no evidence."""
        return bool(self.sources) and all(s.failed for s in self.sources)

    def failure_line(self) -> str:
        """Why nothing was collected, one clause per source: ``log /var/log/x.log: ...``."""
        causes = "; ".join(
            f"{s.name.removeprefix('collector.')} {s.target}: {s.last_error or 'failed'}"
            for s in self.sources
        )
        return (
            f"every source failed for the whole run, nothing was collected ({causes}); check "
            "the URLs, paths and NVML access, then run again"
        )


def _names(kind: str, count: int) -> list[str]:
    base = f"collector.{kind}"
    return [base if i == 0 else f"{base}#{i + 1}" for i in range(count)]


class Agent:
    def __init__(
        self,
        config: AgentConfig,
        *,
        nvml: NvmlApi | None = None,
        on_tick: Callable[[float], None] | None = None,
    ) -> None:
        self.config = config
        self.stop_event = threading.Event()
        self.stopped_by = "stop"
        self.writer = SegmentWriter(
            config.out,
            node=config.node,
            stream=f"agent-{os.getpid()}",
            writer="agent",
            settings=config.writer,
            retention=config.retention,
        )
        self._nvml, self._on_tick = nvml, on_tick
        self._runners: list[SourceRunner] = []
        self._health: HealthReporter | None = None
        self._switch_interval: float | None = None  # the interpreter's, restored by stop()

    def _sources(self) -> list[tuple[Source, float]]:
        cfg, writer = self.config, self.writer
        sources: list[tuple[Source, float]] = []
        for name, url in zip(
            _names("prometheus", len(cfg.prometheus)), cfg.prometheus, strict=True
        ):
            fetcher = HttpFetcher(url, timeout_s=cfg.timeout_s, max_bytes=cfg.max_response_bytes)
            sources.append(
                (PrometheusSource(fetcher, writer, name=name), cfg.prometheus_interval_s)
            )
        if cfg.nvml:
            nvml = NvmlSource(writer, write_interval_s=cfg.nvml_write_interval_s, nvml=self._nvml)
            sources.append((nvml, cfg.nvml_interval_s))
        resume = resume_points(cfg.out, list(cfg.logs))
        tail, keep = TailSettings(from_start=cfg.log_from_start), KeepMarker(cfg.out)
        for name, path in zip(_names("log", len(cfg.logs)), cfg.logs, strict=True):
            point = resume.get(str(path.absolute()))
            tailer = LogTailSource(path, writer, settings=tail, resume=point, keep=keep, name=name)
            sources.append((tailer, cfg.log_interval_s))
        return sources

    def start(self) -> None:
        sources = self._sources()  # before the writer opens a segment: resume points read them
        self._switch_interval = sys.getswitchinterval()
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        gc.collect()  # start-up's garbage goes now, not frozen with the rest
        gc.freeze()  # before any sampling thread runs (see the module docstring)
        self.writer.start()
        self.writer.set_sticky("info:collector", self._info(sources))
        for source, interval in sources:
            schedule = Schedule(interval, max_backoff_s=self.config.max_backoff_s)
            runner = SourceRunner(
                source, schedule, self.writer, self.stop_event, on_tick=self._on_tick
            )
            self._runners.append(runner)
            runner.start()
        self._health = HealthReporter(
            self._runners, self.writer, self.stop_event, self.config.health_interval_s
        )
        self._health.start()

    def _info(self, sources: list[tuple[Source, float]]) -> dict[str, object]:
        cfg = self.config
        data = {
            "version": __version__,
            "pid": os.getpid(),
            "sources": [{"name": s.name, "target": s.target, "interval_s": i} for s, i in sources],
            "nvml_write_interval_s": cfg.nvml_write_interval_s if cfg.nvml else None,
            "flush_interval_s": cfg.writer.flush_interval_s,
            "retain_s": cfg.retention.retain_s,
            "max_disk_bytes": cfg.retention.max_bytes,
        }
        return {"k": "info", "ts": time.time_ns(), "src": "collector", "data": data}

    def stop(self, why: str = "stop") -> AgentSummary:
        if not self.stop_event.is_set():
            self.stopped_by = why
        self.stop_event.set()
        for runner in self._runners:
            if not runner.join(self.config.timeout_s + 2.0):
                logger.warning("%s did not stop in time", runner.source.name)
        if self._health is not None:
            self._health.join(2.0)
            self._health.report()
        self.writer.close(self.stopped_by)
        if self._switch_interval is not None:
            sys.setswitchinterval(self._switch_interval)
            self._switch_interval = None
            gc.unfreeze()
        stats = self.writer.stats()
        return AgentSummary(
            directory=str(self.config.out),
            records=stats.records,
            bytes_written=stats.bytes_written,
            dropped=stats.dropped,
            stopped_by=self.stopped_by,
            sources=tuple(
                SourceSummary(
                    r.source.name, r.source.target, r.samples, r.errors, r.misses, r.last_error
                )
                for r in self._runners
            ),
        )

    def run(self, *, handle_signals: bool = True) -> AgentSummary:
        """Run until SIGTERM/SIGINT (when ``handle_signals``), ``duration_s``, or :meth:`stop`."""
        previous: dict[signal.Signals, Any] = {}
        if handle_signals and threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT):
                previous[signum] = signal.signal(signum, self._on_signal)
        try:
            self.start()
            timed_out = not self.stop_event.wait(self.config.duration_s)
            if timed_out and self.config.duration_s is not None:
                self.stopped_by = "duration"
            return self.stop(self.stopped_by)
        finally:
            # Restored only after the segment is closed: a second signal during the flush is
            # still just a request to stop.
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.stopped_by = signal.Signals(signum).name
        self.stop_event.set()


def run(config: AgentConfig) -> AgentSummary:
    """Run the agent in the foreground until it is told to stop; what ``oomtrace collect`` and
    ``python -m collectors`` call."""
    return Agent(config).run()
