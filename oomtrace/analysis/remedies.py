"""Remedies: for each incident, the limit or setting that would have prevented it, computed from
the trace (never a rule of thumb), with what it costs.

* ``kv_exhaustion`` (:mod:`oomtrace.analysis.remedy_kv`): the ``--max-num-seqs``,
  ``--max-num-batched-tokens`` or ``--max-model-len`` under which the incident's traffic,
  replayed (:mod:`oomtrace.analysis.limits`), never runs the pool dry, with the queueing delay
  each costs, the cheapest first; without a replay, the bound the budget gives (every admitted
  request at its whole contract: ``pool tokens // largest contract``), its cost not measured;
* ``startup_misfit``: the largest ``--max-model-len`` whose one request fits the KV memory the
  engine had (in whole blocks, as vLLM sizes it), and the smallest ``--gpu-memory-utilization``
  under which the model's own length fits, when one below 1 exists; where the failure's lines
  state its phase (:mod:`oomtrace.analysis.remedy_startup`), the setting that sizes that phase
  (``--max-num-seqs`` for the dummy sampler, ``-c`` for llama.cpp's KV cache, ...), its value
  where the log's figures compute it;
* ``transient_peak`` (:mod:`oomtrace.analysis.remedy_transient`): the prefill chunk
  (``--max-num-batched-tokens``) whose step fits the memory that was free at the OOM, from the
  failed request's own step bytes (with ``prompt_logprobs``, the limit on them), and the
  utilisation that leaves room for the allocation that failed;
* ``fragmentation``: the allocator setting that returns reserved-but-unallocated memory
  (``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``);
* ``foreign_memory``: which process to move, and the utilisation that leaves it room;
* ``leak``: the restart interval the trend allows before the headroom is gone;
* ``gpu_fault``: what NVIDIA's Xid catalogue gives for the Xid's number (reset or drain the GPU,
  check its ECC, power or driver; :mod:`oomtrace.analysis.check_gpu_fault`), never a memory
  setting.

The checks of :mod:`oomtrace.analysis.classify` compute the figures (``ClassCheck.figures``);
this module only turns them into settings.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from oomtrace.analysis.check_allocation import GGML_WORDS, NCCL_WORDS, TRTLLM_RUNTIME_WORDS
from oomtrace.analysis.check_gpu_fault import CATALOGUE, what_failed
from oomtrace.analysis.findings import ClassCheck, Incident, Remedy
from oomtrace.analysis.remedy_base import (
    MAX_UTILISATION,
    RemedyFacts,
    as_float,
    as_int,
    expandable_segments,
    remedy,
    set_flag,
    set_utilisation,
)
from oomtrace.analysis.remedy_context import ENGINES, smaller_context
from oomtrace.analysis.remedy_kv import kv_remedies
from oomtrace.analysis.remedy_startup import phase_remedies, trtllm_buffers
from oomtrace.analysis.remedy_transient import transient_remedies
from oomtrace.analysis.workspace import workspace_remedies
from oomtrace.units import format_bytes

__all__ = ["RemedyFacts", "remedies_for"]


def remedies_for(incident: Incident, facts: RemedyFacts) -> tuple[Remedy, ...]:
    """The incident's remedies, the one to apply first first."""
    if incident.reason.startswith(NCCL_WORDS):
        # NCCL's own buffers: whatever the class, the engine's share must leave them room
        return (_nccl_room(incident),)
    out: list[Remedy] = []
    make = _MAKERS.get(incident.cls)
    check = next((c for c in incident.checks if c.cls == incident.cls and c.matched), None)
    if make is not None and check is not None:
        out += make(incident, check, facts)
    elif incident.cls == "unknown" and incident.reason.startswith(TRTLLM_RUNTIME_WORDS):
        out.append(_trtllm_runtime(incident))
    elif incident.cls == "unknown" and incident.reason.startswith(GGML_WORDS):
        out.append(_ggml_sizeless(incident))
    # the driver's fault beside the failure: its own action after the memory's
    beside = next((c for c in incident.checks if c.cls == "gpu_fault" and not c.matched), None)
    if beside is not None and beside.figure("xid") is not None:
        out += _gpu_fault(incident, beside, facts)
    return tuple(out)


