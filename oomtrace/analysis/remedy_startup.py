"""Remedies for a start-up misfit read off the phase the failure's lines state
(``oomtrace.schema.EVENT_PHASES``): the setting that sizes what failed in that phase, with its
value where the figures the log states compute it, and what is missing where they do not.

What each phase's allocation grows with, as the engines size it:

* vLLM's dummy sampler pass (``_dummy_sampler_run``, ``vllm/v1/worker/gpu_model_runner.py``)
  computes the logits of ``max_num_seqs`` sequences at once: its allocation is proportional to
  ``--max-num-seqs`` (V1's default is 256, 1024 on the largest GPUs; vLLM's own OOM advice);
* vLLM's profiling run (``profile_run``, ``_dummy_run``; V0's ``determine_num_available_blocks``)
  runs a dummy batch of ``--max-num-batched-tokens`` tokens over up to ``--max-num-seqs``
  sequences;
* the CUDA graph capture (vLLM's ``capture_model``, SGLang's ``init_cuda_graphs``) takes what the
  engine's share of the device (``--gpu-memory-utilization``, SGLang's ``--mem-fraction-static``)
  left outside it, so a smaller share leaves it room; ``--enforce-eager`` captures none;
* the KV cache's allocation at start-up: llama.cpp's grows linearly with the context (``-c``),
  vLLM's and SGLang's pools with the engine's share of the device;
* llama.cpp's compute buffers (``graph_reserve``) grow with the micro-batch (``-ub``,
  ``src/llama-context.cpp`` reserves the graph for ``n_ubatch`` tokens);
* the weights: fewer layers on the device (llama.cpp's ``-ngl``, its own advice in the log), or
  more devices (``--tensor-parallel-size``);
* TGI's warm-up runs one prefill of ``--max-batch-prefill-tokens`` tokens; vLLM's warm-up
  (``compile_or_warm_up_model``: kernel warm-ups such as DeepGEMM's, the sampler's) runs after the
  KV cache took the engine's share, so it lives on what the share leaves;
* where the log states no share, the share is lowered by what the allocation lacked of the
  device (and 1 % for the allocator);
* vLLM's refusal "No available memory for the cache blocks" (nothing left for the KV cache): a
  larger share of the device, vLLM's own advice.

Where the allocation is proportional to a setting the log states, the setting that fits is that
value scaled by what was free over what was asked; where the log states the free memory but not
the setting, the remedy says the share of its current value that fits; where neither, it names
the setting and says what is missing.
"""

from __future__ import annotations

import math
import re

from oomtrace.analysis.findings import ClassCheck, Incident, Remedy
from oomtrace.analysis.remedy_base import (
    RemedyFacts,
    as_float,
    as_int,
    lower_share_by,
    remedy,
    set_utilisation,
)
from oomtrace.units import format_bytes

# TGI's warm-up refusal, as the TGI reader words it (oomtrace/ingest/torch/tgi_log.py):
# "handle T total tokens with P prefill tokens" or "handle P prefill tokens".
_TGI_WARMUP = re.compile(
    r"TGI warm-up: not enough memory to handle (?:(?P<total>\d+) total tokens with \d+ prefill"
    r" tokens|(?P<prefill>\d+) prefill tokens)"
)
# Below this share of what was asked, the free memory says the device is taken by what does not
# scale with the setting, so no share of the setting's value is offered.
_SMALL_SHARE = 0.1
# (flag in vLLM's spelling or the engine's own, what the allocation grows with, the engine's own
# name of the setting in the manifest's engine config)
_SCALES: dict[str, tuple[str, str, str]] = {
    "profile_sampler": (
        "--max-num-seqs",
        "the dummy sampler pass computes the logits of --max-num-seqs sequences at once",
        "max_num_seqs",
    ),
    "profile_run": (
        "--max-num-batched-tokens",
        "the profiling run's dummy batch holds --max-num-batched-tokens tokens",
        "max_num_batched_tokens",
    ),
    "warmup": (
        "--max-batch-prefill-tokens",
        "TGI's warm-up runs one prefill of --max-batch-prefill-tokens tokens",
        "max_batch_prefill_tokens",
    ),
}
_LLAMA_SCALES: dict[str, tuple[str, str, str]] = {
    "kv_cache_init": (
        "-c",
        "the KV cache grows linearly with the context (-c, --ctx-size)",
        "n_ctx",
    ),
    "compute_reserve": (
        "-ub",
        (
            "the compute buffers are reserved for one micro-batch (-ub, --ubatch-size; 512 by "
            "default) and grow with it and with the context"
        ),
        "n_ubatch",
    ),
}


