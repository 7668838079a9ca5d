"""The start-up misfit check: the engine's settings could not fit the device before it served.

It matches when the engine refused to start because its KV cache cannot hold one request (or
nothing is left for it), when the weights, KV cache and graphs it stated exceed its share of the
device, or when an OOM came before the engine served anything since it (re)started. "Served" is
read from every source, not from request lines alone (vLLM logs none by default since 0.11): a
request event, a running request in a stats line or a scrape, tokens produced, KV in use.

"Nothing served" alone is not start-up: an excerpt cut around its OOM (an OOM followed by
``AsyncLLM output_handler failed``, TGI's OOM inside a ``batch{...}:prefill`` span, a PyTorch job
that is no server) shows no request because it is cut. Start-up needs positive evidence
(:func:`starting`): the engine's start in the trace, its start-up figures (model loading, KV
cache size), a start-up refusal, or an OOM whose own account names the warm-up or the profile
run. Without any, the phase is unknown and the other checks judge the OOM by its own figures.

The strongest evidence is the phase the lines around the OOM state (the event's ``phase``:
llama.cpp's account of the failed buffer, a traceback's frames; ``oomtrace.schema.EVENT_PHASES``):
a start-up phase makes the OOM a start-up misfit whatever else the trace holds, and the reason
names it with the figures (:func:`phase_reason`); a phase while serving rules start-up out.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

import polars as pl

from oomtrace.analysis import evidence as ev
from oomtrace.analysis.check_allocation import NCCL_WORDS, library_failure
from oomtrace.analysis.check_context import Context
from oomtrace.analysis.evidence import Evidence
from oomtrace.analysis.findings import ClassCheck
from oomtrace.analysis.timeline import RESETS, lit_ts
from oomtrace.schema import EVENT_PHASES, STARTUP_PHASES
from oomtrace.units import format_bytes

# Refusals that say the engine's own settings do not fit (not that others hold the memory).
MISFIT_KINDS = ("startup_kv_insufficient", "startup_no_kv_memory")
_MAX_LEN = re.compile(r"max seq len \(?(\d+)")
# What the refusal states it can hold: vLLM V1's own estimate, V0's token count.
_ESTIMATE = re.compile(r"estimated maximum model length (?:is )?(\d+)")
_HOLDS = re.compile(r"(\d+) tokens the KV cache can hold|stored in KV cache \((\d+)\)")
# An OOM's own account of the phase it failed in: TGI's "Unable to warmup model", vLLM's
# profile run (``profile_run``, "determine_available_memory").
# the shard progress ingest keeps on a failure (oomtrace/ingest/torch/oom_text.py)
_SHARDS = re.compile(r"with (\d+) of (\d+) checkpoint shards loaded")
_FULL = 0.9  # a device this full after a few shards: the weights so far cannot have filled it
# TensorRT-LLM's executor is created once, at start-up (TensorRT-LLM#5950)
_STARTING = re.compile(
    r"warm-?up|profile|start-?up|determine_available_memory|executor could not be created",
    re.IGNORECASE,
)
_COMPONENT = re.compile(r"\(component: ([^)]+)\)")
# A death that says the engine never started, and how soon after the failure it counts.
_FAILED_WORDS = r"(?i)failed to start|initialization failed|failed to initiali[sz]e"
_FAILED_START = timedelta(seconds=30)
# Figures an engine states only while starting (model loading, the KV cache it sized).
STARTUP_FIGURES = (
    "model_weights_bytes",
    "available_kv_cache_bytes",
    "cuda_graph_bytes",
    "num_gpu_blocks",
    "kv_cache_tokens",
    "max_total_num_tokens",
)


def startup(ctx: Context) -> ClassCheck:
    # A refusal ends its start: it explains a peak at most _FAILED_START after it, never the
    # failure of a later start with other settings (vllm#15617: a KV refusal, then 51 minutes
    # later the sampler's warm-up OOM of the next try)
    near = pl.col("ts").is_between(lit_ts(ctx.peak_ts - _FAILED_START), lit_ts(ctx.peak_ts))
    refused = ctx.events.filter(pl.col("kind").is_in(MISFIT_KINDS) & near)
    if refused.height:
        first = refused.row(0, named=True)
        why = "its KV cache cannot hold one request with the configured limits"
        if first["kind"] == "startup_no_kv_memory":  # nothing was left for the cache at all
            why = str(first.get("detail") or "nothing was left for its KV cache")
        elif "warm-up" in str(first.get("detail") or ""):
            # TGI's warm-up refusal is of one prefill's memory, not of the cache's size
            # (flash_causal_lm.py's "Not enough memory to handle N prefill tokens"; TGI#1067)
            why = str(first["detail"])
        return ClassCheck(
            "startup_misfit",
            True,
            f"the engine refused to start ({first['kind']}): {why}",
            tuple(ev.event(r) for r in refused.head(5).iter_rows(named=True)),
            _refusal_figures(ctx, first),
        )
    if ctx.anchor == "oom" and ctx.oom is not None:
        # the phase the failure's own lines state wins over what else the trace shows
        if phased := phase_reason(ctx.oom):
            return ClassCheck(
                "startup_misfit",
                True,
                phased,
                (ev.event(ctx.oom),),
                (
                    *_oom_figures(ctx),
                    ("phase", ctx.oom.get("phase")),
                    ("engine", phase_engine(ctx.oom)),
                    *shard_figures(ctx.oom),
                ),
            )
        if serving := serving_phase(ctx.oom):
            return ClassCheck(
                "startup_misfit", False, f"the lines around the OOM place it in {serving}"
            )
    since = _started(ctx)
    served = served_since(ctx, since)
    evidence = starting(ctx, since)
    if ctx.anchor == "oom" and served is None and ctx.oom is not None and evidence is not None:
        # a library's own buffers (NCCL's) are not the weights, cache and reserve: the reason
        # names the library first (classify) and here only when it came
        library = library_failure(ctx.oom)
        nccl = library is not None and library.startswith(NCCL_WORDS)
        return ClassCheck(
            "startup_misfit",
            True,
            f"the OOM came before the engine served anything ({evidence}; no request, no running "
            "request, no KV in use in any source)"
            + ("" if library else ": weights, cache and reserve did not fit"),
            (ev.event(ctx.oom),),
            (
                *_oom_figures(ctx),
                ("library", "nccl" if nccl else None),
                *engine_figures(ctx.oom),
            ),
        )
    if ctx.anchor == "oom" and served is None:
        return ClassCheck(
            "startup_misfit",
            False,
            "phase unknown: the trace shows neither a request served nor the engine starting (no "
            "start-up line, refusal or warm-up before the OOM): not enough of the log to tell "
            "start-up from serving, so the OOM is judged by its own figures",
        )
    stated = _stated_parts(ctx)
    if stated is not None:
        return stated
    why = "the engine started and served before the peak"
    if served is not None:
        why += f" ({_served_words(served)})"
    return ClassCheck("startup_misfit", False, why, (served,) if served is not None else ())


def shard_figures(event: dict[str, Any]) -> tuple[tuple[str, int | None], ...]:
    """The shards loaded at a failure while loading the weights, and where the device was
    already full with few of them, the model's weight that would take (the remedy's cue)."""
    shards = shards_loaded(event)
    if shards is None:
        return ()
    return (
        ("shards_loaded", shards[0]),
        ("shards_total", shards[1]),
        ("extrapolated_weights_bytes", _extrapolated(event, shards)),
    )


def engine_figures(event: dict[str, Any]) -> tuple[tuple[str, str | None], ...]:
    """The engine the failure's words name, and the component TensorRT-LLM's executor could not
    create ("Additional executor resources", "KV cache"): what a start-up remedy is sized by."""
    engine = phase_engine(event)
    if engine is None:
        return ()
    component = _COMPONENT.search(str(event.get("detail") or ""))
    return (("engine", engine), ("component", component.group(1) if component else None))


def phase_engine(event: dict[str, Any]) -> str | None:
    """The engine whose settings size the failed phase, where the event's own words or its
    reader name one: llama.cpp's account of a failed buffer is read by the PyTorch-log reader,
    vLLM's and SGLang's failures by their own readers."""
    if str(event.get("detail") or "").startswith("llama.cpp"):
        return "llama.cpp"
    if str(event.get("detail") or "").startswith("TensorRT-LLM"):
        return "tensorrt-llm"
    reader = str(event.get("source") or "").partition(":")[0]
    return {"vllm-log": "vllm", "sglang-log": "sglang"}.get(reader)


def _started(ctx: Context) -> datetime | None:
    """The engine's last start (or death) before the peak: serving counts from there."""
    before = pl.col("ts") < lit_ts(ctx.peak_ts)
    resets = ctx.events.filter(pl.col("kind").is_in(RESETS) & before)["ts"]
    return resets.max() if resets.len() else None  # type: ignore[return-value]


