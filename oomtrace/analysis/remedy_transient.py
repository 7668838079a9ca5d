"""The remedies of a transient peak: the prefill chunk whose step fits what was free at the OOM
(from the failed request's own step bytes, :mod:`oomtrace.analysis.step_bytes`), and the
utilisation that leaves room for the allocation that failed.
"""

from __future__ import annotations

import math

from oomtrace.analysis.findings import ClassCheck, Incident, Remedy
from oomtrace.analysis.remedy_base import (
    RemedyFacts,
    as_float,
    as_int,
    expandable_segments,
    lower_share_by,
    remedy,
    set_flag,
    set_utilisation,
)
from oomtrace.analysis.remedy_startup import llama_compute
from oomtrace.units import format_bytes

# No step of a transformer needs more per token than vocabulary-wide logits of a very large
# vocabulary in float32 and bfloat16 (1M x 6 bytes): a failed allocation larger than this per
# token of its step was not sized by the step's tokens, and chunking would not bound it.
MAX_TOKEN_BYTES = 8 << 20


def transient_remedies(incident: Incident, check: ClassCheck, facts: RemedyFacts) -> list[Remedy]:
    out = _chunking(incident, check, facts)
    if check.figure("phase") == "mm_encode":
        out.append(_encoder(incident, check))
    if check.figure("phase") == "compute_realloc" and check.figure("engine") == "llama.cpp":
        out += llama_compute(incident, check, facts)
    share = _shrink(incident, check, facts)
    if share is not None:
        out.append(share)
    elif (whole := _whole_device(incident, check)) is not None:
        out.append(whole)
    elif (headroom := _headroom(incident, check, facts)) is not None:
        out.append(headroom)
    if check.figure("slack_bytes") is not None:
        # one prompt's prefill beside a fragmented cache: the allocator's setting comes after
        out.append(expandable_segments(incident, check))
    return out


def _encoder(incident: Incident, check: ClassCheck) -> Remedy:
    """A request's image did not fit through the vision encoder: bound the images, or encode
    them elsewhere (the engine's own settings for it)."""
    wanted = as_int(check.figure("requested_bytes"))
    asked = f"the encoder asked for {format_bytes(wanted)} for one input" if wanted else ""
    action = (
        "bound what one image costs the vision encoder: --image-max-tokens, or encode images "
        "on the CPU (--no-mmproj-offload)"
        if check.figure("engine") == "llama.cpp"
        else "bound what one request's images cost the vision encoder: --limit-mm-per-prompt "
        "and a smaller max_pixels in --mm-processor-kwargs"
    )
    return remedy(
        incident,
        check,
        action,
        setting=None,
        value=None,
        basis="parameters",
        detail=(asked + "; " if asked else "")
        + "the encoder's memory grows with the image's pixels (its tokens), which no KV or "
        "batch setting bounds",
        figures={"requested_bytes": wanted},
    )


