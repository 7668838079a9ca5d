"""Remedies: for each incident, the limit or setting that would have prevented it, computed from
the trace (never a rule of thumb), with what it costs.

* ``kv_exhaustion``: the ``--max-num-seqs``, ``--max-num-batched-tokens`` or ``--max-model-len``
  under which the incident's traffic, replayed (:mod:`oomtrace.analysis.limits`), never runs the
  pool dry, with the queueing delay each costs, the cheapest first; without a replay, the bound
  the budget gives (every admitted request at its whole contract: ``pool tokens // largest
  contract``), its cost not measured;
* ``startup_misfit``: the largest ``--max-model-len`` whose one request fits the KV memory the
  engine had (in whole blocks, as vLLM sizes it), and the smallest ``--gpu-memory-utilization``
  under which the model's own length fits, when one below 1 exists;
* ``transient_peak``: the prefill chunk (``--max-num-batched-tokens``) whose step fits the memory
  that was free at the OOM, from the failed request's own step bytes; with request parameters
  that cost vocabulary-wide logits (``prompt_logprobs``, many sequences), the limit on them;
* ``fragmentation``: the allocator setting that returns reserved-but-unallocated memory
  (``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``);
* ``foreign_memory``: which process to move, and the utilisation that leaves it room;
* ``leak``: the restart interval the trend allows before the headroom is gone.

The checks of :mod:`oomtrace.analysis.classify` compute the figures (``ClassCheck.figures``);
this module only turns them into settings.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from oomtrace.analysis.evidence import Scalar
from oomtrace.analysis.findings import ClassCheck, Incident, Remedy
from oomtrace.analysis.kvmodel import KVModel
from oomtrace.analysis.limits import LimitOutcome, LimitReplay
from oomtrace.units import format_bytes

# vLLM refuses a --gpu-memory-utilization above 1; one this close to it leaves nothing for the
# CUDA context and other processes, so a remedy never proposes more.
MAX_UTILISATION = 0.98
# A limit whose replay queues the traffic this much longer (p99) than the recorded settings is
# reported with its cost in the action itself: it trades the OOM for waiting.
COSTLY_QUEUE_S = 60.0


# Each engine's spelling of the settings a remedy changes (vLLM's ``vllm serve --help``,
# SGLang's ``python -m sglang.launch_server --help``); vLLM's where an engine is not known.
FLAGS: dict[str, dict[str, str]] = {
    "vllm": {},
    "sglang": {
        "--max-num-seqs": "--max-running-requests",
        "--max-num-batched-tokens": "--chunked-prefill-size",
        "--max-model-len": "--context-length",
        "--gpu-memory-utilization": "--mem-fraction-static",
    },
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


def remedies_for(incident: Incident, facts: RemedyFacts) -> tuple[Remedy, ...]:
    """The incident's remedies, the one to apply first first."""
    make = _MAKERS.get(incident.cls)
    if make is None:
        return ()
    check = next((c for c in incident.checks if c.cls == incident.cls and c.matched), None)
    if check is None:
        return ()
    return tuple(make(incident, check, facts))


