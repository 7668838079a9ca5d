"""The remedy of a KV exhaustion: the admission limits under which its traffic, replayed
(:mod:`oomtrace.analysis.limits`), never runs the pool dry, each with the queueing it costs, the
cheapest first; without a replay that reproduces the exhaustion, the bound the budget gives
(every admitted request at its whole contract), its cost not measured.
"""

from __future__ import annotations

import math

from oomtrace.analysis.findings import ClassCheck, Incident, Remedy
from oomtrace.analysis.limits import LimitOutcome, LimitReplay
from oomtrace.analysis.remedy_base import COSTLY_QUEUE_S, RemedyFacts, as_int, remedy, set_flag
from oomtrace.ingest.torch.llamacpp_log import KV_FULL_DETAIL


def kv_remedies(incident: Incident, check: ClassCheck, facts: RemedyFacts) -> list[Remedy]:
    replay = facts.replay
    if replay is not None and replay.reproduced:
        found = [o for o in replay.limits if o.value is not None]
        if found:
            ranked = sorted(found, key=lambda o: _cost(o, replay))
            return [_replayed(incident, check, facts, o, replay) for o in ranked]
    budget = _kv_budget(incident, check, facts, replay)
    if not budget and KV_FULL_DETAIL in check.reason:
        return [_llama_context(incident, check, facts)]
    return budget or [_unsized(incident, check, facts)]


def _unsized(incident: Incident, check: ClassCheck, facts: RemedyFacts) -> Remedy:
    """A pool that ran full where the inputs state neither its size nor the requests' lengths
    (a stats line and a preemption warning): the two ways out, the engine's own advice first
    (vLLM's preemption warning: more KV memory), no value."""
    share, longest = facts.flag("--gpu-memory-utilization"), facts.flag("--max-model-len")
    return remedy(
        incident,
        check,
        f"give the KV pool more room (raise {share} or --tensor-parallel-size) or bound what "
        f"one request stores (lower {longest}, or max_tokens)",
        setting=None,
        value=None,
        basis="budget",
        detail="the engine ran its KV pool full and took requests back; the inputs state neither "
        "the pool's size nor the requests' lengths, so no value is computed (the engine's "
        "start-up lines, its KV cache size, or its /metrics would give one)",
    )


def _llama_context(incident: Incident, check: ClassCheck, facts: RemedyFacts) -> Remedy:
    """llama.cpp's server splits its context (``-c``) among its slots (``-np``): a request whose
    tokens outgrow its slot's share finds no free cell (the server's own advice: increase the
    context size). Ollama's runner is that server, its context and slots Ollama's settings
    (ollama/ollama/docs/faq.mdx): OLLAMA_CONTEXT_LENGTH or num_ctx, OLLAMA_NUM_PARALLEL."""
    n_ctx = as_int(facts.config.get("kv_cache_tokens"))
    slots = as_int(facts.config.get("max_num_seqs"))
    if facts.engine == "ollama":
        sharers, setting = "requests", "OLLAMA_CONTEXT_LENGTH"
        action = "raise num_ctx (OLLAMA_CONTEXT_LENGTH) or lower OLLAMA_NUM_PARALLEL"
        stated = f"a context of {n_ctx:,} tokens" if n_ctx else "a context of unstated size"
        stated += f" over {slots} parallel requests" if slots else ""
    else:
        sharers, setting = "slots", "-c"
        action = "raise -c (--ctx-size) or lower -np (--parallel)"
        stated = f"-c {n_ctx:,}" if n_ctx else "-c unstated"
        if slots:
            stated += f", {slots} slots"
            stated += f", {n_ctx // slots:,} tokens a slot" if n_ctx else ""
    return remedy(
        incident,
        check,
        action,
        setting=setting,
        value=None,
        basis="budget",
        detail=f"the {sharers}' contexts held every cell of the KV cache ({stated}); a larger "
        f"context, or fewer {sharers} sharing it, gives each request room; no request's length "
        "is stated, so no value is computed",
        figures={"n_ctx": n_ctx, "slots": slots},
    )


