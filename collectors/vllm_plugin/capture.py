"""What the plugin reads from vLLM's scheduler, on the scheduler's own thread.

Everything here runs inside ``Scheduler.schedule`` (and the admission and free hooks), so it only
copies what it needs into plain tuples and hands them on; building records and writing them is
the recorder thread's job (:mod:`collectors.vllm_plugin.recorder`). Nothing here reads a prompt
or an output: a request is its id and its token counts.

The fields read, as named in vLLM 0.32.0 (``vllm/v1/core/sched/output.py``,
``vllm/v1/core/sched/scheduler.py``, ``vllm/v1/core/kv_cache_manager.py``,
``vllm/v1/core/single_type_kv_cache_manager.py``, ``vllm/v1/request.py``):

* ``SchedulerOutput.num_scheduled_tokens`` (engine id -> tokens this step),
  ``total_num_scheduled_tokens``, ``scheduled_new_reqs[].req_id``,
  ``scheduled_cached_reqs.req_ids`` with ``new_block_ids`` (None where no block was added) and
  ``resumed_req_ids`` (before 0.11: ``resumed_from_preemption``, a list of flags beside
  ``req_ids``), ``preempted_req_ids`` (absent before 0.10), ``finished_req_ids``;
* ``Scheduler.get_request_counts()`` (running, waiting; else ``len(running)``,
  ``len(waiting)``), ``Scheduler.running[].request_id``;
* ``Scheduler.kv_cache_manager.usage``, ``.block_pool.get_num_free_blocks()``,
  ``.block_pool.num_gpu_blocks`` and ``.coordinator.single_type_managers[].req_to_blocks``
  (engine id -> the blocks it holds, one manager per KV cache group);
* ``Scheduler.requests`` (engine id -> Request, running and waiting),
  ``Request.num_computed_tokens``, ``num_tokens``, ``num_prompt_tokens``, ``num_output_tokens``,
  ``num_preemptions``, ``max_tokens``, ``arrival_time``, ``get_finished_reason()``.

A field a vLLM version lacks is recorded as absent; the hook that needs it says so once in the
log (:class:`Missing`).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Iterable
from itertools import compress
from typing import Any, NamedTuple

from collectors.vllm_plugin.records import LOGGER_NAME

# a child of vLLM's logger: lines appear in the server's log, in its format and level
logger = logging.getLogger(LOGGER_NAME)

# vLLM appends "-" and the first 8 hex digits of a uuid4 (InputProcessor.assign_request_id)
_ENGINE_SUFFIX = re.compile(r"-[0-9a-f]{8}$")
NO_RANDOM_SUFFIX_ENV = "VLLM_DISABLE_REQUEST_ID_RANDOMIZATION"


class Missing:
    """Says once per process, in one log line, what this vLLM lacks and what is lost by it."""

    def __init__(self) -> None:
        self.said: set[str] = set()

    def __call__(self, what: str, consequence: str) -> None:
        if what not in self.said:
            self.said.add(what)
            logger.warning("oomtrace vLLM plugin: %s; %s", what, consequence)


class StepCapture(NamedTuple):
    """One scheduler step as the scheduler saw it. ``blocks`` holds the blocks of every request
    that got new blocks in the step (:func:`grown_ids`); ``idle`` the running requests that were
    not scheduled; ``snapshot`` every running request as
    ``(engine id, blocks, computed tokens, tokens, prompt tokens)`` when one was due."""

    ts: int
    step: int
    running: int
    waiting: int
    free_blocks: int | None
    usage: float | None
    total_tokens: int
    num_scheduled: int
    scheduled: dict[str, int] | None  # None: every scheduled request got exactly one token
    blocks: dict[str, tuple[int, int]]  # engine id -> (blocks, stored tokens)
    new: list[str]
    resumed: list[str]
    preempted: dict[str, int]  # engine id -> tokens it held (prompt + output so far)
    finished: list[str]
    idle: list[str]
    snapshot: list[tuple[str, int, int, int, int]] | None


class Admission(NamedTuple):
    ts: int
    engine_id: str
    api_id: str
    prompt_tokens: int
    max_tokens: int | None
    arrival_ns: int | None


class Release(NamedTuple):
    """A finished request at the moment the scheduler frees it (its blocks still counted)."""

    ts: int
    engine_id: str
    reason: str | None
    prompt_tokens: int | None
    output_tokens: int | None
    preemptions: int | None
    blocks: int


def api_id_from_suffix(engine_id: str) -> str:
    """The API server's id of a request, from the engine's (which adds ``-`` and 8 hex digits,
    unless randomization is disabled)."""
    if os.environ.get(NO_RANDOM_SUFFIX_ENV, "").strip() not in ("", "0"):
        return engine_id
    return _ENGINE_SUFFIX.sub("", engine_id)


def block_counter(scheduler: Any) -> Callable[[str], int]:
    """Blocks held per engine id, summed over the KV cache groups. Raises ``AttributeError`` on a
    vLLM without the coordinator's per-group managers."""
    managers = scheduler.kv_cache_manager.coordinator.single_type_managers
    tables = [manager.req_to_blocks for manager in managers]
    if len(tables) == 1:
        table = tables[0]
        # .get, not [...]: req_to_blocks is a defaultdict and must not grow from a lookup
        return lambda engine_id: len(table.get(engine_id, ()))
    return lambda engine_id: sum(len(t.get(engine_id, ())) for t in tables)