def _start_seen(ctx: Context, since: datetime | None) -> bool:
    """Whether the reset serving counts from is a start. A death is no evidence of start-up:
    vLLM V0's server prints "MQLLMEngine is already dead" a few milliseconds before the engine's
    own record of the OOM that killed it, so the death stands before the failure that caused it
    (https://github.com/vllm-project/vllm/issues/16107: a request's prompt logprobs while
    serving, read as start-up)."""
    if since is None:
        return False
    at = (pl.col("ts") == lit_ts(since)) & (pl.col("kind") == "engine_start")
    return bool(ctx.events.filter(at).height)


def starting(ctx: Context, since: datetime | None) -> str | None:
    """Why the failure is taken to be in the engine's start-up, or None when nothing in the
    trace says so (see the module docstring)."""
    if _start_seen(ctx, since):
        return f"since it started at {since:%H:%M:%S}"
    before = pl.col("ts") <= lit_ts(ctx.peak_ts)
    refused = ctx.events.filter((pl.col("kind") == "startup_memory_insufficient") & before)
    if refused.height:
        return "the engine refused to start before it"
    # the engine's own word right after the failure: vLLM's "EngineCore failed to start" and
    # "Engine core initialization failed" (vllm#19865: NCCL's OOM, then the engine core's death)
    after = pl.col("ts").is_between(lit_ts(ctx.peak_ts), lit_ts(ctx.peak_ts + _FAILED_START))
    failed = ctx.events.filter(
        (pl.col("kind") == "engine_dead") & after & pl.col("detail").str.contains(_FAILED_WORDS)
    )
    if failed.height:
        return "the engine said it failed to start right after it"
    return stated_start(ctx.event or {}, ctx.config)


