"""The admission limits that would have kept an incident's pool from running dry: what
``oomtrace analyze`` asks of the replay to size a KV exhaustion's remedy
(:class:`oomtrace.analysis.limits.LimitSearch`; pass :func:`replay_limits` as
``AnalyzeOptions.limit_search``).

The incident's traffic is replayed under the settings the engine recorded (it must run the pool
dry there too, or the replay does not see what the engine saw), then each limit is bisected
(:func:`oomtrace.replay.search`): the largest ``--max-num-seqs`` and ``--max-num-batched-tokens``
that pass (the least queueing), and the largest ``--max-model-len`` that passes once the requests
it refuses are left out (vLLM's API server refuses a request whose prompt plus ``max_tokens``
exceeds it). "Passes" is the search's: no overflow, no preemption, no request too large for the
pool. Each limit comes with the queueing delays of its replay.
"""

from __future__ import annotations

import dataclasses

import polars as pl

from oomtrace.analysis.limits import LimitOutcome, LimitReplay
from oomtrace.errors import InputError, UsageError
from oomtrace.replay.calibrate import recorded_pool, recorded_settings
from oomtrace.replay.results import ReplayResult
from oomtrace.replay.runner import replay
from oomtrace.replay.search import SearchTarget, bisect, search
from oomtrace.replay.settings import ReplaySettings
from oomtrace.replay.workload import TimeOptions, Workload, build_workload
from oomtrace.trace import Manifest, Trace

__all__ = ["replay_limits"]

_FLAGS: dict[SearchTarget, str] = {
    "max-num-seqs": "--max-num-seqs",
    "max-num-batched-tokens": "--max-num-batched-tokens",
}


def replay_limits(
    requests: pl.DataFrame,
    manifest: Manifest,
    *,
    kv_bytes_per_token: int | None,
    decode_tokens_per_s: float | None = None,
) -> LimitReplay | None:
    """See the module docstring; None when the pool size is not recorded or no request can be
    sized. ``decode_tokens_per_s`` stands in for requests whose own lines give no speed."""
    if recorded_pool(manifest.engine_config)[0] is None or requests.is_empty():
        return None
    times = TimeOptions(decode_tokens_per_s=decode_tokens_per_s)
    try:
        workload = build_workload(Trace(requests=requests, manifest=manifest), options=times)
        settings = recorded_settings(manifest, kv_bytes_per_token=kv_bytes_per_token)
    except (InputError, UsageError):
        return None
    if workload.size == 0:
        return None
    base = replay(workload, settings, series_points=0)
    reproduced = not base.summary.passes
    limits: list[LimitOutcome] = []
    if reproduced:
        for target, flag in _FLAGS.items():
            found = search(workload, settings, target, series_points=0)
            recorded = (
                settings.max_num_seqs
                if target == "max-num-seqs"
                else settings.max_num_batched_tokens
            )
            limits.append(_outcome(flag, found.best_value, recorded, found.best, workload, 0))
        limits.append(_max_model_len(workload, settings, manifest))
    return LimitReplay(
        reproduced=reproduced,
        requests=workload.size,
        recorded_preemptions=base.summary.preemptions,
        recorded_queue_p99_s=base.summary.queue_delay_p99_s,
        limits=tuple(limits),
        notes=(*_bounded(workload), *workload.notes),
    )


def _bounded(workload: Workload) -> tuple[str, ...]:
    """What the replay had to assume of output lengths the trace does not state."""
    bound = workload.source_counts("output_source").get("max_tokens_bound", 0)
    if not bound:
        return ()
    note = (
        f"{bound:,} of the {workload.size:,} requests state no output length and are replayed "
        "at their max_tokens, an upper bound: the limits found are cautious"
    )
    return (note,)


def _outcome(
    flag: str,
    value: int | None,
    recorded: int | None,
    result: ReplayResult | None,
    workload: Workload,
    refused: int,
) -> LimitOutcome:
    summary = result.summary if result is not None and value is not None else None
    return LimitOutcome(
        setting=flag,
        value=value if summary is not None else None,
        recorded=recorded,
        requests=workload.size,
        refused=refused,
        queue_p50_s=summary.queue_delay_p50_s if summary else None,
        queue_p99_s=summary.queue_delay_p99_s if summary else None,
        queue_max_s=summary.queue_delay_max_s if summary else None,
    )


def _max_model_len(
    workload: Workload, settings: ReplaySettings, manifest: Manifest
) -> LimitOutcome:
    """The largest model length under which the requests it admits pass: bisected over the
    distinct contracts (prompt + ``max_tokens``, or + output where ``max_tokens`` is unstated);
    the length is one token below the shortest contract it refuses."""
    recorded = manifest.engine_config.get("max_model_len")
    contract = pl.col("prompt_tokens") + pl.coalesce("max_tokens", "output_tokens")
    frame = workload.requests.with_columns(_contract=contract)
    lengths = sorted(set(frame["_contract"].to_list()))
    results: dict[int, ReplayResult] = {}

    def admitted(length: int) -> Workload:
        kept = frame.filter(pl.col("_contract") <= length).drop("_contract")
        return dataclasses.replace(workload, requests=kept)

    def passes(index: int) -> bool:
        if index not in results:
            results[index] = replay(admitted(lengths[index]), settings, series_points=0)
        return results[index].summary.passes

    best = bisect(passes, 0, len(lengths) - 1, largest=True) if lengths else None
    if best is None:
        return _outcome("--max-model-len", None, _int(recorded), None, workload, 0)
    refused = frame.filter(pl.col("_contract") > lengths[best]).height
    if refused == 0:  # the limit does not bind: no --max-model-len prevents the exhaustion
        return _outcome("--max-model-len", None, _int(recorded), None, workload, 0)
    # Any length below the next contract admits the same requests: the largest is one below it.
    length = lengths[best + 1] - 1
    return _outcome("--max-model-len", length, _int(recorded), results[best], workload, refused)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
