"""What a replay of an incident's traffic says about admission limits: the plug point through
which :mod:`oomtrace.replay` (a layer above this one) sizes the remedies of a KV exhaustion.

The analysis cannot import the replay (it is built on the analysis); it declares here what it
asks and what it needs back, and the caller passes an implementation in
:attr:`oomtrace.analysis.AnalyzeOptions.limit_search` (``oomtrace analyze`` and ``oomtrace
report`` pass :func:`oomtrace.replay.limits.replay_limits`). Without one, a KV exhaustion's
remedy is the budget's bound (every admitted request at its whole contract), with its queueing
cost not measured, and says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import polars as pl

from oomtrace.trace import Manifest

__all__ = ["LimitOutcome", "LimitReplay", "LimitSearch"]


@dataclass(frozen=True)
class LimitOutcome:
    """One admission limit, bisected over the incident's traffic: the least restrictive value
    under which the replay neither runs the pool dry nor preempts, and what it costs.

    ``setting`` is the engine flag (``--max-num-seqs``, ``--max-num-batched-tokens``,
    ``--max-model-len``); ``value`` the value found (None: no value passes); ``recorded`` the
    value the engine ran with (None: not stated or unlimited); ``refused`` the requests the
    value turns away (a ``--max-model-len`` below a request's prompt plus ``max_tokens``);
    queueing delays are those of the replay at ``value``, arrival to admission."""

    setting: str
    value: int | None
    recorded: int | None
    requests: int
    refused: int
    queue_p50_s: float | None
    queue_p99_s: float | None
    queue_max_s: float | None


@dataclass(frozen=True)
class LimitReplay:
    """The replay of an incident's traffic under the recorded settings, and each limit found.

    ``reproduced``: the recorded settings run the pool dry in the replay too (else the replay
    does not see what the engine saw, and the limits are not evidence of anything);
    ``recorded_queue_p99_s``: the queueing the recorded settings cost, the baseline every
    limit's delay is set against; ``notes``: what the replay assumed."""

    reproduced: bool
    requests: int
    recorded_preemptions: int
    recorded_queue_p99_s: float | None
    limits: tuple[LimitOutcome, ...]
    notes: tuple[str, ...] = ()


class LimitSearch(Protocol):
    """Replays ``requests`` (canonical lifecycle rows of one node: every row of each request
    the incident's span touches) under the settings ``manifest`` records, then bisects each
    admission limit. ``decode_tokens_per_s`` is the analysis' decode rate, for requests whose
    own lines give none (a log that states finishes without counts). Returns None when the
    trace cannot be replayed (no pool size stated, no request that can be sized)."""

    def __call__(
        self,
        requests: pl.DataFrame,
        manifest: Manifest,
        *,
        kv_bytes_per_token: int | None,
        decode_tokens_per_s: float | None = None,
    ) -> LimitReplay | None: ...
