"""Where the plugin attaches to vLLM: four methods wrapped once per process, nothing else.

* ``Scheduler.schedule`` (required): after each step, the step's :class:`SchedulerOutput` and
  the scheduler's counts and KV cache manager go to :meth:`EngineRecorder.on_schedule`;
* ``Scheduler.add_request``: a request's first admission (engine id, API id, lengths);
* ``Scheduler._free_request``: a finished request just before its blocks are freed;
* ``Request.from_engine_core_request``: the API server's own id of a request
  (``EngineCoreRequest.external_req_id``, vLLM >= 0.11); without it the API id is the engine id
  less the 8-hex-digit suffix the API server adds;
* ``Scheduler.shutdown``: the engine core is stopping (``EngineCore.shutdown``); the recorder
  writes what it holds and closes its segment, since the process may not reach ``atexit``.

Each wrapper calls vLLM's own method first (or last, for the free hook) and passes its result
and exceptions through untouched; the recording around it never raises. A hook this vLLM lacks
is said once in the log and the others still record. The recorder starts on the first scheduler
step, so only the engine-core process writes: the API server and the workers load the plugin
too but never call the scheduler.
"""

from __future__ import annotations

import atexit
import functools
import inspect
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

from collectors.vllm_plugin import capture
from collectors.vllm_plugin.recorder import EngineRecorder
from collectors.vllm_plugin.records import LOGGER_NAME
from collectors.vllm_plugin.settings import PluginSettings

# a child of vLLM's logger: lines appear in the server's log, in its format and level
logger = logging.getLogger(LOGGER_NAME)

_MARK = "__oomtrace_original__"
_MAX_PENDING_IDS = 65536


class _Active:
    """The process's plugin state (class attributes, not ``global`` statements)."""

    settings: PluginSettings | None = None
    recorder: EngineRecorder | None = None
    failed = False
    lock = threading.Lock()
    hooks: dict[str, bool] = {}  # noqa: RUF012 - one per process, on purpose
    # engine id -> API id, filled on the input thread, read at admission on the engine thread
    api_ids: dict[str, str] = {}  # noqa: RUF012


def active_recorder() -> EngineRecorder | None:
    """This process's recorder, started on first use; None when off or unable to write."""
    recorder = _Active.recorder
    if recorder is not None and recorder.pid == os.getpid():
        return None if recorder.broken else recorder
    if _Active.failed or _Active.settings is None:
        return None
    return _start_recorder(_Active.settings)


def _start_recorder(settings: PluginSettings) -> EngineRecorder | None:
    with _Active.lock:
        current = _Active.recorder
        if current is not None and current.pid == os.getpid():
            return current
        if current is not None:  # inherited through fork: never write the parent's buffer
            current.abandon_after_fork()
        try:
            recorder = EngineRecorder(settings, info={"hooks": dict(_Active.hooks)}).start()
        except OSError as err:
            _Active.failed = True
            logger.warning(
                "oomtrace vLLM plugin: cannot write to %s (%s); the engine runs without it",
                settings.directory,
                err,
            )
            return None
        _Active.recorder = recorder
        atexit.register(recorder.close)
        logger.info("oomtrace vLLM plugin: recording into %s", settings.directory)
        return recorder


def install(settings: PluginSettings) -> dict[str, bool]:
    """Wrap vLLM's methods (once per process); returns which hooks were found."""
    _Active.settings = settings
    if _Active.hooks:
        return _Active.hooks
    try:
        from vllm.v1.core.sched.scheduler import Scheduler  # noqa: PLC0415 - vLLM's process
    except Exception as err:  # noqa: BLE001 - any import failure means: no v1 scheduler here
        logger.warning(
            "oomtrace vLLM plugin: this vLLM has no v1 scheduler (%s); nothing is recorded", err
        )
        _Active.hooks = {"schedule": False}
        return _Active.hooks
    hooks = {
        "schedule": _wrap(Scheduler, "schedule", _schedule_wrapper),
        "add_request": _wrap(Scheduler, "add_request", _admit_wrapper),
        "_free_request": _wrap(Scheduler, "_free_request", _release_wrapper),
        "shutdown": _wrap(Scheduler, "shutdown", _shutdown_wrapper),
    }
    try:
        from vllm.v1.request import Request  # noqa: PLC0415
    except Exception:  # noqa: BLE001
        hooks["from_engine_core_request"] = False
    else:
        hooks["from_engine_core_request"] = _wrap_classmethod(Request)
    consequences = {
        "schedule": "no scheduler steps are recorded",
        "add_request": "admissions come from the steps only (no prompt or max token counts)",
        "_free_request": "finished requests come from the steps only (no final lengths)",
        "from_engine_core_request": "API ids are the engine ids less their random suffix",
        "shutdown": "the last half second before a stop may be lost",
    }
    for name, found in hooks.items():
        if not found:
            logger.warning(
                "oomtrace vLLM plugin: this vLLM has no %s to hook; %s", name, consequences[name]
            )
    _Active.hooks = hooks
    return hooks