def phase_reason(event: dict[str, Any]) -> str | None:
    """The start-up misfit in the words of the phase the OOM's lines state, with its figures
    ("the model's weights did not fit device 0: loading them asked for 141.42 GiB"), or None
    when they state no start-up phase."""
    phase = event.get("phase")
    if phase not in STARTUP_PHASES:
        return None
    wanted, free, total = (event.get(k) for k in ("requested_bytes", "free_bytes", "total_bytes"))
    device = event.get("device")
    room = ""
    if free is not None:
        room = f", {format_bytes(free)} free" + (f" of {format_bytes(total)}" if total else "")
    if phase == "load_weights":
        where = f"device {device}" if device is not None else "the device"
        # the failed allocation is one buffer of the weights (llama.cpp: all of a device's)
        asked = f": loading them asked for {format_bytes(wanted)}" if wanted is not None else ""
        shards = shards_loaded(event)
        if shards is None:
            return f"the model's weights did not fit {where}{asked}{room}"
        return _shard_reason(shards, where, asked, room, event)
    what = EVENT_PHASES[str(phase)]
    needed = f" needed {format_bytes(wanted)}{room}" if wanted is not None else " failed"
    return f"{what}{needed}: what the engine loads and reserves at start-up did not fit"


def shards_loaded(event: dict[str, Any]) -> tuple[int, int] | None:
    """The checkpoint shards loaded and their number where tqdm's progress stood beside the
    failure (the event's detail: "with 1 of 37 checkpoint shards loaded"; vllm#31273)."""
    found = _SHARDS.search(str(event.get("detail") or ""))
    if found is None or int(found.group(2)) == 0:
        return None
    return int(found.group(1)), int(found.group(2))