def _ggml_sizeless(incident: Incident) -> Remedy:
    """ggml's CUDA backend out of memory inside an operation, no size stated
    (https://github.com/ollama/ollama/issues/1236): fewer layers on the device or a smaller
    context; the log states neither, so no value."""
    check = ClassCheck("unknown", False, incident.reason)
    return remedy(
        incident,
        check,
        "offload fewer layers to the GPU (-ngl; Ollama: num_gpu) or use a smaller context (-c; "
        "Ollama: num_ctx) or a smaller quantisation of the model",
        setting=None,
        value=None,
        basis="budget",
        detail="the layers on the device, the context's KV cache and the compute buffers share "
        "it; llama.cpp prints each at load (llm_load_tensors, llama_kv_cache_init, compute "
        "buffer size): the log given states none of them, so no value is computed",
    )


def _trtllm_runtime(incident: Incident) -> Remedy:
    """TensorRT-LLM's runtime failed to allocate a buffer with no size or phase stated
    (https://github.com/NVIDIA/TensorRT-LLM/issues/401): the start-up's remedy of the same
    failure, for an incident no class explains."""
    return trtllm_buffers(incident, ClassCheck("unknown", False, incident.reason))


def _nccl_room(incident: Incident) -> Remedy:
    check = next((c for c in incident.checks if c.matched), None) or ClassCheck(
        incident.cls, False, incident.reason
    )
    where = f"GPU {incident.device}" if incident.device is not None else "each GPU"
    return remedy(
        incident,
        check,
        f"leave NCCL room on {where} outside the engine's share: a lower "
        "--gpu-memory-utilization (vLLM) or --mem-fraction-static (SGLang), or a smaller KV "
        "cache fraction (TensorRT-LLM's kv_cache_free_gpu_mem_fraction)",
        setting=None,
        value=None,
        basis="process",
        detail=(
            "NCCL allocates its communicators' and P2P buffers with cudaMalloc, outside "
            "PyTorch's cache and outside the share the engine sizes for itself; how much it "
            "needs grows with the ranks and channels (NCCL_BUFFSIZE, NCCL_MAX_NCHANNELS bound it)"
        ),
    )


# -- start-up misfit ----------------------------------------------------------------------------


def _misfit(incident: Incident, check: ClassCheck, facts: RemedyFacts) -> list[Remedy]:
    out: list[Remedy] = []
    available = as_int(check.figure("kv_available_bytes"))
    needed = as_int(check.figure("kv_needed_bytes"))
    max_len = as_int(check.figure("max_model_len"))
    length = _fitting_length(check, facts, available, needed, max_len)
    # llama.cpp's and Ollama's cache is sized for the context in use: a fit at or above it is no
    # change, and the change is a smaller one (oomtrace.analysis.remedy_context)
    current = as_int(facts.config.get("kv_cache_tokens")) if facts.engine in ENGINES else max_len
    smaller = None
    if length is not None and current and length[0] >= current:
        length = None
        if facts.engine in ENGINES:
            smaller = smaller_context(incident, check, facts, current)
    if length is not None:
        fits, how = length
        out.append(
            set_flag(
                incident,
                check,
                facts,
                "--max-model-len",
                str(fits),
                basis="budget",
                detail=how
                + (
                    f"; the model's {max_len:,} need {format_bytes(needed)}"
                    if needed and max_len
                    else ""
                ),
                figures={"max_model_len": fits, "kv_available_bytes": available},
            )
        )
    utilisation = as_float(facts.config.get("gpu_memory_utilization"))
    total = as_int(check.figure("device_total_bytes"))
    if needed and available is not None and utilisation and total:
        # The engine's share of the device less the KV memory it had is what it holds besides
        # the cache (weights, activations, graphs); the utilisation that fits adds the need.
        other = utilisation * total - available
        wanted = math.ceil((other + needed) / total * 100) / 100
        if wanted <= MAX_UTILISATION:
            out.append(
                set_utilisation(
                    incident,
                    check,
                    facts,
                    wanted,
                    detail=(
                        f"{format_bytes(round(other))} besides the cache + the "
                        f"{format_bytes(needed)} one request of the model's length needs = "
                        f"{wanted:.0%} of the {format_bytes(total)} device"
                    ),
                )
            )
    return out + phase_remedies(incident, check, facts) + ([smaller] if smaller else [])