def phase_remedies(incident: Incident, check: ClassCheck, facts: RemedyFacts) -> list[Remedy]:
    """The remedies of a start-up misfit whose check names the phase it failed in (or the
    refusal that says nothing was left for the KV cache)."""
    if check.figure("refusal") is not None:
        return _refusal(incident, check, facts)
    phase = check.figure("phase")
    wanted = as_int(check.figure("requested_bytes"))
    free = as_int(check.figure("free_bytes"))
    if not isinstance(phase, str):
        return _phaseless(incident, check, facts, wanted, free)
    engine = check.figure("engine")
    llama = engine == "llama.cpp"
    if (what := _within_share(phase, engine)) is not None:
        return _share(incident, check, facts, wanted, free, what)
    scales = _SCALES
    if llama:
        scales = _OLLAMA_SCALES if facts.engine == "ollama" else _LLAMA_SCALES
    scaled = scales.get(phase)
    if scaled is not None:
        out = [_scaled(incident, check, facts, scaled, wanted, free)]
        if llama and incident.device:
            out.insert(0, _split(incident, check, facts, incident.device, wanted))
        if phase == "profile_run":
            # vLLM V1's profiling run ends in the sampler's pass over --max-num-seqs sequences,
            # whose default V1 raised to 1024: the first suspect (vllm#12529's 1.16 GiB is the
            # float32 logits and their copy, 1,024 x a 151,936-token vocabulary x 8 bytes)
            sampler = _SCALES["profile_sampler"]
            out.insert(0, _scaled(incident, check, facts, sampler, wanted, free))
        return out
    if phase == "graph_capture":
        return _capture(incident, check, facts, wanted, free)
    if phase == "load_weights":
        return [_weights(incident, check, facts if llama else None, wanted, free)]
    if phase == "engine_create":
        buffers = turbomind_buffers if facts.engine == "lmdeploy" else trtllm_buffers
        return [buffers(incident, check)]
    return []


# Ollama runs llama.cpp but takes its own settings (ollama/ollama/docs/faq.mdx:
# OLLAMA_CONTEXT_LENGTH, or a model's num_ctx; OLLAMA_NUM_PARALLEL; the API's options: num_batch,
# num_gpu), and its context is allocated once for each parallel request.
_OLLAMA_SCALES: dict[str, tuple[str, str, str]] = {
    "kv_cache_init": (
        "-c",
        (
            "the KV cache grows linearly with the context (OLLAMA_CONTEXT_LENGTH, or the model's "
            "num_ctx) times the parallel requests it is kept for (OLLAMA_NUM_PARALLEL)"
        ),
        "n_ctx",
    ),
    "compute_reserve": (
        "-ub",
        (
            "the compute buffers are reserved for one batch (num_batch, 512 by default) and grow "
            "with it and with the context (OLLAMA_CONTEXT_LENGTH or num_ctx)"
        ),
        "n_ubatch",
    ),
}


def llama_compute(incident: Incident, check: ClassCheck, facts: RemedyFacts) -> list[Remedy]:
    """llama.cpp's (or Ollama's runner's) compute buffers reserved again while serving, for a
    batch larger than the one reserved at start (https://github.com/ollama/ollama/issues/10753:
    an image's 1953.40 MiB on the second of two GPUs): the same settings as at start-up, the
    micro-batch and, on a device of several, its share of the layers."""
    scales = _OLLAMA_SCALES if facts.engine == "ollama" else _LLAMA_SCALES
    wanted = as_int(check.figure("requested_bytes"))
    free = as_int(check.figure("free_bytes"))
    out = [_scaled(incident, check, facts, scales["compute_reserve"], wanted, free)]
    if incident.device:
        out.insert(0, _split(incident, check, facts, incident.device, wanted))
    return out


