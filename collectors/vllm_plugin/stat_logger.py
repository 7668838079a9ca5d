"""The ``vllm.stat_logger_plugins`` entry: per finished request, the API server's own figures.

vLLM builds stat loggers in the API server process (``vllm/v1/engine/async_llm.py``,
``load_stat_logger_plugin_factories``) and calls :meth:`OomtraceStatLogger.record` with each
batch's ``IterationStats``, whose ``finished_requests`` are ``FinishedRequestStats``
(``vllm/v1/metrics/stats.py``, 0.32.0): the API id (``request_id``; for a completion, the
prompt's ``cmpl-X-i``, see ``collectors/FORMAT.md``),
finish reason, prompt and generated tokens, preemptions, ``max_tokens_param`` and the queue,
prefill, decode and inference intervals, which only the API server measures (it sees the first
token). They become ``vllm_done`` records in a segment stream of this process.

Without ``OOMTRACE_VLLM_DIR`` the logger does nothing. vLLM computes its statistics whenever a
stat-logger plugin is installed, even with ``--disable-log-stats`` (it says so in its log).
"""

from __future__ import annotations

import atexit
import logging
import os
import time
from typing import Any

from vllm.v1.metrics.loggers import StatLoggerBase  # the plugin group requires this base

from collectors.config import ConfigError
from collectors.format import Record
from collectors.vllm_plugin import records
from collectors.vllm_plugin.settings import settings_from_environment
from collectors.writer import SegmentWriter

logger = logging.getLogger(records.LOGGER_NAME)

_SECONDS = (
    ("queue_ns", "queued_time"),
    ("prefill_ns", "prefill_time"),
    ("decode_ns", "decode_time"),
    ("inference_ns", "inference_time"),
    ("e2e_ns", "e2e_latency"),
)


class OomtraceStatLogger(StatLoggerBase):  # type: ignore[misc]  # vLLM is untyped here
    def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
        self.engine_index = engine_index
        self.writer: SegmentWriter | None = None
        try:
            settings = settings_from_environment()
        except ConfigError as err:
            logger.warning("oomtrace vLLM stat logger off: %s", err)
            return
        if settings is None:
            return
        writer = settings.writer_for(f"vllm-api-{os.getpid()}-{engine_index}")
        try:
            writer.start()
        except OSError as err:
            logger.warning(
                "oomtrace vLLM stat logger: cannot write to %s (%s); the server runs without it",
                settings.directory,
                err,
            )
            return
        writer.set_sticky(
            "info",
            {
                "k": "info",
                "ts": time.time_ns(),
                "src": records.API_SOURCE,
                "data": {
                    "plugin": records.PLUGIN_NAME,
                    "record_version": records.RECORD_VERSION,
                    "pid": os.getpid(),
                    "engine_index": engine_index,
                },
            },
        )
        self.writer = writer
        atexit.register(writer.close)

    def record(
        self,
        scheduler_stats: Any,
        iteration_stats: Any,
        mm_cache_stats: Any = None,
        engine_idx: int = 0,
    ) -> None:
        writer = self.writer
        if writer is None or iteration_stats is None:
            return
        try:
            for finished in getattr(iteration_stats, "finished_requests", ()):
                writer.append(done_record(finished, time.time_ns(), engine_idx))
        except Exception as err:  # noqa: BLE001 - the server must never see this fail
            logger.warning("oomtrace vLLM stat logger: cannot read a finished request: %s", err)

    def log_engine_initialized(self) -> None:
        """Nothing to say at start-up: the engine core's plugin describes the engine."""


def done_record(finished: Any, ts: int, engine_idx: int) -> Record:
    """One ``FinishedRequestStats`` as a ``vllm_done`` record (times in integer ns)."""
    rec: Record = {
        "k": records.DONE,
        "ts": ts,
        "src": records.API_SOURCE,
        "api": str(finished.request_id),
        "why": str(finished.finish_reason),
        "pt": int(finished.num_prompt_tokens),
        "gt": int(finished.num_generation_tokens),
        "pre": int(finished.num_preemptions),
    }
    if engine_idx:
        rec["eng"] = engine_idx
    max_tokens = getattr(finished, "max_tokens_param", None)
    if isinstance(max_tokens, int):
        rec["mt"] = max_tokens
    for key, attr in _SECONDS:
        value = getattr(finished, attr, None)
        if isinstance(value, int | float):
            rec[key] = round(value * 1e9)
    return rec