def _chunking(incident: Incident, check: ClassCheck, facts: RemedyFacts) -> list[Remedy]:
    """The prefill chunk whose step fits what was free at the OOM (a lower bound: the step's
    other tensors shrink with it)."""
    per_token = as_float(check.figure("step_bytes_per_token"))
    room = as_int(check.figure("room_bytes"))
    tokens = as_int(check.figure("step_tokens"))
    if not per_token or per_token > MAX_TOKEN_BYTES or room is None or room <= 0:
        return []
    fits = int(room // per_token)
    seqs = as_int(facts.config.get("max_num_seqs")) or 1
    chunk = fits // 16 * 16
    # vLLM refuses a token budget below --max-num-seqs; a chunk that small would not serve
    if chunk < max(seqs, 16) or (tokens is not None and chunk >= tokens):
        return []
    prompt_logprobs = check.figure("parameter") == "prompt_logprobs"
    one = check.figure("prefill_request")
    what = "prompt logprobs take" if prompt_logprobs else "a step takes"
    unit = "per prompt token of a prefill chunk" if prompt_logprobs else "per scheduled token"
    detail = (
        f"{what} {format_bytes(round(per_token))} {unit}; {format_bytes(room)} were free at the "
        f"OOM, room for {fits:,} tokens"
        + (f", not the {tokens:,} of the step that failed" if tokens else "")
        + (
            f"; {one}'s prompt alone filled the step: with chunked prefill on (vLLM V1's "
            "default; --enable-chunked-prefill before it) this budget cuts it into chunks, "
            "and --max-model-len bounds the prompts admitted at all"
            if isinstance(one, str)
            else ""
        )
    )
    return [
        set_flag(
            incident,
            check,
            facts,
            "--max-num-batched-tokens",
            str(chunk),
            suffix=(
                f" (or refuse prompt_logprobs on prompts over {chunk:,} tokens)"
                if prompt_logprobs
                else ""
            ),
            basis="parameters",
            detail=detail,
            figures={"max_num_batched_tokens": chunk, "room_bytes": room},
        )
    ]


def _shrink(incident: Incident, check: ClassCheck, facts: RemedyFacts) -> Remedy | None:
    """The utilisation that leaves room for the allocation that failed: the engine's budget less
    what the allocation lacked (and 1 % of the device for the allocator's rounding); the KV pool
    shrinks by as much."""
    utilisation = as_float(facts.config.get("gpu_memory_utilization"))
    wanted, room = as_int(check.figure("requested_bytes")), as_int(check.figure("room_bytes"))
    total = incident.capacity_bytes
    if utilisation is None or wanted is None or room is None or not total or wanted <= room:
        return None
    lacked = wanted - room
    share = math.floor((utilisation - lacked / total - 0.01) * 100) / 100
    if share <= 0:
        return None
    return set_utilisation(
        incident,
        check,
        facts,
        share,
        detail=(
            f"the allocation of {format_bytes(wanted)} lacked {format_bytes(lacked)}; "
            f"{utilisation:.2f} less that share of the {format_bytes(total)} device (and 1 % for "
            "the allocator) leaves it room, at the cost of as much KV cache"
        ),
        figures={"lacked_bytes": lacked},
    )


def _lacked(incident: Incident, check: ClassCheck) -> tuple[int, int, int] | None:
    """What the allocation asked, what it lacked and the device's size, where all are stated
    and it lacked something."""
    wanted, room = as_int(check.figure("requested_bytes")), as_int(check.figure("room_bytes"))
    total = incident.capacity_bytes
    if wanted is None or room is None or not total or wanted <= room:
        return None
    return wanted, wanted - room, total


def _headroom(incident: Incident, check: ClassCheck, facts: RemedyFacts) -> Remedy | None:
    """Where the log does not state the engine's share of the device: by how much to lower it
    so that the allocation that failed finds room."""
    lacked = _lacked(incident, check)
    wanted, room = as_int(check.figure("requested_bytes")), as_int(check.figure("room_bytes"))
    total = incident.capacity_bytes
    if lacked is None and wanted and room is not None and total and wanted <= room:
        # it failed with as much free as it asked: the free memory was in pieces too small for
        # it (or the driver's), so the whole allocation needs room beyond what was free
        # (https://github.com/noonghunna/club-3090/issues/58: 50 MiB with 56.88 MiB free)
        what = (
            f"the allocation of {format_bytes(wanted)} (it failed with {format_bytes(room)} "
            "free, in pieces too small for it)"
        )
        return lower_share_by(incident, check, facts, wanted, total, what)
    if lacked is None:
        return None
    wanted, short, total = lacked
    return lower_share_by(
        incident, check, facts, short, total, f"the allocation of {format_bytes(wanted)}"
    )


def _whole_device(incident: Incident, check: ClassCheck) -> Remedy | None:
    """One allocation larger than the whole device: no share of it helps; what asked for it
    must change (a kernel's fallback that materialises a full matrix, an input's size)."""
    lacked = _lacked(incident, check)
    if lacked is None or lacked[0] <= lacked[2]:
        return None
    wanted, _, total = lacked
    return remedy(
        incident,
        check,
        "find what asked for one allocation larger than the device",
        setting=None,
        value=None,
        basis="parameters",
        detail=(
            f"{format_bytes(wanted)} is {wanted / total:.1f} x the {format_bytes(total)} device: "
            "no memory setting makes it fit; an attention kernel's fallback that builds the full "
            "score matrix (a missing flash-attn), or an input far larger than the limits "
            "(images per prompt, prompt length), asks for such sizes"
        ),
        figures={"requested_bytes": wanted},
    )
