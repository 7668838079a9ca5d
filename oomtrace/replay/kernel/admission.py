"""Requests entering and leaving the pool: arrival into the waiting queue, admission (first come
first served, while the head fits), finish and preemption, and the event log they write.

The waiting queue is a ring of request indices as long as the workload (``wq``, head and length
in the scalar vector); the running list is doubly linked through the state matrix in admission
order, so the newest running request (the one preempted first) is its tail.
"""

# ruff: noqa: PLR0917

from __future__ import annotations

from typing import Any

from oomtrace.replay.kernel.heaps import _heap_push, _heap_room
from oomtrace.replay.kernel.layout import (
    C_ACTIVE,
    C_COMMIT,
    C_FH,
    C_HEAD,
    C_LOG,
    C_MAXPF,
    C_MAXRUN,
    C_NRUN,
    C_PF,
    C_PH,
    C_PRE_TOTAL,
    C_RACC,
    C_TAIL,
    C_TAU,
    C_USED,
    C_WHEAD,
    C_WLEN,
    C_XH,
    INF,
    LOG_ADMIT,
    LOG_PREEMPT,
    ON_DEMAND,
    RESERVE,
    S_ADMIT,
    S_BLK,
    S_CHUNK,
    S_FINAL,
    S_FIRST,
    S_G0,
    S_KNEXT,
    S_NEXT,
    S_NPRE,
    S_PREV,
    S_REASON,
    S_SEG,
    S_STATUS,
    S_VER,
    _blocks,
    _next_boundary,
    _produced,
)
from oomtrace.replay.kernel.level import _sync


def _log(lg: Any, sc: Any, t: int, i: int, kind: int, extra: int) -> None:
    """Append (t, i, kind, extra) to the event log. Its width is set by the caller (see
    :func:`oomtrace.replay.kernel.loop.simulate`): rows past it overwrite the last one and are
    only counted."""
    row = min(sc[C_LOG], lg.shape[1] - 1)
    lg[0, row], lg[1, row], lg[2, row], lg[3, row] = t, i, kind, extra
    sc[C_LOG] += 1


def _link(i: int, st: Any, sc: Any) -> None:
    tail = sc[C_TAIL]
    if tail >= 0:
        st[tail, S_NEXT] = i
    else:
        sc[C_HEAD] = i
    st[i, S_PREV], st[i, S_NEXT] = tail, -1
    sc[C_TAIL] = i
    sc[C_NRUN] += 1


def _leave(i: int, st: Any, sc: Any) -> None:
    """Take running request ``i`` out of the running list and release all it holds."""
    before, after = st[i, S_PREV], st[i, S_NEXT]
    if before >= 0:
        st[before, S_NEXT] = after
    else:
        sc[C_HEAD] = after
    if after >= 0:
        st[after, S_PREV] = before
    else:
        sc[C_TAIL] = before
    sc[C_NRUN] -= 1
    sc[C_USED] -= st[i, S_BLK]
    sc[C_COMMIT] -= st[i, S_FINAL]
    st[i, S_BLK] = 0
    st[i, S_VER] += 1
    sc[C_PF] -= st[i, S_CHUNK]
    st[i, S_CHUNK] = 0


