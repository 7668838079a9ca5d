"""``workspace_overflow``: FlashInfer's attention workspace, a fixed buffer, too small for a batch.

FlashInfer plans each batch's attention into a workspace buffer the engine allocated once; a
prefill batch whose split-KV temporaries do not fit raises (``oomtrace/ingest/torch/workspace.py``)
while the device may have gigabytes free (flashinfer#362, sglang#2102). No share of the device
and no added device helps: the buffer is as large as the engine's setting says. The remedies
are the engine's own knob for the buffer's size, a smaller prefill chunk (the temporaries grow
with the batch's tokens), or another attention backend:

* vLLM: ``VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE`` (bytes; 394 MiB by default, ``vllm/envs.py``;
  vllm PR #48428: it overflowed for wide-head models at an 8192-token chunk),
  ``--max-num-batched-tokens``, ``--attention-backend FLASH_ATTN``;
* SGLang: ``SGLANG_FLASHINFER_WORKSPACE_SIZE`` (bytes; 384 MiB by default, 512 MiB for some
  models, ``sglang/srt/environ.py``), ``--chunked-prefill-size``, ``--attention-backend triton``.
"""

from __future__ import annotations

import math
from typing import Any, Final

from oomtrace.analysis import evidence as ev
from oomtrace.analysis.check_context import Context
from oomtrace.analysis.findings import ClassCheck, Incident, Remedy
from oomtrace.analysis.remedy_base import RemedyFacts, as_int, remedy
from oomtrace.schema import EVENT_PHASES
from oomtrace.units import format_bytes

KIND: Final = "workspace_overflow"
MIB: Final = 1 << 20
# Each engine's knob for the workspace's size and its default, in bytes; another backend.
KNOBS: Final[dict[str, tuple[str, int, str]]] = {
    "vllm": ("VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE", 394 * MIB, "--attention-backend FLASH_ATTN"),
    "sglang": ("SGLANG_FLASHINFER_WORKSPACE_SIZE", 384 * MIB, "--attention-backend triton"),
}
# Where the chunk's budget is in the engine's config (the flag is remedy_base.FLAGS' spelling).
CHUNK_KEYS: Final = ("max_num_batched_tokens", "chunked_prefill_size")
STEP = 128 * MIB  # a workspace size proposed is rounded up to this


def workspace(ctx: Context) -> ClassCheck:
    """``workspace_overflow`` when the incident's failure is FlashInfer's workspace overflowing,
    with the figures its remedies read (``requested_bytes``, ``available_bytes``,
    ``batch_tokens``, ``buffer``)."""
    tokens = sum(s.step_tokens for s in ctx.steps if s.in_prefill) or None
    return overflow(ctx.event, tokens)


def overflow(event: dict[str, Any] | None, tokens: int | None = None) -> ClassCheck:
    """The check on the failure's event alone (a log without times), ``tokens`` those of the
    prefill batch where known."""
    if event is None or event.get("kind") != KIND:
        return ClassCheck(KIND, False, "no FlashInfer workspace overflow at the failure")
    asked, left = event.get("requested_bytes"), event.get("free_bytes")
    buffer = _buffer(event)
    batch = f" for a prefill batch of {tokens:,} tokens" if tokens else " for a prefill batch"
    reason = f"FlashInfer's attention workspace (fixed size) was too small{batch}: "
    reason += f"{buffer} asked {format_bytes(asked)}" if asked is not None else f"{buffer} failed"
    if left is not None:
        reason += f" with only {format_bytes(left)} of the workspace left"
    reason += "; a fixed buffer ran out, not the device's memory"
    phase = str(event.get("phase") or "")
    if phase in EVENT_PHASES:
        reason += f" (during {EVENT_PHASES[phase]})"
    return ClassCheck(
        KIND,
        True,
        reason,
        (ev.event(event),),
        (
            ("requested_bytes", asked),
            ("available_bytes", left),
            ("batch_tokens", tokens),
            ("buffer", buffer),
        ),
    )


def _buffer(event: dict[str, Any]) -> str:
    """The buffer's name as ingest wrote it in ``detail`` (``...: NAME (alignment``)."""
    detail = str(event.get("detail") or "")
    head, _, rest = detail.partition(": ")
    name = rest.split(" ", 1)[0]
    return name if head and name else "a temporary buffer"


def workspace_remedies(incident: Incident, check: ClassCheck, facts: RemedyFacts) -> list[Remedy]:
    """Raise the engine's workspace size, lower the prefill chunk, or another backend."""
    asked = as_int(check.figure("requested_bytes"))
    left = as_int(check.figure("available_bytes"))
    engines = [facts.engine] if facts.engine in KNOBS else list(KNOBS)
    out = []
    for engine in engines:
        knob, default, backend = KNOBS[engine]
        size = _size(default, asked)
        value = str(size) if size is not None else None
        action = f"raise FlashInfer's workspace: {knob}={value}" if value else f"raise {knob}"
        if len(engines) > 1:
            action = f"{engine}: {action}"
        detail = (
            f"the workspace is a fixed buffer ({format_bytes(default)} by default on {engine}); "
            + (
                f"the default plus the whole {format_bytes(asked)} asked (what the plan carved "
                f"before it fit in the default), rounded up to {format_bytes(STEP)}"
                if asked is not None
                else "the message states no size"
            )
            + f"; or use another attention backend ({backend})"
        )
        out.append(
            remedy(
                incident,
                check,
                action,
                setting=knob,
                value=value,
                basis="stated",
                detail=detail,
                figures={"workspace_bytes": size},
            )
        )
    out.extend(_chunk(incident, check, facts, asked, left))
    return out


def _size(default: int, asked: int | None) -> int | None:
    """A workspace that holds what the plan carved before (at most the default, unless it was
    raised already) and the whole ask."""
    if asked is None:
        return None
    return math.ceil((default + asked) / STEP) * STEP


def _chunk(
    incident: Incident, check: ClassCheck, facts: RemedyFacts, asked: int | None, left: int | None
) -> list[Remedy]:
    """A prefill chunk whose temporaries fit what the workspace had (they grow with the batch's
    tokens), else half the batch; nothing where neither the batch nor the chunk is known."""
    tokens = as_int(check.figure("batch_tokens"))
    chunk = next((as_int(facts.config.get(k)) for k in CHUNK_KEYS if facts.config.get(k)), None)
    base = tokens or chunk
    if not base or base < 32:
        return []
    scaled = asked is not None and left is not None and 0 < left < asked
    value = base * left // asked if scaled and asked and left else base // 2
    value = max(value // 16 * 16, 16)
    flag = facts.flag("--max-num-batched-tokens")
    what = f"the {tokens:,}-token prefill batch" if tokens else f"the {chunk:,}-token chunk"
    return [
        remedy(
            incident,
            check,
            f"lower the prefill chunk: set {flag} {value}",
            setting=flag,
            value=str(value),
            basis="stated",
            detail=(
                f"FlashInfer's temporaries grow with a batch's tokens; {what} "
                + (
                    f"asked {format_bytes(asked)} where {format_bytes(left)} was left"
                    if scaled and asked is not None and left is not None
                    else "overflowed the workspace: half of it"
                )
            ),
            figures={"chunk_tokens": value},
        )
    ]