def stored_tokens(requests: Any, engine_id: str) -> int:
    """Tokens whose KV a request stores after the step was scheduled (``num_computed_tokens``
    already counts the step's own), -1 when the scheduler no longer knows it."""
    request = requests.get(engine_id)
    return -1 if request is None else int(request.num_computed_tokens)


def held_tokens(requests: Any, engine_id: str) -> int:
    """What a preempted request held: vLLM resets its computed tokens to 0 on preemption, but
    its tokens so far (prompt + output) are what was stored, -1 when unknown."""
    request = requests.get(engine_id)
    return -1 if request is None else int(request.num_tokens)


def request_counts(scheduler: Any) -> tuple[int, int]:
    counts = getattr(scheduler, "get_request_counts", None)
    if counts is not None:
        running, waiting = counts()
        return int(running), int(waiting)
    return len(scheduler.running), len(scheduler.waiting)


def pool_state(scheduler: Any) -> tuple[int | None, float | None]:
    """(free blocks, usage fraction 0..1) of the KV pool."""
    manager = scheduler.kv_cache_manager
    return int(manager.block_pool.get_num_free_blocks()), float(manager.usage)


def grown_ids(new: list[str], cached: Any, scheduled: Iterable[str]) -> list[str]:
    """The requests whose blocks can have grown in this step: the new ones, and those whose
    entry in ``CachedRequestData.new_block_ids`` is not None (vLLM lists the blocks it added;
    a resumed request's are all of them). Without that field, every scheduled request."""
    added = getattr(cached, "new_block_ids", None)
    if added is None:
        return list(scheduled)
    return new + list(compress(cached.req_ids, added))


def resumed_ids(cached: Any) -> list[str]:
    resumed = getattr(cached, "resumed_req_ids", None)
    if resumed is not None:
        return list(resumed)
    flags = getattr(cached, "resumed_from_preemption", None)
    if flags is None:
        return []
    return [req_id for req_id, flag in zip(cached.req_ids, flags, strict=False) if flag]


def idle_ids(running: Iterable[Any], scheduled: dict[str, int]) -> list[str]:
    return [r.request_id for r in running if r.request_id not in scheduled]


def snapshot_rows(
    running: Iterable[Any], blocks_of: Callable[[str], int] | None
) -> list[tuple[str, int, int, int, int]]:
    rows = []
    for request in running:
        engine_id = request.request_id
        rows.append(
            (
                engine_id,
                blocks_of(engine_id) if blocks_of is not None else -1,
                int(request.num_computed_tokens),
                int(request.num_tokens),
                int(request.num_prompt_tokens),
            )
        )
    return rows


def release_of(request: Any, ts: int, blocks_of: Callable[[str], int] | None) -> Release:
    reason = request.get_finished_reason() if hasattr(request, "get_finished_reason") else None
    engine_id = request.request_id
    return Release(
        ts,
        engine_id,
        None if reason is None else str(reason),
        _int_or_none(getattr(request, "num_prompt_tokens", None)),
        _int_or_none(getattr(request, "num_output_tokens", None)),
        _int_or_none(getattr(request, "num_preemptions", None)),
        blocks_of(engine_id) if blocks_of is not None else -1,
    )


def admission_of(request: Any, ts: int, api_id: str) -> Admission:
    arrival = getattr(request, "arrival_time", None)
    return Admission(
        ts,
        request.request_id,
        api_id,
        int(request.num_prompt_tokens),
        _int_or_none(getattr(request, "max_tokens", None)),
        None if arrival is None else int(arrival * 1e9),
    )


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) else None