def _fitting_length(
    check: ClassCheck,
    facts: RemedyFacts,
    available: int | None,
    needed: int | None,
    max_len: int | None,
) -> tuple[int, str] | None:
    """The largest model length one request of which fits the engine's KV memory, and how it
    was found: the engine's own estimate where it states one (vLLM V1, from its unrounded
    figures), the tokens it says the cache holds (V0), else the memory over bytes a token, in
    whole blocks."""
    block = facts.kv.block_size
    stated = as_int(check.figure("engine_max_model_len"))
    if stated:
        return stated, "the engine's own estimate of the longest request its KV cache holds"
    tokens = as_int(check.figure("kv_tokens"))
    if tokens:
        fits = tokens // block * block
        return fits, f"the engine's KV cache holds {tokens:,} tokens ({fits:,} in whole blocks)"
    per_token = facts.kv.bytes_per_token or (needed / max_len if needed and max_len else None)
    if available is None or available <= 0 or not per_token:
        return None
    per_block = per_token * block
    fits = int(available // per_block) * block
    if fits < block or (max_len is not None and fits >= max_len):
        return None
    return fits, (
        f"the {format_bytes(available)} the engine had for its KV cache hold {fits:,} tokens of "
        f"one request ({available // round(per_block):,} blocks of {block} tokens at "
        f"{format_bytes(round(per_block))})"
    )


# -- foreign memory ------------------------------------------------------------------------------


def _foreign(incident: Incident, check: ClassCheck, facts: RemedyFacts) -> list[Remedy]:
    out: list[Remedy] = []
    pid = as_int(check.figure("pid"))
    held = as_int(check.figure("foreign_bytes"))
    name = check.figure("process_name")
    device = incident.device
    where = f"GPU {device}" if device is not None else "the engine's GPU"
    if held and check.figure("holder") == "unnamed":
        out.append(_find_holder(incident, check, held, where))
    elif held and check.figure("holder") == "outside_pytorch":
        out.append(_outside_pytorch(incident, check, held, where))
    elif held and check.figure("holder") == "beside_engine":
        out.append(_beside_engine(incident, check, held, where))
    elif held and check.figure("holder") == "siblings":
        # the engine's own workers: they stay; the engine's share leaves them room
        out.append(
            remedy(
                incident,
                check,
                f"leave room on {where} for the engine's own worker processes "
                f"({format_bytes(held)}): a lower --gpu-memory-utilization (or "
                "--mem-fraction-static), not moving them",
                setting=None,
                value=None,
                basis="process",
                detail=(
                    f"they held {format_bytes(held)} outside the failing process's share; "
                    "the engine sizes its share as a fraction of the whole device"
                ),
                figures={"foreign_bytes": held},
            )
        )
    elif held:
        who = f"process {pid}" if pid is not None else "the other processes"
        if isinstance(name, str) and name:
            who += f" ({name})"
        shortfall = as_int(check.figure("shortfall_bytes"))
        when = "when the engine started" if incident.anchor == "startup" else "at the peak"
        detail = f"it held {format_bytes(held)} {when}"
        if shortfall is not None:
            failed = "the start-up" if incident.anchor == "startup" else "the failed allocation"
            detail += (
                f"; {failed} was short of {format_bytes(shortfall)}, which that "
                "memory would have covered"
            )
        out.append(
            remedy(
                incident,
                check,
                f"move {who} off {where}",
                setting=None,
                value=None,
                basis="process",
                detail=detail,
                figures={"pid": pid, "foreign_bytes": held},
            )
        )
    total = incident.capacity_bytes
    utilisation = as_float(facts.config.get("gpu_memory_utilization"))
    if held and total and utilisation:
        # Room for the other process as it was at its largest: the engine's share shrinks by it.
        wanted = math.floor((total - held) / total * 0.99 * 100) / 100
        if 0 < wanted < utilisation:
            out.append(
                set_utilisation(
                    incident,
                    check,
                    facts,
                    wanted,
                    prefix="or set",
                    suffix=" to share the GPU",
                    detail=(
                        f"leaves {format_bytes(total - math.floor(total * wanted))} of the "
                        f"{format_bytes(total)} device to others, the {format_bytes(held)} the "
                        "other process held and 1 % for contexts; the KV pool shrinks accordingly"
                    ),
                )
            )
    return out


def _beside_engine(incident: Incident, check: ClassCheck, held: int, where: str) -> Remedy:
    """Small processes beside the engine's model process filled its GPU (one of them failed):
    they are found and moved, the model process stays (sglang#6082: SGLang's fast image
    processor put the requests' pixels on GPU 0; its fix, --disable-fast-image-processor)."""
    engine = as_int(check.figure("engine_pid"))
    stays = f" (not process {engine}, the model's)" if engine is not None else ""
    return remedy(
        incident,
        check,
        f"keep the small processes off {where}{stays}: find them (`nvidia-smi "
        "--query-compute-apps=pid,process_name,used_memory --format=csv`); where they are the "
        "server's own, move their work to the CPU (SGLang: --disable-fast-image-processor keeps "
        "image preprocessing off the GPU)",
        setting=None,
        value=None,
        basis="process",
        detail=f"they held {format_bytes(held)} beside the model's process, which sized its share "
        "of the device without them",
        figures={"foreign_bytes": held},
    )


def _outside_pytorch(incident: Incident, check: ClassCheck, held: int, where: str) -> Remedy:
    """The failing process's own allocations outside PyTorch filled the device: the setting that
    sizes them, not another process, is what to lower."""
    return remedy(
        incident,
        check,
        f"lower what the engine allocates outside PyTorch on {where}: TensorRT-LLM's "
        "kv_cache_free_gpu_mem_fraction (its KV cache takes that share of the free memory), or "
        "the engine's memory share (--gpu-memory-utilization, --mem-fraction-static)",
        setting=None,
        value=None,
        basis="process",
        detail=(
            f"the failing process held {format_bytes(held)} outside PyTorch's allocator; the "
            "allocation that failed was PyTorch's, and it had nothing left beside them"
        ),
        figures={"pid": as_int(check.figure("pid")), "foreign_bytes": held},
    )


def _find_holder(incident: Incident, check: ClassCheck, held: int, where: str) -> Remedy:
    """The OOM message named no process: what held the memory is found first, then moved."""
    return remedy(
        incident,
        check,
        f"find what holds the {format_bytes(held)} on {where} (`nvidia-smi "
        "--query-compute-apps=pid,process_name,used_memory --format=csv`) and move it off "
        "or stop it",
        setting=None,
        value=None,
        basis="process",
        detail=(
            f"{format_bytes(held)} was held outside the failing process's PyTorch allocator and "
            "the OOM message names no process; if nvidia-smi lists only the failing process, the "
            "memory is its own allocations outside PyTorch (another library in it), not "
            "another process's"
        ),
        figures={"pid": None, "foreign_bytes": held},
    )


# -- fragmentation -------------------------------------------------------------------------------


def _fragmentation(incident: Incident, check: ClassCheck, facts: RemedyFacts) -> list[Remedy]:
    return [expandable_segments(incident, check)]


# -- leak ----------------------------------------------------------------------------------------


def _leak(incident: Incident, check: ClassCheck, facts: RemedyFacts) -> list[Remedy]:
    rate = as_float(check.figure("rise_bytes_per_hour"))
    headroom = as_int(check.figure("headroom_bytes"))
    if not rate or rate <= 0 or not headroom:
        return []
    hours = headroom / rate
    # Restart at half the time the whole headroom lasts: the leak's rate varies with traffic.
    every = max(math.floor(hours / 2), 1) if hours >= 2 else round(hours / 2, 1)
    return [
        remedy(
            incident,
            check,
            f"restart the engine every {every} h until the leak is fixed",
            setting=None,
            value=None,
            basis="trend",
            detail=(
                f"idle memory rose {format_bytes(round(rate))} an hour; the "
                f"{format_bytes(headroom)} of headroom last {hours:.1f} h at that rate"
            ),
            figures={"restart_every_h": every, "hours_of_headroom": round(hours, 2)},
        )
    ]


# -- GPU fault -----------------------------------------------------------------------------------


def _gpu_fault(incident: Incident, check: ClassCheck, facts: RemedyFacts) -> list[Remedy]:
    del facts  # the Xid's number decides; nothing of the engine's settings would have helped
    number = as_int(check.figure("xid"))
    what, action = what_failed(number)
    bus = check.figure("pci_bus")
    gpu = f"the GPU at {bus}" if isinstance(bus, str) and bus else "the GPU"
    label = f"Xid {number}" if number is not None else "the Xid"
    return [
        remedy(
            incident,
            check,
            action,
            setting=None,
            value=None,
            basis="driver",
            detail=(
                f"{label} on {gpu}: {what}; no memory setting prevents it (NVIDIA's Xid "
                f"catalogue, {CATALOGUE})"
            ),
            figures={"xid": number},
        )
    ]


_MAKERS: dict[str, Callable[[Incident, ClassCheck, RemedyFacts], list[Remedy]]] = {
    "startup_misfit": _misfit,
    "foreign_memory": _foreign,
    "fragmentation": _fragmentation,
    "leak": _leak,
    "gpu_fault": _gpu_fault,
    "kv_exhaustion": kv_remedies,
    "transient_peak": transient_remedies,
    "workspace_overflow": workspace_remedies,
}
