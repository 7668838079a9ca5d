"""The event loop: :func:`simulate`, one pass over arrivals, admissions, prefill ends, finishes,
block boundaries and probes, in time order.

Every array the loop touches (state, queue, heaps, series, event log) is made before it starts
and updated in place, including the event log, whose width the caller gives; the helpers it
calls return numbers only (see :mod:`oomtrace.replay.kernel` for why).
"""

# ruff: noqa: PLR0912, PLR0915, PLR0917

from __future__ import annotations

from typing import Any

import numpy as np

from oomtrace.replay.kernel.admission import (
    _admit_pass,
    _arrive,
    _leave,
    _log,
    _preempt_until_fits,
)
from oomtrace.replay.kernel.heaps import _heap_pop, _heap_top
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
    C_TAIL,
    C_TAU,
    C_USED,
    C_WLEN,
    C_XH,
    INF,
    LOG_FINISH,
    LOG_REJECT,
    NSC,
    ON_DEMAND,
    RESERVE,
    S_ADMIT,
    S_CHUNK,
    S_FINISH,
    S_REASON,
    S_STATUS,
)
from oomtrace.replay.kernel.level import _bound, _cross, _level_at, _sleep, _sync


def simulate(
    arr: Any,
    p: Any,
    o: Any,
    pre: Any,
    dl: Any,
    res: Any,
    pool: int,
    limits: Any,
    probes: Any,
    st: Any,
) -> tuple[Any, Any, Any, Any]:
    """Run the replay.

    Inputs (int64 arrays, one row per request in arrival order): ``arr`` arrival ns, ``p`` prompt
    tokens, ``o`` output tokens (>= 1), ``pre`` prefill ns (>= 1), ``dl`` ns per output token
    (>= 1), ``res`` blocks reserved at admission (reserve) or held at the final length
    (on-demand). ``limits`` = [block_size, policy, max_num_seqs (0: none), prefill token budget
    (0: none), max waiting (-1: none), rows of the event log to keep (0: none; see
    :func:`oomtrace.replay.runner.simulate`), 1 to read the highest level between probes].
    ``probes``: sorted instants at which to read the pool. ``st``: zeros, one row of ``NCOL``
    per request, made by the caller (NumPy's large arrays are zeroed lazily, in huge pages where
    the kernel offers them: a day's 240 MB matrix made here took about 58,000 page faults and
    0.15-0.2 s of system time; see :func:`oomtrace.replay.runner.state_matrix`).

    Returns ``st`` (per-request state, columns ``S_*``), ``series`` (one row per probe: blocks
    held just before the probe, running, waiting, and the highest level since the previous probe
    when asked for, else the level again: finding it costs a closed-form pass over the running
    requests at most finishes, which dense probes that only read the level do not need) and
    ``totals`` = [peak blocks, first exhaustion ns or -1, preemptions, most running at once, most
    prefill tokens in flight at once], and the event log (rows: time, request, kind ``LOG_*``,
    extra; empty unless asked for; rows past its width are dropped, so the caller sizes it).
    """
    n = arr.shape[0]
    block, policy, max_wait = limits[0], limits[1], limits[4]
    margin = pool // 8  # hysteresis: leave the active mode only well below the pool
    st[:, S_ADMIT] = -1
    st[:, S_FINISH] = -1
    wq = np.empty(max(n, 1), dtype=np.int64)
    sc = np.zeros(NSC, dtype=np.int64)
    sc[C_HEAD], sc[C_TAIL], sc[C_TAU] = -1, -1, -1
    sc[C_ACTIVE] = 1 if policy == RESERVE else 0
    rate = np.zeros(1, dtype=np.float64)
    # a heap holds at most one live entry per request (see heaps): as wide as the workload
    fh = np.empty((3, max(n, 1)), dtype=np.int64)
    ph = np.empty((3, max(n, 1)), dtype=np.int64)
    xh = np.empty((3, max(n, 1)), dtype=np.int64)
    record = limits[5] > 0
    peaks = limits[6] == 1
    lg = np.empty((4, max(limits[5], 1)), dtype=np.int64)
    series = np.zeros((probes.shape[0], 4), dtype=np.int64)
    totals = np.zeros(5, dtype=np.int64)
    totals[1] = -1
    nxt, j, now, left_at, bin_max, admit_due, arriving = 0, 0, -1, -1, 0, False, -1
    while True:
        sc[C_FH], tf = _heap_top(fh, sc[C_FH], st)
        sc[C_PH], tp = _heap_top(ph, sc[C_PH], st)
        sc[C_XH], tx = _heap_top(xh, sc[C_XH], st)
        t_evt = min(tf, tx, tp, arr[nxt] if nxt < n else INF)
        if admit_due and sc[C_WLEN] == 0:
            admit_due, arriving = False, -1
        if admit_due and (t_evt > now or (tf != t_evt and tx != t_evt)):  # noqa: PLR1714
            # one admission pass after an instant's finishes and block boundaries, and after
            # each prefill end and arrival
            admit_due = False
            _admit_pass(now, pool, limits, st, wq, sc, rate, p, o, pre, dl, res, fh, ph, xh, lg)
            if arriving >= 0 and max_wait >= 0 and sc[C_WLEN] > max_wait:
                # the arrival is still waiting (arrivals join the tail) and the queue is full
                sc[C_WLEN] -= 1
                st[arriving, S_STATUS], st[arriving, S_REASON] = 4, 2
                if record:
                    _log(lg, sc, now, arriving, LOG_REJECT, 2)
            arriving = -1
            continue
        horizon = min(t_evt, probes[j]) if j < probes.shape[0] else t_evt
        if policy == ON_DEMAND:
            if sc[C_ACTIVE] == 0 and sc[C_COMMIT] > pool and _bound(horizon, sc, rate) > pool:
                # the pool could run dry before the next event: track boundaries one by one
                sc[C_ACTIVE] = 1
                _sync(now, st, sc, xh, rate, p, o, dl, block)
                continue
            if sc[C_ACTIVE] == 1 and sc[C_COMMIT] <= pool - margin:
                _sleep(now, st, sc, rate, dl, block)
                continue
        if j < probes.shape[0] and probes[j] <= t_evt:
            if not peaks:
                level = sc[C_USED]
                if sc[C_ACTIVE] == 0:
                    level = _level_at(probes[j] - 1, st, sc, p, o, dl, block)
                series[j, 0], series[j, 1], series[j, 2] = level, sc[C_NRUN], sc[C_WLEN]
                series[j, 3] = level
                j += 1
                continue
            if sc[C_ACTIVE] == 0:
                _sync(probes[j] - 1, st, sc, xh, rate, p, o, dl, block)
            level = sc[C_USED]
            series[j, 0], series[j, 1], series[j, 2] = level, sc[C_NRUN], sc[C_WLEN]
            series[j, 3] = max(bin_max, level)
            bin_max = 0
            j += 1
            continue
        if t_evt == INF:
            break
        if tf == t_evt:
            if t_evt > left_at:
                # between events the level only grows: just before a release is a candidate peak
                left_at = t_evt
                if min(sc[C_COMMIT], _bound(t_evt - 1, sc, rate)) > bin_max:
                    if sc[C_ACTIVE] == 0:
                        _sync(t_evt - 1, st, sc, xh, rate, p, o, dl, block)
                    bin_max = max(bin_max, sc[C_USED])
                    totals[0] = max(totals[0], sc[C_USED])
            i = fh[1, 0]
            sc[C_FH] = _heap_pop(fh, sc[C_FH])
            _leave(i, st, sc)
            st[i, S_STATUS] = 3
            st[i, S_FINISH] = t_evt
            if record:
                _log(lg, sc, t_evt, i, LOG_FINISH, 0)
            now, admit_due = t_evt, True
            continue
        now = t_evt
        if tx == t_evt:
            # boundaries only add blocks: take them in one run up to the next other event
            until = min(2 * tf, 2 * tp + 1, 2 * (arr[nxt] if nxt < n else INF) + 1)
            if j < probes.shape[0]:
                until = min(until, 2 * probes[j])
            if admit_due:
                until = min(until, 2 * t_evt + 1)  # the admission pass due after this instant
            t_evt = _cross(t_evt, until, pool, st, sc, xh, o, dl, block)
            now = t_evt
            if sc[C_USED] > pool:
                # the pool ran dry: it was full, whatever the level before
                if totals[1] < 0:
                    totals[1] = t_evt
                bin_max, totals[0] = pool, pool
                _preempt_until_fits(t_evt, pool, st, wq, sc, o, dl, lg, record)
            admit_due = True
            continue
        if tp == t_evt:
            i = ph[1, 0]
            sc[C_PH] = _heap_pop(ph, sc[C_PH])
            sc[C_PF] -= st[i, S_CHUNK]
            st[i, S_CHUNK] = 0
            admit_due = True
            continue
        i = nxt
        nxt += 1
        if _arrive(i, pool, st, wq, sc, res):
            admit_due, arriving = True, i
        elif record:
            _log(lg, sc, t_evt, i, LOG_REJECT, 1)
    totals[2], totals[3], totals[4] = sc[C_PRE_TOTAL], sc[C_MAXRUN], sc[C_MAXPF]
    return st, series, totals, lg[:, : min(sc[C_LOG], lg.shape[1])]