def _remedy(
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


def _set(
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
    return _remedy(
        incident,
        check,
        f"{prefix} {name} {value}{suffix}",
        setting=name,
        value=value,
        basis=basis,
        detail=detail,
        figures=figures,
    )


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value)


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


# -- start-up misfit ----------------------------------------------------------------------------


def _misfit(incident: Incident, check: ClassCheck, facts: RemedyFacts) -> list[Remedy]:
    out: list[Remedy] = []
    available = _int(check.figure("kv_available_bytes"))
    needed = _int(check.figure("kv_needed_bytes"))
    max_len = _int(check.figure("max_model_len"))
    per_token = facts.kv.bytes_per_token or (needed / max_len if needed and max_len else None)
    block = facts.kv.block_size
    if available is not None and available > 0 and per_token:
        per_block = per_token * block
        fits = int(available // per_block) * block
        if fits >= block and (max_len is None or fits < max_len):
            out.append(
                _set(
                    incident,
                    check,
                    facts,
                    "--max-model-len",
                    str(fits),
                    basis="budget",
                    detail=(
                        f"the {format_bytes(available)} the engine had for its KV cache hold "
                        f"{fits:,} tokens of one request ({available // round(per_block):,} blocks "
                        f"of {block} tokens at {format_bytes(round(per_block))})"
                        + (
                            f"; the model's {max_len:,} need {format_bytes(needed)}"
                            if needed and max_len
                            else ""
                        )
                    ),
                    figures={"max_model_len": fits, "kv_available_bytes": available},
                )
            )
    utilisation = _float(facts.config.get("gpu_memory_utilization"))
    total = _int(check.figure("device_total_bytes"))
    if needed and available is not None and utilisation and total:
        # The engine's share of the device less the KV memory it had is what it holds besides
        # the cache (weights, activations, graphs); the utilisation that fits adds the need.
        other = utilisation * total - available
        wanted = math.ceil((other + needed) / total * 100) / 100
        if wanted <= MAX_UTILISATION:
            out.append(
                _set(
                    incident,
                    check,
                    facts,
                    "--gpu-memory-utilization",
                    f"{wanted:.2f}",
                    basis="budget",
                    detail=(
                        f"{format_bytes(round(other))} besides the cache + the "
                        f"{format_bytes(needed)} one request of the model's length needs = "
                        f"{wanted:.0%} of the {format_bytes(total)} device"
                    ),
                    figures={"gpu_memory_utilization": wanted},
                )
            )
    return out


# -- foreign memory ------------------------------------------------------------------------------


def _foreign(incident: Incident, check: ClassCheck, facts: RemedyFacts) -> list[Remedy]:
    out: list[Remedy] = []
    pid = _int(check.figure("pid"))
    held = _int(check.figure("foreign_bytes"))
    name = check.figure("process_name")
    device = incident.device
    if held:
        who = f"process {pid}" if pid is not None else "the other processes"
        if isinstance(name, str) and name:
            who += f" ({name})"
        where = f"GPU {device}" if device is not None else "the engine's GPU"
        shortfall = _int(check.figure("shortfall_bytes"))
        detail = f"it held {format_bytes(held)} at the peak"
        if shortfall is not None:
            detail += (
                f"; the failed allocation was short of {format_bytes(shortfall)}, which that "
                "memory would have covered"
            )
        out.append(
            _remedy(
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
    utilisation = _float(facts.config.get("gpu_memory_utilization"))
    if held and total and utilisation:
        # Room for the other process as it was at its largest: the engine's share shrinks by it.
        wanted = math.floor((total - held) / total * 0.99 * 100) / 100
        if 0 < wanted < utilisation:
            out.append(
                _set(
                    incident,
                    check,
                    facts,
                    "--gpu-memory-utilization",
                    f"{wanted:.2f}",
                    prefix="or set",
                    suffix=" to share the GPU",
                    basis="budget",
                    detail=(
                        f"leaves {format_bytes(total - math.floor(total * wanted))} of the "
                        f"{format_bytes(total)} device to others, the {format_bytes(held)} the "
                        "other process held and 1 % for contexts; the KV pool shrinks accordingly"
                    ),
                    figures={"gpu_memory_utilization": wanted},
                )
            )
    return out


# -- fragmentation -------------------------------------------------------------------------------


def _fragmentation(incident: Incident, check: ClassCheck, facts: RemedyFacts) -> list[Remedy]:
    slack = _int(check.figure("slack_bytes"))
    wanted = _int(check.figure("requested_bytes"))
    detail = "expandable segments let the allocator grow and reuse blocks instead of caching them"
    if slack is not None:
        detail = (
            f"{format_bytes(slack)} were reserved but unallocated"
            + (f", more than the {format_bytes(wanted)} that failed" if wanted else "")
            + "; "
            + detail
        )
    return [
        _remedy(
            incident,
            check,
            "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in the engine's environment",
            setting="PYTORCH_CUDA_ALLOC_CONF",
            value="expandable_segments:True",
            basis="allocator",
            detail=detail,
            figures={"slack_bytes": slack, "requested_bytes": wanted},
        )
    ]


# -- leak ----------------------------------------------------------------------------------------


def _leak(incident: Incident, check: ClassCheck, facts: RemedyFacts) -> list[Remedy]:
    rate = _float(check.figure("rise_bytes_per_hour"))
    headroom = _int(check.figure("headroom_bytes"))
    if not rate or rate <= 0 or not headroom:
        return []
    hours = headroom / rate
    # Restart at half the time the whole headroom lasts: the leak's rate varies with traffic.
    every = max(math.floor(hours / 2), 1) if hours >= 2 else round(hours / 2, 1)
    return [
        _remedy(
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


# -- KV exhaustion ------------------------------------------------------------------------------


def _kv(incident: Incident, check: ClassCheck, facts: RemedyFacts) -> list[Remedy]:
    replay = facts.replay
    if replay is not None and replay.reproduced:
        found = [o for o in replay.limits if o.value is not None]
        if found:
            ranked = sorted(found, key=lambda o: _cost(o, replay))
            return [_replayed(incident, check, facts, o, replay) for o in ranked]
    return _kv_budget(incident, check, facts, replay)


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
    suffix = ""
    if added is not None and added >= COSTLY_QUEUE_S:
        suffix = f" (costs {_seconds(added)} more queueing at p99)"
    elif outcome.refused:
        suffix = f" (refuses {outcome.refused:,} of {replay.requests:,} requests)"
    return _set(
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
        _set(
            incident,
            check,
            facts,
            "--max-num-seqs",
            str(seqs),
            basis="budget",
            detail=(
                f"the pool's {pool:,} tokens hold {seqs:,} requests at the largest contract "
                f"resident at the peak ({largest:,} tokens: prompt + max_tokens); its queueing "
                f"cost is not measured ({why})"
            ),
            figures={"max_num_seqs": seqs, "pool_tokens": pool, "largest_contract": largest},
        )
    ]


# -- transient peak -----------------------------------------------------------------------------


def _transient(incident: Incident, check: ClassCheck, facts: RemedyFacts) -> list[Remedy]:
    per_token = _float(check.figure("step_bytes_per_token"))
    room = _int(check.figure("room_bytes"))
    tokens = _int(check.figure("step_tokens"))
    parameter = check.figure("parameter")
    if not per_token or room is None or room <= 0:
        return []
    fits = int(room // per_token)
    out: list[Remedy] = []
    if parameter == "prompt_logprobs" and fits >= 1:
        chunk = max(fits // 16 * 16, 16) if fits >= 16 else fits
        out.append(
            _set(
                incident,
                check,
                facts,
                "--max-num-batched-tokens",
                str(chunk),
                suffix=f" (or refuse prompt_logprobs on prompts over {chunk:,} tokens)",
                basis="parameters",
                detail=(
                    f"prompt logprobs take {format_bytes(round(per_token))} per prompt token of "
                    f"a prefill chunk; {format_bytes(room)} were free at the OOM, room for "
                    f"{fits:,} tokens"
                    + (f", not the {tokens:,} of the chunk that failed" if tokens else "")
                ),
                figures={"max_num_batched_tokens": chunk, "room_bytes": room},
            )
        )
    elif fits >= 1:
        chunk = max(fits // 16 * 16, 16) if fits >= 16 else fits
        out.append(
            _set(
                incident,
                check,
                facts,
                "--max-num-batched-tokens",
                str(chunk),
                basis="parameters",
                detail=(
                    f"a step takes {format_bytes(round(per_token))} per scheduled token; "
                    f"{format_bytes(room)} were free at the OOM, room for {fits:,} tokens"
                    + (f", not the {tokens:,} of the step that failed" if tokens else "")
                ),
                figures={"max_num_batched_tokens": chunk, "room_bytes": room},
            )
        )
    return out


_MAKERS: dict[str, Callable[[Incident, ClassCheck, RemedyFacts], list[Remedy]]] = {
    "startup_misfit": _misfit,
    "foreign_memory": _foreign,
    "fragmentation": _fragmentation,
    "leak": _leak,
    "kv_exhaustion": _kv,
    "transient_peak": _transient,
}