def _shard_reason(
    shards: tuple[int, int], where: str, asked: str, room: str, event: dict[str, Any]
) -> str:
    """Out of memory while loading the weights, at which shard; and where the device was already
    full with few shards loaded, that the weights so far cannot have filled it."""
    done, total = shards
    at = (
        f"at checkpoint shard {done + 1} of {total} ({done} loaded)"
        if done < total
        else f"after all {total} checkpoint shards were read (placing or converting them)"
    )
    text = f"out of memory while loading the model's weights on {where}, {at}{asked}{room}"
    whole = _extrapolated(event, shards)
    if whole is None:
        return text
    used, capacity = _in_use(event) or 0, int(event["total_bytes"])
    return (
        f"{text}; yet {format_bytes(used)} of {format_bytes(capacity)} was already in use "
        f"with {done} of {total} shards loaded: at that rate the model would need "
        f"{format_bytes(whole)}, so something other than these weights held the memory "
        "(another process, an earlier allocation of this version, a second copy)"
    )


def _extrapolated(event: dict[str, Any], shards: tuple[int, int]) -> int | None:
    """What the whole model would weigh if the memory in use at the failure were its shards
    loaded so far (``used x total / loaded``), where the device was full (:data:`_FULL`) with at
    most half of them loaded: the weights load shard by shard, so a device full after a small
    part of them says the memory went elsewhere, unless the model is many devices large."""
    done, total = shards
    used, capacity = _in_use(event), event.get("total_bytes")
    if used is None or not capacity or done == 0 or done * 2 > total:
        return None
    if used < _FULL * int(capacity):
        return None
    return used * total // done


def _in_use(event: dict[str, Any]) -> int | None:
    total, free = event.get("total_bytes"), event.get("free_bytes")
    if total is None or free is None:
        return None
    return int(total) - int(free)


def serving_phase(event: dict[str, Any]) -> str | None:
    """The phase the OOM's lines state when it is one while serving, in words, else None."""
    phase = event.get("phase")
    if phase is None or phase in STARTUP_PHASES:
        return None
    return EVENT_PHASES.get(str(phase))


def stated_start(event: dict[str, Any], config: dict[str, Any]) -> str | None:
    """What the failure's own account or the engine's configuration says of the start-up: an
    OOM whose lines state a start-up phase or name the warm-up or the profile run, or figures an
    engine states only while starting (llama.cpp's KV self size, vLLM's model loading). None
    when the failure's lines place it while serving."""
    if event.get("phase") in STARTUP_PHASES:
        return f"the lines around the OOM place it in {EVENT_PHASES[str(event['phase'])]}"
    if serving_phase(event) is not None:
        return None
    if _STARTING.search(str(event.get("detail") or "")):
        return "the OOM's own account places it in the start-up"
    stated = [k for k in STARTUP_FIGURES if config.get(k) is not None]
    if stated:
        return f"the log holds the engine's start-up figures ({', '.join(stated[:2])})"
    return None


