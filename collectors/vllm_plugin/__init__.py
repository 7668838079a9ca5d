"""oomtrace's vLLM plugin: the engine's own view of every step, recorded from inside the engine.

Installed with oomtrace (standard library only inside the engine), registered through vLLM's
entry points and off until ``OOMTRACE_VLLM_DIR`` names a capture directory::

    pip install oomtrace            # into the server's environment (see the README)
    OOMTRACE_VLLM_DIR=/var/lib/oomtrace vllm serve ...

* ``vllm.general_plugins`` -> :func:`register`: wraps the scheduler in the engine-core process
  (:mod:`collectors.vllm_plugin.hooks`) and records, per step, the requests scheduled with their
  token counts, the new / resumed / preempted / finished ids, each resident request's KV blocks,
  running and waiting counts and the pool's free blocks; per request its admission (engine id,
  API id, prompt and max tokens) and its release (final lengths, preemptions, finish reason).
* ``vllm.stat_logger_plugins`` -> :class:`collectors.vllm_plugin.stat_logger.OomtraceStatLogger`
  (in the API server): per finished request its queue, prefill and decode times.

Records go into crash-safe segments in the collectors' format (``collectors/FORMAT.md``), never
with prompt or output text. Settings: :mod:`collectors.vllm_plugin.settings`.
"""

from __future__ import annotations

import logging

from collectors.config import ConfigError
from collectors.vllm_plugin.records import LOGGER_NAME
from collectors.vllm_plugin.settings import ENV_DIR, settings_from_environment

# a child of vLLM's logger: lines appear in the server's log, in its format and level
logger = logging.getLogger(LOGGER_NAME)

__all__ = ["ENV_DIR", "register"]


def register() -> None:
    """The ``vllm.general_plugins`` entry point, called in every vLLM process (maybe more than
    once). Does nothing unless ``OOMTRACE_VLLM_DIR`` is set; never raises."""
    try:
        settings = settings_from_environment()
    except ConfigError as err:
        logger.warning("oomtrace vLLM plugin off: %s", err)
        return
    if settings is None:
        return
    from collectors.vllm_plugin import hooks  # noqa: PLC0415 - only when turned on

    hooks.install(settings)
