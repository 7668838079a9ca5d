"""A smaller context for llama.cpp and Ollama, where their KV cache is sized for the whole context
at load and the failure leaves the context in use as the longest that "fits" (ollama#6860: the
runner's ``--ctx-size 8192`` held its 5.00 GiB cache, and a compute buffer after it found no
room; "set OLLAMA_CONTEXT_LENGTH 8192" would change nothing).

The change is a context smaller by at least what the failed allocation lacked, in KV tokens:
``ceil(lacked / bytes a token)`` rounded up to :data:`STEP` tokens. It is a floor: where the model
is split over several GPUs each holds only its layers' part of the cache, so a smaller context
frees proportionally less on the one that failed; the compute buffers shrink with the context too.

Ollama runs its runner with ``--ctx-size`` = ``num_ctx`` times ``OLLAMA_NUM_PARALLEL`` (each
parallel request has a context of ``num_ctx``, ollama/ollama ``llm/server.go``), so its value is
the per-request ``num_ctx`` (OLLAMA_CONTEXT_LENGTH); fewer parallel requests shrink it too.
"""

from __future__ import annotations

import math
from typing import Final

from oomtrace.analysis.findings import ClassCheck, Incident, Remedy
from oomtrace.analysis.remedy_base import RemedyFacts, as_int, remedy
from oomtrace.units import format_bytes

STEP: Final = 256
ENGINES: Final = frozenset({"llama.cpp", "ollama"})


def smaller_context(
    incident: Incident, check: ClassCheck, facts: RemedyFacts, current: int
) -> Remedy | None:
    """A context below ``current`` (the runner's, in tokens) by what the allocation lacked, or
    ``None`` where no bytes a token or no shortfall is known, or nothing would be left."""
    per_token = facts.kv.bytes_per_token
    asked = as_int(check.figure("requested_bytes"))
    free = as_int(check.figure("free_bytes"))
    if not per_token or not asked:
        return None
    lacked = asked - free if free is not None and free < asked else asked
    cut = math.ceil(lacked / per_token / STEP) * STEP
    total = current - cut
    slots = as_int(facts.config.get("max_num_seqs")) or 1
    if facts.engine != "ollama":
        slots = 1
    value = total // slots // STEP * STEP
    if value < STEP:
        return None
    kv = round(per_token * current)
    shortfall = (
        f"the {format_bytes(lacked)} the allocation lacked"
        if free is not None
        else f"the {format_bytes(lacked)} that failed (the free memory is unstated)"
    )
    arithmetic = (
        f"{shortfall} is {math.ceil(lacked / per_token):,} tokens of the {format_bytes(kv)} KV "
        f"cache ({format_bytes(round(per_token))} a token), so {current:,} - {cut:,} = "
        f"{total:,} tokens in all (rounded to {STEP}); a floor: a model split over several "
        "GPUs frees only its layers' part of that on this one, and the compute buffers shrink "
        "with the context too"
    )
    if facts.engine == "ollama":
        per_request = current // slots
        parallel = total // per_request  # the most parallel requests of num_ctx that fit
        action = f"lower num_ctx (OLLAMA_CONTEXT_LENGTH) from {per_request:,} to {value:,}" + (
            f", or OLLAMA_NUM_PARALLEL from {slots} to {parallel}" if 1 <= parallel < slots else ""
        )
        ran = f"the runner's context is {current:,} tokens" + (
            f" ({per_request:,} a request times OLLAMA_NUM_PARALLEL {slots})" if slots > 1 else ""
        )
        setting = "OLLAMA_CONTEXT_LENGTH"
    else:
        action = f"lower -c (--ctx-size) from {current:,} to {value:,}"
        ran = f"the server's context is -c {current:,}"
        setting = "-c"
    return remedy(
        incident,
        check,
        action,
        setting=setting,
        value=str(value),
        basis="budget",
        detail=f"{ran}; {arithmetic}",
        figures={"n_ctx": current, "n_ctx_fits": total, "kv_bytes_per_token": round(per_token)},
    )