def _start(
    i: int, t: int, st: Any, sc: Any, rate: Any, p: Any, o: Any, pre: Any, dl: Any, res: Any,
    limits: Any,
) -> tuple[int, int, int]:  # fmt: skip
    """Make waiting request ``i`` resident at ``t``; returns (finish, prefill end, next block
    boundary)."""
    block, policy, budget = limits[0], limits[1], limits[3]
    p_i, pre_i, res_i, rate_i = p[i], pre[i], res[i], 1.0 / (block * dl[i])
    g0 = st[i, S_G0]
    seg_pre = pre_i if g0 == 0 else max(1, pre_i * (p_i + g0) // max(p_i, 1))
    st[i, S_STATUS] = 2
    st[i, S_SEG] = t
    st[i, S_FIRST] = t + seg_pre
    st[i, S_VER] += 1
    if st[i, S_ADMIT] < 0:
        st[i, S_ADMIT] = t
    boundary = INF
    if policy == ON_DEMAND:
        st[i, S_KNEXT] = (-(p_i + g0)) % block + 1
        if sc[C_ACTIVE] == 1:
            boundary = _next_boundary(i, st, o, dl)
    finish = t + seg_pre + (o[i] - g0 - 1) * dl[i]
    _link(i, st, sc)
    sc[C_MAXRUN] = max(sc[C_MAXRUN], sc[C_NRUN])
    held = res_i if policy == RESERVE else _blocks(p_i + g0, block)
    st[i, S_BLK] = held
    sc[C_USED] += held
    st[i, S_FINAL] = res_i
    sc[C_COMMIT] += res_i
    dormant = sc[C_ACTIVE] == 0
    sc[C_RACC] += 1 if dormant else 0
    rate[0] += rate_i if dormant else 0.0
    # without a prefill budget nothing is held (the column and the total stay 0)
    chunk = min(p_i + g0, budget) if budget > 0 else 0
    st[i, S_CHUNK] = chunk
    sc[C_PF] += chunk
    sc[C_MAXPF] = max(sc[C_MAXPF], sc[C_PF])
    return int(finish), int(t + seg_pre), boundary


def _admit_pass(
    t: int, pool: int, limits: Any, st: Any, wq: Any, sc: Any, rate: Any,
    p: Any, o: Any, pre: Any, dl: Any, res: Any, fh: Any, ph: Any, xh: Any, lg: Any,
) -> None:  # fmt: skip
    """Admit from the head of the waiting queue, first come first served, while the head fits
    (blocks, ``max_num_seqs``, prefill token budget)."""
    block, policy, max_seqs, budget = limits[0], limits[1], limits[2], limits[3]
    n = st.shape[0]
    admitting = True
    while admitting and sc[C_WLEN] > 0:
        i = wq[sc[C_WHEAD]]
        need = res[i] if policy == RESERVE else _blocks(p[i] + st[i, S_G0], block)
        admitting = max_seqs <= 0 or sc[C_NRUN] < max_seqs
        if admitting and (sc[C_ACTIVE] == 1 or sc[C_COMMIT] + need > pool):
            # dormant, the level is only known to be below the committed total: make it exact
            if sc[C_ACTIVE] == 0 and sc[C_TAU] != t:
                _sync(t, st, sc, xh, rate, p, o, dl, block)
            admitting = sc[C_USED] + need <= pool
        if admitting and budget > 0:
            admitting = sc[C_PF] + min(p[i] + st[i, S_G0], budget) <= budget
        if admitting:
            sc[C_WHEAD] = (sc[C_WHEAD] + 1) % n
            sc[C_WLEN] -= 1
            finish, prefill_end, boundary = _start(i, t, st, sc, rate, p, o, pre, dl, res, limits)
            ver = st[i, S_VER]
            if limits[5] > 0:
                _log(lg, sc, t, i, LOG_ADMIT, prefill_end)
            sc[C_FH] = _heap_push(fh, _heap_room(fh, sc[C_FH], st), finish, i, ver)
            if budget > 0:
                sc[C_PH] = _heap_push(ph, _heap_room(ph, sc[C_PH], st), prefill_end, i, ver)
            if boundary < INF:
                sc[C_XH] = _heap_push(xh, _heap_room(xh, sc[C_XH], st), boundary, i, ver)


def _preempt_until_fits(
    t: int, pool: int, st: Any, wq: Any, sc: Any, o: Any, dl: Any, lg: Any, record: bool
) -> None:
    """The pool ran dry at ``t``: preempt (recompute) the newest running request until the
    tokens stored at ``t`` fit, as vLLM's V1 scheduler pops the end of its running list. A
    preempted request keeps the tokens it produced up to ``t``."""
    n = st.shape[0]
    while sc[C_USED] > pool:
        v = sc[C_TAIL]
        st[v, S_G0] = _produced(v, t, st, o, dl)
        _leave(v, st, sc)
        st[v, S_STATUS] = 1
        st[v, S_NPRE] += 1
        sc[C_PRE_TOTAL] += 1
        if record:
            _log(lg, sc, t, v, LOG_PREEMPT, st[v, S_G0])
        sc[C_WHEAD] = (sc[C_WHEAD] - 1 + n) % n
        wq[sc[C_WHEAD]] = v
        sc[C_WLEN] += 1


def _arrive(i: int, pool: int, st: Any, wq: Any, sc: Any, res: Any) -> bool:
    """Queue arrival ``i``; False if it can never fit the pool (rejected)."""
    fits = res[i] <= pool
    st[i, S_STATUS], st[i, S_REASON] = (1, 0) if fits else (4, 1)
    # the slot after the queue's tail is free (fewer than all requests wait): written either way
    wq[(sc[C_WHEAD] + sc[C_WLEN]) % st.shape[0]] = i
    sc[C_WLEN] += 1 if fits else 0
    return bool(fits)