def _cost(outcome: LimitOutcome, replay: LimitReplay) -> tuple[bool, float, float, str]:
    """Cheapest first: a limit that queues no worse than the recorded settings by a minute and
    refuses nothing, then one that refuses a few requests, then one that makes everyone wait."""
    p99 = outcome.queue_p99_s if outcome.queue_p99_s is not None else math.inf
    added = p99 - (replay.recorded_queue_p99_s or 0.0)
    share = outcome.refused / replay.requests if replay.requests else 0.0
    return added >= COSTLY_QUEUE_S, share, added, outcome.setting


def _seconds(value: float | None) -> str:
    if value is None:
        return "unknown"
    return f"{value:.1f} s" if value < 120 else f"{value / 60:.1f} min"


def _replayed(
    incident: Incident,
    check: ClassCheck,
    facts: RemedyFacts,
    outcome: LimitOutcome,
    replay: LimitReplay,
) -> Remedy:
    was = "no limit" if outcome.recorded is None else f"{outcome.recorded:,}"
    added = None
    if outcome.queue_p99_s is not None and replay.recorded_queue_p99_s is not None:
        added = outcome.queue_p99_s - replay.recorded_queue_p99_s
    flag = facts.flag(outcome.setting)
    detail = (
        f"the {replay.requests:,} requests around the incident, replayed with {flag} "
        f"{outcome.value:,} (was {was}), never run the pool dry and are never preempted "
        f"(recorded settings: {replay.recorded_preemptions:,} preemption"
        f"{'s' if replay.recorded_preemptions != 1 else ''}); queueing p50 "
        f"{_seconds(outcome.queue_p50_s)}, p99 {_seconds(outcome.queue_p99_s)}, max "
        f"{_seconds(outcome.queue_max_s)}"
    )
    if outcome.refused:
        detail += f"; {outcome.refused:,} request(s) longer than that are refused"
    if replay.notes:
        detail += "; " + "; ".join(replay.notes)
    suffix = ""
    if added is not None and added >= COSTLY_QUEUE_S:
        suffix = f" (costs {_seconds(added)} more queueing at p99)"
    elif outcome.refused:
        suffix = f" (refuses {outcome.refused:,} of {replay.requests:,} requests)"
    return set_flag(
        incident,
        check,
        facts,
        outcome.setting,
        str(outcome.value),
        suffix=suffix,
        basis="replay",
        detail=detail,
        figures={
            "value": outcome.value,
            "recorded": outcome.recorded,
            "refused": outcome.refused,
            "queue_p50_s": _rounded(outcome.queue_p50_s),
            "queue_p99_s": _rounded(outcome.queue_p99_s),
            "queue_max_s": _rounded(outcome.queue_max_s),
            "recorded_queue_p99_s": _rounded(replay.recorded_queue_p99_s),
        },
    )


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _kv_budget(
    incident: Incident, check: ClassCheck, facts: RemedyFacts, replay: LimitReplay | None
) -> list[Remedy]:
    """Without a replay that reproduces the exhaustion: every admitted request may grow to its
    whole contract, so ``pool // largest contract`` requests always fit."""
    pool = facts.kv.pool_tokens
    contracts = [r.reserved_tokens for r in incident.ledger.rows if r.reserved_tokens]
    largest = max(contracts, default=None)
    if not pool or not largest:
        return []
    block = facts.kv.block_size
    per_request = math.ceil(largest / block) * block
    seqs = pool // per_request
    why = (
        "no replay was run"
        if replay is None
        else "the replay under the recorded settings did not run the pool dry"
    )
    if seqs < 1:
        return []
    return [
        set_flag(
            incident,
            check,
            facts,
            "--max-num-seqs",
            str(seqs),
            basis="budget",
            detail=(
                f"the pool's {pool:,} tokens hold {seqs:,} request{'s' if seqs != 1 else ''} "
                "at the largest contract "
                f"resident at the peak ({largest:,} tokens: prompt + max_tokens); its queueing "
                f"cost is not measured ({why})"
            ),
            figures={"max_num_seqs": seqs, "pool_tokens": pool, "largest_contract": largest},
        )
    ]
