"""What every remedy is made of: the facts it reads besides its incident, each engine's spelling
of a setting, and the constructors (:mod:`oomtrace.analysis.remedies` says what each class gets).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from oomtrace.analysis.evidence import Scalar
from oomtrace.analysis.findings import ClassCheck, Incident, Remedy
from oomtrace.analysis.kvmodel import KVModel
from oomtrace.analysis.limits import LimitReplay
from oomtrace.units import format_bytes

# vLLM refuses a --gpu-memory-utilization above 1; one this close to it leaves nothing for the
# CUDA context and other processes, so a remedy never proposes more.
MAX_UTILISATION = 0.98
# A limit whose replay queues the traffic this much longer (p99) than the recorded settings is
# reported with its cost in the action itself: it trades the OOM for waiting.
COSTLY_QUEUE_S = 60.0


# Each engine's spelling of the settings a remedy changes (vLLM's ``vllm serve --help``,
# SGLang's ``python -m sglang.launch_server --help``, TGI's ``text-generation-launcher --help``,
# ``trtllm-serve --help``, ``llama-server --help``); vLLM's where an engine is not known.
FLAGS: dict[str, dict[str, str]] = {
    "vllm": {},
    "sglang": {
        "--max-num-seqs": "--max-running-requests",
        "--max-num-batched-tokens": "--chunked-prefill-size",
        "--max-model-len": "--context-length",
        "--gpu-memory-utilization": "--mem-fraction-static",
        "--enforce-eager": "--disable-cuda-graph",
    },
    "tgi": {
        "--max-num-seqs": "--max-batch-size",
        "--max-num-batched-tokens": "--max-batch-prefill-tokens",
        "--max-model-len": "--max-total-tokens",
        "--gpu-memory-utilization": "--cuda-memory-fraction",
        "--tensor-parallel-size": "--num-shard",
        "--enforce-eager": "--cuda-graphs 0",
    },
    "tensorrt-llm": {
        "--max-num-seqs": "--max_batch_size",
        "--max-num-batched-tokens": "--max_num_tokens",
        "--max-model-len": "--max_seq_len",
        "--gpu-memory-utilization": "--kv_cache_free_gpu_memory_fraction",
        "--tensor-parallel-size": "--tp_size",
    },
    "llama.cpp": {
        "--max-num-seqs": "-np",
        "--max-num-batched-tokens": "-b",
        "--max-model-len": "-c",
        "--gpu-memory-utilization": "-ngl",
    },
    # Ollama takes its server's settings from the environment (``ollama serve --help``), a
    # model's from its parameters (``num_gpu``: the layers on the device)
    "ollama": {
        "--max-num-seqs": "OLLAMA_NUM_PARALLEL",
        "--max-model-len": "OLLAMA_CONTEXT_LENGTH",
        "-c": "OLLAMA_CONTEXT_LENGTH",
        "-ub": "num_batch",
        "-np": "OLLAMA_NUM_PARALLEL",
        "--gpu-memory-utilization": "num_gpu",
    },
}
# Engines whose setting in place of ``--gpu-memory-utilization`` is no share of the whole device:
# TensorRT-LLM's ``free_gpu_memory_fraction`` is a share of what the weights and buffers leave,
# llama.cpp's ``-ngl`` a count of layers. A share computed for the device is not theirs to take.
NO_DEVICE_SHARE: dict[str, str] = {
    "tensorrt-llm": "its fraction is of the memory the weights and buffers leave free, not of "
    "the device, so no value is computed from the device's figures",
    "llama.cpp": "it counts the layers kept on the device; fewer keep the rest in host memory",
    "ollama": "it counts the layers kept on the device; fewer keep the rest in host memory",
}


# Where the inputs name no engine (a PyTorch message pasted alone, TGI's log read by the
# PyTorch-log reader), the other engines' spelling of a setting follows vLLM's in the action
# (TGI's ``text-generation-launcher --help``: the share of the device, CUDA graphs).
ELSEWHERE: dict[str, str] = {
    "--gpu-memory-utilization": "SGLang: --mem-fraction-static; TGI: --cuda-memory-fraction",
    "--enforce-eager": "SGLang: --disable-cuda-graph; TGI: --cuda-graphs 0",
}


@dataclass(frozen=True)
class RemedyFacts:
    """What the remedies of one incident read besides the incident itself."""

    config: dict[str, Any]
    kv: KVModel
    replay: LimitReplay | None
    engine: str | None = None

    def flag(self, name: str) -> str:
        """The engine's own spelling of a vLLM flag."""
        return FLAGS.get(self.engine or "vllm", {}).get(name, name)

    @property
    def no_share(self) -> str | None:
        """Why the engine's setting for its share of the device takes no share of the device
        (None where it does)."""
        return NO_DEVICE_SHARE.get(self.engine or "vllm")

    def elsewhere(self, name: str) -> str:
        """The other engines' spelling of a vLLM flag, in parentheses after it, where the inputs
        name no engine ("" where they do, or no other engine has the setting)."""
        other = ELSEWHERE.get(name) if self.engine is None else None
        return f" ({other})" if other else ""