def _within_share(phase: str, engine: object) -> str | None:
    """What failed, where the phase lives on the engine's share of the device: vLLM's and
    SGLang's KV pools (llama.cpp's cache is sized by its context instead), and vLLM's warm-up,
    which runs after the KV cache took the share (kernel warm-ups, the sampler's; vllm#29360)."""
    if phase == "kv_cache_init" and engine != "llama.cpp":
        return "the KV cache's allocation"
    if phase == "warmup" and engine in ("vllm", "sglang"):
        return "the warm-up after the KV cache"
    return None


def _refusal(incident: Incident, check: ClassCheck, facts: RemedyFacts) -> list[Remedy]:
    """The start-up refusals whose own words name the setting (the KV length is computed by
    :mod:`oomtrace.analysis.remedies` from the refusal's figures)."""
    if check.figure("refusal") == "startup_no_kv_memory":
        return [_no_kv_memory(incident, check, facts)]
    detail = str(check.figure("refusal_detail") or "")
    if (warmup := _TGI_WARMUP.search(detail)) is not None:
        return [_tgi_warmup(incident, check, warmup)]
    if detail.startswith("TensorRT-LLM"):
        return [_trtllm_refusal(incident, check)]
    return []


def _trtllm_refusal(incident: Incident, check: ClassCheck) -> Remedy:
    """TensorRT-LLM's "maxTokensInPagedKvCache must be large enough to process at least 1
    sequence to completion": its KV cache, kv_cache_free_gpu_mem_fraction of what the weights and
    buffers leave (or max_tokens_in_paged_kv_cache), holds less than one sequence of the length
    the engine was built for (tensorrtllm_backend#168: a fraction of 0.2)."""
    return remedy(
        incident,
        check,
        "raise kv_cache_free_gpu_mem_fraction (or max_tokens_in_paged_kv_cache), or build the "
        "engine with a shorter max_seq_len (max_input_len + max_output_len)",
        setting="kv_cache_free_gpu_mem_fraction",
        value=None,
        basis="budget",
        detail="the KV cache must hold one sequence of the engine's maximum length (its blocks "
        "per sequence times the tokens per block); where the refusal states the cache's tokens "
        "the length that fits is computed beside this",
    )


def trtllm_buffers(incident: Incident, check: ClassCheck) -> Remedy:
    """TensorRT-LLM's runtime failed to allocate a buffer, no size stated (TensorRT-LLM#401:
    ``cudaMallocAsync`` in ``BufferManager::gpu`` for an engine built with max_batch_size 192;
    #260 and tensorrtllm_backend#281: the model instance's creation under Triton): what its
    memory is made of are the settings to lower, the log states none of their values."""
    return remedy(
        incident,
        check,
        "lower kv_cache_free_gpu_mem_fraction, or build the engine with a smaller "
        "max_batch_size / max_num_tokens",
        setting=None,
        value=None,
        basis="budget",
        detail="TensorRT-LLM's runtime buffers grow with the max_batch_size and max_num_tokens "
        "the engine was built with, and its KV cache takes kv_cache_free_gpu_mem_fraction of "
        "what the weights and those buffers leave; a buffer that finds no room asks less of "
        "either (the log states neither, so no value is computed)",
    )


def turbomind_buffers(incident: Incident, check: ClassCheck) -> Remedy:
    """LMDeploy's TurboMind failed to create a model instance: its KV cache was allocated first,
    cache_max_entry_count of the GPU's memory (of the total in LMDeploy 0.2.0, of what the
    weights leave since), and the instance's buffers found no room in the rest
    (https://github.com/InternLM/lmdeploy/issues/1019, answered with cache_max_entry_count 0.2;
    the log states neither figure, so no value is computed)."""
    return remedy(
        incident,
        check,
        "lower cache_max_entry_count (--cache-max-entry-count, or TurbomindEngineConfig's "
        "cache_max_entry_count), for example to 0.2",
        setting=None,
        value=None,
        basis="budget",
        detail="TurboMind gives its KV cache cache_max_entry_count of the GPU's memory before it "
        "creates the model instance, whose runtime buffers need the rest; a smaller share leaves "
        "them room (the log states neither the share nor the buffers' size)",
    )


