"""The straightforward simulator: one Python event per produced token, blocks counted one by one.

It implements the semantics in :mod:`oomtrace.replay.settings` the obvious way, and exists to check
the fast simulator (tests run both on random traces; ``benchmarks/replay_bench.py`` times both
on one slice). It is far too slow for real traces: use :func:`oomtrace.replay.runner.replay`.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

FINISH, TOKEN, PREFILL_END, ARRIVAL = 0, 1, 2, 3
PROBE = -1


@dataclass
class _Req:
    p: int
    o: int
    pre: int
    dl: int
    res: int
    produced: int = 0
    stored_blocks: int = 0
    seq: int = -1  # admission order; the running list is ordered by it
    ver: int = 0
    admit: int = -1
    finish: int = -1
    npre: int = 0
    reason: int = 0
    chunk: int = 0
    in_prefill: bool = False
    next_token_at: int = -1


@dataclass
class _Pool:
    kv_blocks: int
    block: int
    reserve: bool
    max_seqs: int
    budget: int
    max_wait: int
    used: int = 0
    pf: int = 0
    seq: int = 0
    preemptions: int = 0
    first_over: int = -1
    max_running: int = 0
    max_pf: int = 0
    running: list[int] = field(default_factory=list)
    waiting: deque[int] = field(default_factory=deque)
    events: list[tuple[int, int, int, int, int]] = field(default_factory=list)


def simulate_reference(
    arrays: dict[str, Any], kv_blocks: int, limits: Any, probes: Any = ()
) -> tuple[Any, Any, Any]:
    """Same inputs and outputs as :func:`oomtrace.replay.kernel.simulate`."""
    block, policy, max_seqs, budget, max_wait = (int(x) for x in limits[:5])
    s = _Pool(kv_blocks, block, policy == 1, max_seqs, budget, max_wait)
    reqs = [
        _Req(int(p), int(o), int(pre), int(dl), int(res))
        for p, o, pre, dl, res in zip(
            arrays["p"], arrays["o"], arrays["pre"], arrays["dl"], arrays["res"], strict=True
        )
    ]
    for i, t in enumerate(arrays["arr"]):
        heapq.heappush(s.events, (int(t), ARRIVAL, i, i, 0))
    for j, t in enumerate(probes):
        heapq.heappush(s.events, (int(t), PROBE, j, -1, 0))
    series = np.zeros((len(probes), 4), dtype=np.int64)
    peak, bin_max, now, admit_due = 0, 0, -1, False
    while s.events or admit_due:
        if admit_due and (not s.events or s.events[0][0] > now or s.events[0][1] >= PREFILL_END):
            _admit(s, reqs, now)  # one pass after an instant's finishes and tokens
            admit_due = False
            continue
        t, kind, order, i, ver = heapq.heappop(s.events)
        if kind == PROBE:
            series[order] = (s.used, len(s.running), len(s.waiting), max(bin_max, s.used))
            bin_max = 0
            continue
        if kind != ARRIVAL and reqs[i].ver != ver:
            continue  # the request was preempted since this event was scheduled
        if t > now and kind == FINISH:
            peak, bin_max = max(peak, s.used), max(bin_max, s.used)
        now = t
        if kind == FINISH:
            _release(s, reqs[i], i)
            reqs[i].finish = t
            admit_due = True
        elif kind == TOKEN:
            if _token(s, reqs, i, t):
                peak = bin_max = s.kv_blocks
            admit_due = True
        elif kind == PREFILL_END:
            reqs[i].in_prefill = False
            s.pf -= reqs[i].chunk
            _admit(s, reqs, t)
        else:
            _arrive(s, reqs, i, t)
    state = np.zeros((len(reqs), 12), dtype=np.int64)
    for k, r in enumerate(reqs):
        state[k, 5:9] = (r.admit, r.finish, r.npre, r.reason)
    totals = [peak, s.first_over, s.preemptions, s.max_running, s.max_pf]
    return state, series, np.array(totals, dtype=np.int64)


def _blocks(tokens: int, block: int) -> int:
    return -(-tokens // block)


def _arrive(s: _Pool, reqs: list[_Req], i: int, t: int) -> None:
    r = reqs[i]
    if r.res > s.kv_blocks:
        r.reason = 1
        return
    s.waiting.append(i)
    _admit(s, reqs, t)
    if s.max_wait >= 0 and len(s.waiting) > s.max_wait:
        s.waiting.pop()
        r.reason = 2


def _admit(s: _Pool, reqs: list[_Req], t: int) -> None:
    while s.waiting:
        i = s.waiting[0]
        r = reqs[i]
        if s.max_seqs and len(s.running) >= s.max_seqs:
            return
        need = r.res if s.reserve else _blocks(r.p + r.produced, s.block)
        if s.used + need > s.kv_blocks:
            return
        chunk = min(r.p + r.produced, s.budget)
        if s.budget and s.pf + chunk > s.budget:
            return
        s.waiting.popleft()
        s.used += need
        r.stored_blocks = need
        r.ver += 1
        r.seq, s.seq = s.seq, s.seq + 1
        s.running.append(i)
        s.max_running = max(s.max_running, len(s.running))
        if r.admit < 0:
            r.admit = t
        pre = r.pre if r.produced == 0 else max(1, r.pre * (r.p + r.produced) // max(r.p, 1))
        _next_token(s, r, i, t + pre)
        if s.budget:
            r.chunk, r.in_prefill = chunk, True
            s.pf += chunk
            s.max_pf = max(s.max_pf, s.pf)
            heapq.heappush(s.events, (t + pre, PREFILL_END, i, i, r.ver))


def _next_token(s: _Pool, r: _Req, i: int, at: int) -> None:
    r.next_token_at = at
    if r.produced + 1 == r.o:
        heapq.heappush(s.events, (at, FINISH, i, i, r.ver))
    else:
        heapq.heappush(s.events, (at, TOKEN, r.seq, i, r.ver))


def _token(s: _Pool, reqs: list[_Req], i: int, t: int) -> bool:
    """Request ``i`` produced a token at ``t`` and stores it; True if the pool ran dry."""
    r = reqs[i]
    r.produced += 1
    r.next_token_at = -1
    dry = False
    if not s.reserve:
        need = _blocks(r.p + r.produced, s.block) - r.stored_blocks
        while need > s.kv_blocks - s.used:
            dry = True
            if s.first_over < 0:
                s.first_over = t
            victim = s.running[-1]
            _preempt(s, reqs, victim, t)
            if victim == i:
                return True
        r.stored_blocks += need
        s.used += need
    _next_token(s, r, i, t + r.dl)
    return dry


def _preempt(s: _Pool, reqs: list[_Req], v: int, t: int) -> None:
    r = reqs[v]
    if r.next_token_at == t:
        r.produced += 1  # its token at this instant was produced, only not yet stored
    _release(s, r, v)
    r.npre += 1
    s.preemptions += 1
    s.waiting.appendleft(v)


def _release(s: _Pool, r: _Req, i: int) -> None:
    s.running.remove(i)
    s.used -= r.res if s.reserve else r.stored_blocks
    r.stored_blocks = 0
    r.ver += 1
    if r.in_prefill:
        r.in_prefill = False
        s.pf -= r.chunk