def _wrap(owner: type, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> bool:
    original = getattr(owner, name, None)
    if original is None or not callable(original):
        return False
    if hasattr(original, _MARK):
        return True
    wrapper = functools.wraps(original)(make(original))
    setattr(wrapper, _MARK, original)
    setattr(owner, name, wrapper)
    return True


def _schedule_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    def schedule(self: Any, *args: Any, **kwargs: Any) -> Any:
        output = original(self, *args, **kwargs)
        recorder = active_recorder()
        if recorder is not None:
            if recorder.steps == 0:
                recorder.describe(**_engine_description(self))
            recorder.on_schedule(self, output)
        return output

    return schedule


def _admit_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    def add_request(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        known = _is_known(self, request)
        result = original(self, request, *args, **kwargs)
        recorder = active_recorder()
        if recorder is not None and not known:
            engine_id = getattr(request, "request_id", "")
            api_id = _Active.api_ids.pop(engine_id, None) or capture.api_id_from_suffix(engine_id)
            recorder.on_admit(request, api_id)
        return result

    return add_request


def _is_known(scheduler: Any, request: Any) -> bool:
    """A streaming update re-enters ``add_request`` under the id it already has."""
    try:
        return request.request_id in scheduler.requests
    except (AttributeError, TypeError):
        return False


def _release_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    def _free_request(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        recorder = active_recorder()
        if recorder is not None:
            recorder.on_release(self, request)  # before: freeing drops the block table entry
        return original(self, request, *args, **kwargs)

    return _free_request


def _shutdown_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    def shutdown(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return original(self, *args, **kwargs)
        finally:
            recorder = _Active.recorder
            if recorder is not None and recorder.pid == os.getpid():
                recorder.close("stop")

    return shutdown


def _wrap_classmethod(request_class: type) -> bool:
    descriptor = inspect.getattr_static(request_class, "from_engine_core_request", None)
    if not isinstance(descriptor, classmethod):
        return False
    function = descriptor.__func__
    if hasattr(function, _MARK):
        return True

    @functools.wraps(function)
    def from_engine_core_request(cls: type, request: Any, *args: Any, **kwargs: Any) -> Any:
        made = function(cls, request, *args, **kwargs)
        if _Active.settings is not None:
            external = getattr(request, "external_req_id", None)
            if isinstance(external, str):
                pending = _Active.api_ids
                if len(pending) >= _MAX_PENDING_IDS:  # admissions that never came: forget
                    pending.clear()
                pending[made.request_id] = external
        return made

    setattr(from_engine_core_request, _MARK, function)
    setattr(request_class, "from_engine_core_request", classmethod(from_engine_core_request))  # noqa: B010
    return True


def _engine_description(scheduler: Any) -> dict[str, Any]:
    """The settings the engine runs with, as the engine core holds them (first step only)."""
    out: dict[str, Any] = {}
    try:
        import vllm  # noqa: PLC0415

        out["vllm_version"] = str(getattr(vllm, "__version__", "unknown"))
    except Exception:  # noqa: BLE001, S110 - a version we cannot read is left out
        pass
    config = getattr(scheduler, "vllm_config", None)
    model = getattr(config, "model_config", None)
    cache = getattr(config, "cache_config", None)
    sched = getattr(config, "scheduler_config", None)
    engine: dict[str, Any] = {}
    for key, owner, attr in (
        ("model", model, "model"),
        ("dtype", model, "dtype"),
        ("max_model_len", model, "max_model_len"),
        ("kv_cache_dtype", cache, "cache_dtype"),
        ("block_size", cache, "block_size"),
        ("num_gpu_blocks", cache, "num_gpu_blocks"),
        ("enable_prefix_caching", cache, "enable_prefix_caching"),
        ("max_num_seqs", sched, "max_num_seqs"),
        ("max_num_batched_tokens", sched, "max_num_batched_tokens"),
    ):
        value = getattr(owner, attr, None)
        if value is not None:
            engine[key] = value if isinstance(value, int | float | bool) else str(value)
    if isinstance(engine.get("dtype"), str):
        engine["dtype"] = engine["dtype"].removeprefix("torch.")
    out["engine"] = engine
    try:
        pool = scheduler.kv_cache_manager.block_pool
        out["pool_blocks"] = int(pool.num_gpu_blocks)
        out["groups"] = [
            {
                "kind": type(group.kv_cache_spec).__name__,
                "block_size": int(group.kv_cache_spec.block_size),
                "page_bytes": int(group.kv_cache_spec.page_size_bytes),
                "layers": len(group.layer_names),
            }
            for group in scheduler.kv_cache_config.kv_cache_groups
        ]
    except Exception:  # noqa: BLE001, S110 - described as far as this vLLM allows
        pass
    return out