def served_since(ctx: Context, since: datetime | None) -> Evidence | None:
    """The first row showing the engine serving in ``[since, peak]``: a request event, or a
    sample of a running request, produced tokens or KV in use."""
    span = pl.col("ts") <= lit_ts(ctx.peak_ts)
    if since is not None:
        span &= pl.col("ts") >= lit_ts(since)
    rows = ctx.serving.filter(span).head(1)
    sample = ev.sample(rows.row(0, named=True)) if rows.height else None
    first = ctx.requests.filter(span).sort("ts").head(1).collect()
    request = ev.request(first.row(0, named=True)) if first.height else None
    found = [e for e in (request, sample) if e is not None]
    return min(found, key=lambda e: e.ts) if found else None  # type: ignore[arg-type,return-value]


def _served_words(row: Evidence) -> str:
    values = dict(row.values)
    if row.table == "requests":
        return f"request {values.get('request_id')} at {row.ts:%H:%M:%S}"
    return f"{values.get('metric')} = {values.get('value')} at {row.ts:%H:%M:%S}"


def _refusal_figures(ctx: Context, event: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    """What the refusal states: the KV memory one request of the model's length needs, what
    the engine had, the model's length, and the device."""
    available = event.get("free_bytes")
    if available is None:
        available = ctx.config.get("available_kv_cache_bytes")
    return refusal_figures(event, ctx.config, available, ctx.capacity)


def refusal_figures(
    event: dict[str, Any], config: dict[str, Any], available: Any, capacity: Any
) -> tuple[tuple[str, Any], ...]:
    """A refusal's figures, its own words first (the model's length, the engine's estimate of
    the length that fits, the tokens its cache holds), the configuration's where it states
    none; with or without times (:mod:`oomtrace.analysis.untimed_checks` reads them too)."""
    detail = str(event.get("detail") or "")
    found = _MAX_LEN.search(detail)
    length = int(found.group(1)) if found else config.get("max_model_len")
    estimate, holds = _ESTIMATE.search(detail), _HOLDS.search(detail)
    return (
        ("kv_needed_bytes", event.get("requested_bytes")),
        ("kv_available_bytes", available),
        ("max_model_len", length if isinstance(length, int) else None),
        ("engine_max_model_len", int(estimate.group(1)) if estimate else None),
        ("kv_tokens", int(holds.group(1) or holds.group(2)) if holds else None),
        ("device_total_bytes", capacity),
        ("refusal", event.get("kind")),
        ("refusal_detail", detail or None),
    )


def _oom_figures(ctx: Context) -> tuple[tuple[str, Any], ...]:
    event = ctx.oom or {}
    return (
        ("requested_bytes", event.get("requested_bytes")),
        ("free_bytes", event.get("free_bytes")),
        ("kv_available_bytes", ctx.config.get("available_kv_cache_bytes")),
        ("max_model_len", ctx.config.get("max_model_len")),
        ("device_total_bytes", ctx.capacity),
    )


def _stated_parts(ctx: Context) -> ClassCheck | None:
    """Weights + KV cache + graphs stated at start-up above what the utilisation allows."""
    keys = ("model_weights_bytes", "available_kv_cache_bytes", "cuda_graph_bytes")
    parts = {k: ctx.config[k] for k in keys if isinstance(ctx.config.get(k), int | float)}
    # vLLM's utilisation covers all three; SGLang's mem_fraction_static is another budget
    utilisation = ctx.config.get("gpu_memory_utilization")
    if not ctx.capacity or len(parts) < 2 or not isinstance(utilisation, int | float):
        return None
    allowed = ctx.capacity * utilisation
    total = sum(parts.values())
    if total <= allowed:
        return None
    return ClassCheck(
        "startup_misfit",
        True,
        f"weights + KV cache + graphs stated at startup ({format_bytes(round(total))}) "
        f"exceed what gpu_memory_utilization allows ({format_bytes(round(allowed))})",
        (ev.manifest({**parts, "gpu_memory_utilization": utilisation}),),
        (("stated_bytes", round(total)), ("allowed_bytes", round(allowed))),
    )