def remedy(
    incident: Incident,
    check: ClassCheck,
    action: str,
    *,
    setting: str | None,
    value: str | None,
    basis: str,
    detail: str,
    figures: dict[str, Scalar] | None = None,
) -> Remedy:
    return Remedy(
        incident=incident.id,
        cls=incident.cls,
        action=action,
        setting=setting,
        value=value,
        basis=basis,
        detail=detail,
        figures=tuple((figures or {}).items()),
        evidence=check.evidence,
    )


def set_flag(
    incident: Incident,
    check: ClassCheck,
    facts: RemedyFacts,
    flag: str,
    value: str,
    *,
    basis: str,
    detail: str,
    figures: dict[str, Scalar] | None = None,
    prefix: str = "set",
    suffix: str = "",
) -> Remedy:
    """A remedy that sets one engine flag (``flag`` in vLLM's spelling, written in the engine's)."""
    name = facts.flag(flag)
    return remedy(
        incident,
        check,
        f"{prefix} {name} {value}{suffix}",
        setting=name,
        value=value,
        basis=basis,
        detail=detail,
        figures=figures,
    )


def as_int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value)


def as_float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def set_utilisation(
    incident: Incident,
    check: ClassCheck,
    facts: RemedyFacts,
    share: float,
    *,
    detail: str,
    prefix: str = "set",
    suffix: str = "",
    figures: dict[str, Any] | None = None,
) -> Remedy:
    """A remedy that sets the engine's share of the device (to two decimals, as vLLM takes it);
    one that lowers its setting, with no value, where that setting is no share of the device."""
    if facts.no_share:
        return _lower_no_share(incident, check, facts, detail)
    return set_flag(
        incident,
        check,
        facts,
        "--gpu-memory-utilization",
        f"{share:.2f}",
        prefix=prefix,
        suffix=suffix,
        basis="budget",
        detail=detail,
        figures={"gpu_memory_utilization": share, **(figures or {})},
    )


def lower_share_by(
    incident: Incident, check: ClassCheck, facts: RemedyFacts, short: int, total: int, what: str
) -> Remedy | None:
    """Where the log does not state the engine's share of the device: by how much to lower it so
    that ``what``, which lacked ``short`` bytes of the ``total`` device, finds room (that share of
    the device and 1 % for the allocator, rounded up to the hundredth the flag takes); None
    where that is the whole device."""
    by = math.ceil((short / total + 0.01) * 100) / 100
    if by >= 1:
        return None
    if facts.no_share:
        what_lacked = f"{what} lacked {format_bytes(short)} of the {format_bytes(total)} device"
        return _lower_no_share(incident, check, facts, what_lacked)
    name = facts.flag("--gpu-memory-utilization")
    return remedy(
        incident,
        check,
        f"lower {name} by {by:.2f} or more{facts.elsewhere('--gpu-memory-utilization')}",
        setting=name,
        value=None,
        basis="budget",
        detail=(
            f"{what} lacked {format_bytes(short)}, {short / total:.1%} of the "
            f"{format_bytes(total)} device (and 1 % for the allocator): a share that much "
            "smaller leaves it room, at the cost of as much KV cache; the log does not state the "
            "current share, so no value is computed"
        ),
        figures={"lacked_bytes": short, "share_decrease": by},
    )


def _lower_no_share(incident: Incident, check: ClassCheck, facts: RemedyFacts, why: str) -> Remedy:
    """Lower the engine's setting in place of vLLM's share of the device, with no value: that
    setting takes no share of the device (:data:`NO_DEVICE_SHARE` says why)."""
    name = facts.flag("--gpu-memory-utilization")
    return remedy(
        incident,
        check,
        f"lower {name}",
        setting=name,
        value=None,
        basis="budget",
        detail=f"{why}; {name}: {facts.no_share}",
    )


def expandable_segments(incident: Incident, check: ClassCheck) -> Remedy:
    """The allocator setting that returns reserved-but-unallocated memory, with the check's
    ``slack_bytes`` (and ``requested_bytes``) said in its detail."""
    slack, wanted = as_int(check.figure("slack_bytes")), as_int(check.figure("requested_bytes"))
    detail = "expandable segments let the allocator grow and reuse blocks instead of caching them"
    if slack is not None:
        detail = (
            f"{format_bytes(slack)} were reserved but unallocated"
            + (f", more than the {format_bytes(wanted)} that failed" if wanted else "")
            + "; "
            + detail
        )
    return remedy(
        incident,
        check,
        "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in the engine's environment",
        setting="PYTORCH_CUDA_ALLOC_CONF",
        value="expandable_segments:True",
        basis="allocator",
        detail=detail,
        figures={"slack_bytes": slack, "requested_bytes": wanted},
    )
