"""The record kinds the vLLM plugin writes, and the version of their layout.

``collectors/FORMAT.md`` describes each kind. They live in ordinary segments (format version 1):
a reader that does not know them counts them as unknown and skips them. A change to the meaning
of a field raises :data:`RECORD_VERSION`, which every plugin segment states in its sticky
``info`` record; a reader refuses the plugin records of a segment whose version it does not know,
with a message naming that version.
"""

from __future__ import annotations

from typing import Final

RECORD_VERSION: Final = 1
PLUGIN_NAME: Final = "oomtrace-vllm"

# canonical ``source`` of the records written inside the engine core and in the API server
ENGINE_SOURCE: Final = "collector.vllm"
API_SOURCE: Final = "collector.vllm_api"
WRITER: Final = "vllm_plugin"

REQUEST: Final = "vllm_req"  # a request entered the scheduler (engine id, API id, lengths)
STEP: Final = "vllm_step"  # one scheduler step: counts, scheduled tokens, lifecycle ids, blocks
SNAPSHOT: Final = "vllm_snap"  # every running request with its blocks and token lengths
FINISHED: Final = "vllm_fin"  # the engine freed a finished request (its last blocks, lengths)
DONE: Final = "vllm_done"  # the API server's statistics of a finished request (times)
COST: Final = "vllm_cost"  # what the plugin itself cost, cumulative
KINDS: Final = frozenset({REQUEST, STEP, SNAPSHOT, FINISHED, DONE, COST})

# vLLM configures the "vllm" logger (handler, format, level); the plugin logs beneath it
LOGGER_NAME: Final = "vllm.plugins.oomtrace"