def _scaled(
    incident: Incident,
    check: ClassCheck,
    facts: RemedyFacts,
    scaled: tuple[str, str, str],
    wanted: int | None,
    free: int | None,
) -> Remedy:
    flag, grows, key = scaled
    name = facts.flag(flag)
    current = as_int(facts.config.get(key))
    asked = "what it asked is unstated"
    if wanted is not None:
        asked = f"it asked {format_bytes(wanted)}"
    room = f" with {format_bytes(free)} free" if free is not None else " (free memory unstated)"
    if wanted and free is not None and free < wanted and current:
        fits = max(1, current * free // wanted)
        return remedy(
            incident,
            check,
            f"set {name} {fits}",
            setting=name,
            value=str(fits),
            basis="budget",
            detail=f"{grows}; {asked}{room} at {name} {current}: {current} x "
            f"{format_bytes(free)} / {format_bytes(wanted)} = {fits} fits, if nothing else "
            "moves",
            figures={key: fits, "requested_bytes": wanted, "free_bytes": free},
        )
    if wanted and free is not None and free < wanted:
        share = free / wanted
        missing = (
            f"the log does not state {name}, so at most {math.floor(share * 100)}% of its "
            "current value fits"
        )
        if share < _SMALL_SHARE:  # the rest of the device is taken: the scaled part is not all
            missing = (
                f"what was free is under a tenth of what it asked, so lowering {name} alone may "
                f"not fit; the log does not state {name}"
            )
    elif wanted and free is not None:
        missing = (
            "none of the free memory was in one piece the allocation could use: lower it until "
            "it fits (the figures give no value)"
        )
    elif current:
        missing = f"the log states {name} {current} but not the free memory: no value is computed"
    else:
        missing = f"the log states neither {name} nor the free memory, so no value is computed"
    return remedy(
        incident,
        check,
        f"lower {name}" + (f" from {current}" if current else ""),
        setting=name,
        value=None,
        basis="budget",
        detail=f"{grows}; {asked}{room}; {missing}",
        figures={"requested_bytes": wanted, "free_bytes": free},
    )


def _capture(
    incident: Incident, check: ClassCheck, facts: RemedyFacts, wanted: int | None, free: int | None
) -> list[Remedy]:
    out = _share(incident, check, facts, wanted, free, "the CUDA graph capture")
    out.append(
        remedy(
            incident,
            check,
            f"or start with {facts.flag('--enforce-eager')}" + facts.elsewhere("--enforce-eager"),
            setting=facts.flag("--enforce-eager"),
            value=None,
            basis="budget",
            detail="no CUDA graphs are captured, so none of their memory is needed; decoding "
            "runs slower without them",
        )
    )
    return out


def _share(
    incident: Incident,
    check: ClassCheck,
    facts: RemedyFacts,
    wanted: int | None,
    free: int | None,
    what: str,
) -> list[Remedy]:
    """A smaller share of the device for the engine's static pools, by at least what the
    allocation lacked: the failed allocation is one of the phase's, so the value is a bound."""
    name = facts.flag("--gpu-memory-utilization")
    share = as_float(facts.config.get("gpu_memory_utilization"))
    total = as_int(check.figure("device_total_bytes"))
    if share and total and wanted is not None and free is not None and wanted > free:
        lower = math.floor((share - (wanted - free) / total) * 100) / 100
        if 0 < lower < share:
            return [
                set_utilisation(
                    incident,
                    check,
                    facts,
                    lower,
                    prefix="set",
                    suffix=" at most",
                    detail=f"{what} lacked {format_bytes(wanted - free)} of the "
                    f"{format_bytes(total)} device at {name} {share:.2f}; this leaves it that "
                    "room, and more may be needed after the allocation that failed",
                )
            ]
    if not share and total and wanted is not None and free is not None and wanted > free:
        lowered = lower_share_by(incident, check, facts, wanted - free, total, what)
        if lowered is not None:
            return [lowered]
    stated = f" from {share:.2f}" if share else ""
    missing = (
        "the log states no figure to compute a value from"
        if wanted is None or free is None
        else f"the log does not state {name} or the device's size"
    )
    return [
        remedy(
            incident,
            check,
            f"lower {name}{stated}{facts.elsewhere('--gpu-memory-utilization')}",
            setting=name,
            value=None,
            basis="budget",
            detail=f"{what} takes what the engine's share of the device leaves; {missing}",
        )
    ]


def _weights(
    incident: Incident,
    check: ClassCheck,
    llama: RemedyFacts | None,
    wanted: int | None,
    free: int | None,
) -> Remedy:
    """What the weights' load that failed asks: llama.cpp's (``llama``, its facts) fewer layers
    on the device, Ollama's as its own settings say it; another engine's more GPUs."""
    need = f"the weights asked {format_bytes(wanted)}" if wanted is not None else "the weights"
    room = f" with {format_bytes(free)} free" if free is not None else ""
    if llama is not None and llama.engine == "ollama":
        return remedy(
            incident,
            check,
            "lower num_gpu (the layers Ollama puts on the GPU), or reserve room with "
            "OLLAMA_GPU_OVERHEAD (bytes on each GPU) so that its own estimate offloads fewer",
            setting="num_gpu",
            value=None,
            basis="budget",
            detail=f"{need}{room} on one device; fewer layers on it keep the rest in host "
            "memory (the log does not state the layers' sizes, so no count is computed)",
        )
    if llama is not None:
        return remedy(
            incident,
            check,
            "lower -ngl (--n-gpu-layers)",
            setting="-ngl",
            value=None,
            basis="budget",
            detail=f"{need}{room} on one device; fewer layers on it keep the rest in host "
            "memory (the log does not state the layers' sizes, so no count is computed)",
        )
    whole = as_int(check.figure("extrapolated_weights_bytes"))
    loaded, shards = as_int(check.figure("shards_loaded")), as_int(check.figure("shards_total"))
    if whole is not None:
        # the device was full with few shards loaded: not the weights' size (vllm#31273)
        return remedy(
            incident,
            check,
            "find what held the device before the weights loaded: other processes on it "
            "(nvidia-smi), and this release against the one before it with the same settings",
            setting=None,
            value=None,
            basis="budget",
            detail=f"the device was full with {loaded} of {shards} checkpoint shards loaded; "
            f"weights that filled it so soon would weigh {format_bytes(whole)} in all, so more "
            "GPUs or a smaller model would not be the fix",
        )
    at = f" at checkpoint shard {loaded + 1} of {shards}" if loaded is not None else ""
    return remedy(
        incident,
        check,
        "spread the weights over more GPUs (--tensor-parallel-size), load a quantized model, "
        "or serve a smaller one",
        setting="--tensor-parallel-size",
        value=None,
        basis="budget",
        detail=f"{need}{room}{at}: the model's weights do not fit this device's share (not the "
        "KV cache: it is allocated after them)",
    )


def _split(
    incident: Incident, check: ClassCheck, facts: RemedyFacts, device: int, wanted: int | None
) -> Remedy:
    """llama.cpp failed on a device other than the first: the model is split over several GPUs
    and each holds its share of the weights and its own KV cache and compute buffers, so the one
    that failed, often the smallest, takes less (ollama#6860: the fifth GPU, of 4 GiB, beside
    four of 12 GiB). Ollama splits the layers by its own estimate of each GPU's room, which
    ``OLLAMA_GPU_OVERHEAD`` lowers (``ollama serve --help``: "Reserve a portion of VRAM per GPU
    (bytes)"); it has no tensor split of its own."""
    asked = f" ({format_bytes(wanted)} more)" if wanted is not None else ""
    action, setting = (
        (
            f"give CUDA{device} a smaller share of the model (-ts/--tensor-split), or leave it out "
            "(CUDA_VISIBLE_DEVICES)"
        ),
        "--tensor-split",
    )
    if facts.engine == "ollama":
        action, setting = (
            (
                "reserve room on each GPU with OLLAMA_GPU_OVERHEAD (bytes) so that Ollama's split "
                f"gives CUDA{device} less, lower num_gpu, or leave CUDA{device} out "
                "(CUDA_VISIBLE_DEVICES)"
            ),
            "OLLAMA_GPU_OVERHEAD",
        )
    return remedy(
        incident,
        check,
        action,
        setting=setting,
        value=None,
        basis="budget",
        detail=f"the failure is on CUDA{device} of several: each GPU holds its layers and its own "
        f"buffers, and this one had no room for its part{asked}; the others may have had",
    )


def _phaseless(
    incident: Incident, check: ClassCheck, facts: RemedyFacts, wanted: int | None, free: int | None
) -> list[Remedy]:
    """An OOM before the engine served, in no phase its lines state: TensorRT-LLM's executor by
    the component it could not create; else what the engine's share of the device left outside
    it was too little, where the log states that share."""
    if check.figure("engine") == "tensorrt-llm":
        return [_trtllm_executor(incident, check, free)]
    if wanted is None or free is None or facts.config.get("gpu_memory_utilization") is None:
        return []
    return _share(incident, check, facts, wanted, free, "the start-up's failed allocation")


def _trtllm_executor(incident: Incident, check: ClassCheck, free: int | None) -> Remedy:
    """TensorRT-LLM's executor could not create a component after the model and the KV cache's
    estimate: its own buffers are sized by max_num_tokens and max_batch_size (and the CUDA
    graphs' batch sizes), and the KV cache takes kv_cache_config.free_gpu_memory_fraction of
    what the model leaves (TensorRT-LLM#5950: "Additional executor resources" with 16.95 GiB
    free)."""
    component = check.figure("component")
    what = f"its {component}" if isinstance(component, str) and component else "a component"
    room = f" in the {format_bytes(free)} left" if free is not None else ""
    return remedy(
        incident,
        check,
        "lower max_num_tokens or max_batch_size (and cuda_graph_config's max_batch_size), or "
        "leave room with a lower kv_cache_config.free_gpu_memory_fraction",
        setting=None,
        value=None,
        basis="budget",
        detail=f"TensorRT-LLM's executor could not create {what}{room} after the model and the "
        "KV cache's estimate; its buffers grow with max_num_tokens and max_batch_size, and the "
        "KV cache takes its fraction of what the model leaves (the log states none of them, so "
        "no value is computed)",
    )


def _no_kv_memory(incident: Incident, check: ClassCheck, facts: RemedyFacts) -> Remedy:
    """vLLM's "No available memory for the cache blocks": its share of the device was spent on
    the weights and the profiling run's peak before any KV cache (vLLM's own advice is a larger
    share). Before 0.7 vLLM counted other processes' memory inside that share, so a second
    engine on the same device needs the first one's share added to its own
    (https://github.com/vllm-project/vllm/issues/10533). SGLang's "Not enough memory. Please
    try to increase --mem-fraction-static" (``model_runner.py``) is the same refusal: what its
    share left after the weights held no KV token."""
    name = facts.flag("--gpu-memory-utilization")
    config = facts.config
    share = as_float(config.get("gpu_memory_utilization", config.get("mem_fraction_static")))
    stated = f" from {share:.2f}" if share else ""
    others = (
        "where another process holds the device (vLLM before 0.7 counts its memory inside the "
        "share), move it, or add what it holds to the share"
    )
    if facts.engine == "sglang":
        others = (
            "SGLang's own advice; where the share is already near 1, the weights leave no room "
            "on this device: more devices (--tp) or a smaller model"
        )
    return remedy(
        incident,
        check,
        f"raise {name}{stated}",
        setting=name,
        value=None,
        basis="budget",
        detail="the engine's share of the device was spent on the weights and the start-up's "
        f"peak before any KV cache; {others}; the log states no figure to compute a value from",
    )


def _tgi_warmup(incident: Incident, check: ClassCheck, warmup: re.Match[str]) -> Remedy:
    """TGI's own advice in its warm-up refusal (``server/text_generation_server/models/
    flash_causal_lm.py``: "You need to decrease `--max-batch-total-tokens` or
    `--max-batch-prefill-tokens`"): below what it could not handle."""
    total, prefill = warmup.group("total"), warmup.group("prefill")
    flag, value = (
        ("--max-batch-total-tokens", total) if total else ("--max-batch-prefill-tokens", prefill)
    )
    return remedy(
        incident,
        check,
        f"lower {flag} below {int(value):,}",
        setting=flag,
        value=None,
        basis="budget",
        detail=f"TGI's warm-up could not hold {int(value):,} tokens in the memory left after the "
        "weights; the refusal states no memory figure, so no value below it is computed",
        figures={"refused_tokens": int(value)},
    )
