"""The fast simulator: no event per token. Plain Python and NumPy, compiled with numba for large
workloads (:mod:`oomtrace.replay.compiled`); the same functions run uncompiled for small ones.

Events are arrivals, admissions, prefill ends, finishes, and block boundaries. A request's
block boundaries are computed in closed form (after its prefill it produces one token every
``dl`` nanoseconds, so it starts a new block every ``block_size * dl``), and only the next one of
each running request sits in a heap, so the pool level ``U`` is exact at every instant for
O(log running) work per block, 1/block_size of the work of a per-token simulation. An
exhaustion is found where it happens, at the boundary that takes the level over the pool; no
search is needed.

The semantics (which :mod:`oomtrace.replay.reference` implements token by token, and the tests
check both agree) are in :mod:`oomtrace.replay.settings`. Times are int64 nanoseconds from the first
arrival, so both simulators compute identical instants.

Arrays in, arrays out: everything here is numba-typed; :mod:`oomtrace.replay.runner` wraps it.
Functions take many positional arrays and the main loop is one long function on purpose: under
numba every call that passes arrays costs reference counting, which would dominate this loop.
Nothing here imports numba: :func:`_jit` and :func:`_inline` only mark how
:mod:`oomtrace.replay.compiled` compiles each function.
"""

# ruff: noqa: PLR0912, PLR0915, PLR0917

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

F = TypeVar("F", bound=Callable[..., Any])
COMPILE_AS = "_oomtrace_numba"  # the attribute that marks a function for the compiler


def _jit(func: F) -> F:
    """Compiled on its own (numba's ``njit``)."""
    setattr(func, COMPILE_AS, "jit")
    return func


def _inline(func: F) -> F:
    """Small helpers are inlined into their callers when compiled: a call that passes arrays
    costs reference counting, which would dominate a loop this tight."""
    setattr(func, COMPILE_AS, "inline")
    return func


INF = 1 << 61  # doubled in comparisons below, so well inside int64

# policy codes
ON_DEMAND = 0
RESERVE = 1

# columns of the per-request state matrix
S_SEG = 0  # start of the current residency (ns)
S_FIRST = 1  # when the current residency produces its first token (end of its prefill)
S_G0 = 2  # output tokens produced before the current residency
S_VER = 3  # bumped at every admission, preemption and finish; stale heap entries are skipped
S_STATUS = 4  # 0 not arrived, 1 waiting, 2 running, 3 finished, 4 rejected
S_ADMIT = 5  # first admission (ns), -1 if never
S_FINISH = 6  # finish (ns), -1 if never
S_NPRE = 7  # preemptions suffered
S_REASON = 8  # 0 none, 1 larger than the pool, 2 waiting queue full
S_CHUNK = 9  # prefill budget tokens held while in prefill, else 0
S_BLK = 10  # blocks held now
S_KNEXT = 11  # token (counted within the residency) at which the next block starts
S_PREV = 12  # running list, doubly linked in admission order
S_NEXT = 13
S_FINAL = 14  # blocks at the final length (on-demand) or reserved (reserve)
NCOL = 15

# scalar slots
C_NRUN = 0
C_HEAD = 1  # oldest running request, -1 if none
C_TAIL = 2  # newest running request, -1 if none
C_WHEAD = 3
C_WLEN = 4
C_USED = 5  # blocks held by running requests
C_PF = 6  # prefill tokens in flight
C_PRE_TOTAL = 7
C_FH = 8  # heap sizes: finishes, prefill ends, block boundaries
C_PH = 9
C_XH = 10
C_ACTIVE = 11  # 1 while block boundaries are tracked one by one (the pool could run dry)
C_TAU = 12  # dormant: every S_BLK (and so C_USED) is exact as of this instant, not after
C_RACC = 13  # dormant: running requests since C_TAU (leaves not subtracted: a bound)
C_COMMIT = 14  # sum of S_FINAL over running requests: the level can never exceed it
C_MAXRUN = 15  # most requests running at once
C_MAXPF = 16  # most prefill tokens in flight at once (tracked only with a prefill budget)
C_LOG = 17  # rows in the event log
NSC = 18

# event log kinds (when limits[5] asks for the log)
LOG_ADMIT = 1  # extra: when this residency produces its next token (end of its prefill)
LOG_PREEMPT = 2  # extra: output tokens produced so far
LOG_FINISH = 3  # extra: 0
LOG_REJECT = 4  # extra: the rejection reason (S_REASON)


@_inline
def _blocks(n: int, block: int) -> int:
    return (n + block - 1) // block


@_inline
def _produced(i: int, t: int, st: Any, o: Any, dl: Any) -> int:
    """Output tokens request ``i`` has produced by instant ``t`` (inclusive)."""
    first = st[i, S_FIRST]
    if t < first:
        return int(st[i, S_G0])
    return int(min(st[i, S_G0] + (t - first) // dl[i] + 1, o[i]))


@_inline
def _heap_push(h: Any, size: int, t: int, i: int, v: int) -> Any:
    """Push (t, i, v) onto the heap ``h`` (rows: time, request, version; ordered by time, then
    request), growing it when full; returns the heap array."""
    if size == h.shape[1]:
        grown = np.empty((3, 2 * size), dtype=np.int64)
        grown[:, :size] = h
        h = grown
    times, ids, vers = h[0], h[1], h[2]
    k = size
    while k > 0:
        up = (k - 1) >> 1
        if times[up] < t or (times[up] == t and ids[up] <= i):
            break
        times[k], ids[k], vers[k] = times[up], ids[up], vers[up]
        k = up
    times[k], ids[k], vers[k] = t, i, v
    return h


@_inline
def _heap_pop(h: Any, size: int) -> int:
    """Remove the top entry; returns the new size. The last entry takes the top's place."""
    size -= 1
    _heap_replace_top(h, size, h[0][size], h[1][size], h[2][size])
    return size


@_inline
def _heap_replace_top(h: Any, size: int, t: int, i: int, v: int) -> None:
    """Replace the top entry by (t, i, v): one sift-down instead of a pop and a push."""
    times, ids, vers = h[0], h[1], h[2]
    k = 0
    while True:
        child = 2 * k + 1
        if child >= size:
            break
        right = child + 1
        if right < size and (
            times[right] < times[child]
            or (times[right] == times[child] and ids[right] < ids[child])
        ):
            child = right
        if t < times[child] or (t == times[child] and i <= ids[child]):
            break
        times[k], ids[k], vers[k] = times[child], ids[child], vers[child]
        k = child
    times[k], ids[k], vers[k] = t, i, v


@_inline
def _heap_top(h: Any, size: int, st: Any) -> tuple[int, int]:
    """Drop stale entries (their request was admitted again, preempted or finished since);
    returns the new size and the live top's time, or INF."""
    while size > 0 and h[2, 0] != st[h[1, 0], S_VER]:
        size = _heap_pop(h, size)
    if size == 0:
        return size, INF
    return size, int(h[0, 0])


@_inline
def _log(lg: Any, sc: Any, t: int, i: int, kind: int, extra: int) -> Any:
    """Append (t, i, kind, extra) to the event log, growing it when full."""
    size = sc[C_LOG]
    if size == lg.shape[1]:
        grown = np.empty((4, 2 * size), dtype=np.int64)
        grown[:, :size] = lg
        lg = grown
    lg[0, size], lg[1, size], lg[2, size], lg[3, size] = t, i, kind, extra
    sc[C_LOG] = size + 1
    return lg


@_inline
def _link(i: int, st: Any, sc: Any) -> None:
    st[i, S_PREV], st[i, S_NEXT] = sc[C_TAIL], -1
    if sc[C_TAIL] >= 0:
        st[sc[C_TAIL], S_NEXT] = i
    else:
        sc[C_HEAD] = i
    sc[C_TAIL] = i
    sc[C_NRUN] += 1


@_inline
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


@_inline
def _next_boundary(i: int, st: Any, o: Any, dl: Any) -> int:
    """When request ``i`` starts its next block, or INF if it stores no further block.

    The k-th token of a residency (k >= 1) is produced at ``first + (k - 1) * dl`` and stored
    when the request goes on (its total output stays below ``o``); it starts a block when the
    stored count before it is a multiple of ``block``."""
    k = st[i, S_KNEXT]
    if st[i, S_G0] + k > o[i] - 1:
        return INF
    return int(st[i, S_FIRST] + (k - 1) * dl[i])


@_jit
def _sync(
    t: int, st: Any, sc: Any, xh: Any, rate: Any, arrays: tuple[Any, Any, Any, Any, Any], block: int
) -> Any:
    """Make every running request's blocks (and the level) exact as of instant ``t``, in closed
    form; when active, rebuild the heap of next block boundaries. Returns the heap."""
    p, o, dl = arrays[0], arrays[1], arrays[3]
    total, rate[0] = 0, 0.0
    sc[C_XH] = 0
    i = sc[C_HEAD]
    while i >= 0:
        g0 = st[i, S_G0]
        done = _produced(i, t, st, o, dl) - g0
        st[i, S_BLK] = _blocks(p[i] + g0 + min(done, o[i] - 1 - g0), block)
        total += st[i, S_BLK]
        first = (-(p[i] + g0)) % block + 1
        st[i, S_KNEXT] = first if done < first else first + block * ((done - first) // block + 1)
        rate[0] += 1.0 / (block * dl[i])
        if sc[C_ACTIVE] == 1:
            boundary = _next_boundary(i, st, o, dl)
            if boundary < INF:
                xh = _heap_push(xh, sc[C_XH], boundary, i, st[i, S_VER])
                sc[C_XH] += 1
        i = st[i, S_NEXT]
    sc[C_USED], sc[C_TAU], sc[C_RACC] = total, t, sc[C_NRUN]
    return xh


@_inline
def _level_at(t: int, st: Any, sc: Any, arrays: tuple[Any, Any, Any, Any, Any], block: int) -> int:
    """The level at instant ``t`` while dormant, in closed form as :func:`_sync` computes it,
    changing nothing (a probe that reads only the level leaves the bound as it was)."""
    p, o, dl = arrays[0], arrays[1], arrays[3]
    total = 0
    i = sc[C_HEAD]
    while i >= 0:
        g0 = st[i, S_G0]
        done = _produced(i, t, st, o, dl) - g0
        total += _blocks(p[i] + g0 + min(done, o[i] - 1 - g0), block)
        i = st[i, S_NEXT]
    return total


@_inline
def _bound(t: int, sc: Any, rate: Any) -> int:
    """An upper bound of the level at ``t`` while dormant: each running request has started at
    most ``(t - tau) / (block * dl) + 1`` blocks since ``tau`` (or since its admission)."""
    if sc[C_ACTIVE] == 1:
        return int(sc[C_USED])
    grown = (t - sc[C_TAU]) * rate[0] * (1.0 + 1e-9)
    return int(sc[C_USED] + sc[C_RACC] + grown + 1.0)


@_inline
def _start(
    i: int,
    t: int,
    st: Any,
    sc: Any,
    rate: Any,
    arrays: tuple[Any, Any, Any, Any, Any],
    limits: Any,
) -> tuple[int, int, int]:
    """Make waiting request ``i`` resident at ``t``; returns (finish, prefill end, next block
    boundary)."""
    p, o, pre, dl, res = arrays
    block, policy, budget = limits[0], limits[1], limits[3]
    g0 = st[i, S_G0]
    seg_pre = pre[i] if g0 == 0 else max(1, pre[i] * (p[i] + g0) // max(p[i], 1))
    st[i, S_STATUS] = 2
    st[i, S_SEG] = t
    st[i, S_FIRST] = t + seg_pre
    st[i, S_VER] += 1
    if st[i, S_ADMIT] < 0:
        st[i, S_ADMIT] = t
    _link(i, st, sc)
    sc[C_MAXRUN] = max(sc[C_MAXRUN], sc[C_NRUN])
    held = res[i] if policy == RESERVE else _blocks(p[i] + g0, block)
    st[i, S_BLK] = held
    sc[C_USED] += held
    st[i, S_FINAL] = res[i]
    sc[C_COMMIT] += res[i]
    if sc[C_ACTIVE] == 0:
        sc[C_RACC] += 1
        rate[0] += 1.0 / (block * dl[i])
    if budget > 0:
        st[i, S_CHUNK] = min(p[i] + g0, budget)
        sc[C_PF] += st[i, S_CHUNK]
        sc[C_MAXPF] = max(sc[C_MAXPF], sc[C_PF])
    boundary = INF
    if policy == ON_DEMAND:
        st[i, S_KNEXT] = (-(p[i] + g0)) % block + 1
        if sc[C_ACTIVE] == 1:
            boundary = _next_boundary(i, st, o, dl)
    return int(t + seg_pre + (o[i] - g0 - 1) * dl[i]), int(t + seg_pre), boundary


@_jit
def _preempt_until_fits(
    t: int, pool: int, st: Any, wq: Any, sc: Any, o: Any, dl: Any, lg: Any, record: bool
) -> Any:
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
            lg = _log(lg, sc, t, v, LOG_PREEMPT, st[v, S_G0])
        sc[C_WHEAD] = (sc[C_WHEAD] - 1 + n) % n
        wq[sc[C_WHEAD]] = v
        sc[C_WLEN] += 1
    return lg


@_inline
def _admit_pass(
    t: int,
    pool: int,
    limits: Any,
    st: Any,
    wq: Any,
    sc: Any,
    rate: Any,
    arrays: tuple[Any, Any, Any, Any, Any],
    heaps: tuple[Any, Any, Any, Any],
) -> tuple[Any, Any, Any, Any]:
    """Admit from the head of the waiting queue, first come first served, while the head fits
    (blocks, ``max_num_seqs``, prefill token budget). Returns the (possibly grown) heaps and
    event log."""
    p, res = arrays[0], arrays[4]
    block, policy, max_seqs, budget = limits[0], limits[1], limits[2], limits[3]
    fh, ph, xh, lg = heaps
    n = st.shape[0]
    while sc[C_WLEN] > 0:
        i = wq[sc[C_WHEAD]]
        if max_seqs > 0 and sc[C_NRUN] >= max_seqs:
            break
        need = res[i] if policy == RESERVE else _blocks(p[i] + st[i, S_G0], block)
        if sc[C_ACTIVE] == 1 or sc[C_COMMIT] + need > pool:
            # dormant, the level is only known to be below the committed total: make it exact
            if sc[C_ACTIVE] == 0 and sc[C_TAU] != t:
                xh = _sync(t, st, sc, xh, rate, arrays, block)
            if sc[C_USED] + need > pool:
                break
        if budget > 0 and sc[C_PF] + min(p[i] + st[i, S_G0], budget) > budget:
            break
        sc[C_WHEAD] = (sc[C_WHEAD] + 1) % n
        sc[C_WLEN] -= 1
        finish, prefill_end, boundary = _start(i, t, st, sc, rate, arrays, limits)
        ver = st[i, S_VER]
        if limits[5] == 1:
            lg = _log(lg, sc, t, i, LOG_ADMIT, prefill_end)
        fh = _heap_push(fh, sc[C_FH], finish, i, ver)
        sc[C_FH] += 1
        if budget > 0:
            ph = _heap_push(ph, sc[C_PH], prefill_end, i, ver)
            sc[C_PH] += 1
        if boundary < INF:
            xh = _heap_push(xh, sc[C_XH], boundary, i, ver)
            sc[C_XH] += 1
    return fh, ph, xh, lg


@_jit
def _sleep(now: int, st: Any, sc: Any, rate: Any, dl: Any, block: int) -> None:
    """Stop tracking block boundaries: the running requests fit the pool at their final
    lengths, so it cannot run dry until more are admitted."""
    sc[C_ACTIVE], sc[C_XH], sc[C_TAU], sc[C_RACC] = 0, 0, now - 1, sc[C_NRUN]
    rate[0] = 0.0
    i = sc[C_HEAD]
    while i >= 0:
        rate[0] += 1.0 / (block * dl[i])
        i = st[i, S_NEXT]


@_inline
def _cross(
    t: int, until: int, pool: int, st: Any, sc: Any, xh: Any, o: Any, dl: Any, block: int
) -> int:
    """Apply block boundaries from instant ``t`` on, instant by instant, up to ``until`` (the
    next other event: a finish or probe at ``until`` comes first, a prefill end or arrival after
    the boundaries of its instant; ``until`` is even for the former and odd for the latter, see
    the caller) while the pool holds them. Returns the last instant applied; the level is above
    ``pool`` after it if the pool ran dry there."""
    last = t
    while sc[C_XH] > 0 and 2 * xh[0, 0] < until:
        at = xh[0, 0]
        if at > last and sc[C_USED] > pool:
            break  # the pool ran dry at the previous instant
        i, ver = xh[1, 0], xh[2, 0]
        if ver != st[i, S_VER]:
            sc[C_XH] = _heap_pop(xh, sc[C_XH])
            continue
        last = at
        st[i, S_BLK] += 1
        sc[C_USED] += 1
        st[i, S_KNEXT] += block
        boundary = _next_boundary(i, st, o, dl)
        if boundary < INF:
            _heap_replace_top(xh, sc[C_XH], boundary, i, ver)
        else:
            sc[C_XH] = _heap_pop(xh, sc[C_XH])
    return last


@_jit
def _arrive(i: int, pool: int, st: Any, wq: Any, sc: Any, res: Any) -> bool:
    """Queue arrival ``i``; False if it can never fit the pool (rejected)."""
    if res[i] > pool:
        st[i, S_STATUS], st[i, S_REASON] = 4, 1
        return False
    st[i, S_STATUS] = 1
    wq[(sc[C_WHEAD] + sc[C_WLEN]) % st.shape[0]] = i
    sc[C_WLEN] += 1
    return True


@_jit
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
) -> tuple[Any, Any, Any, Any]:
    """Run the replay.

    Inputs (int64 arrays, one row per request in arrival order): ``arr`` arrival ns, ``p`` prompt
    tokens, ``o`` output tokens (>= 1), ``pre`` prefill ns (>= 1), ``dl`` ns per output token
    (>= 1), ``res`` blocks reserved at admission (reserve) or held at the final length
    (on-demand). ``limits`` = [block_size, policy, max_num_seqs (0: none), prefill token budget
    (0: none), max waiting (-1: none), 1 to keep the event log, 1 to read the highest level
    between probes]. ``probes``: sorted instants at which to read the pool.

    Returns ``st`` (per-request state, columns ``S_*``), ``series`` (one row per probe: blocks
    held just before the probe, running, waiting, and the highest level since the previous probe
    when asked for, else the level again: finding it costs a closed-form pass over the running
    requests at most finishes, which dense probes that only read the level do not need) and
    ``totals`` = [peak blocks, first exhaustion ns or -1, preemptions, most running at once, most
    prefill tokens in flight at once], and the event log (rows: time, request, kind ``LOG_*``,
    extra; empty unless asked for).
    """
    n = arr.shape[0]
    block, policy, max_wait = limits[0], limits[1], limits[4]
    margin = pool // 8  # hysteresis: leave the active mode only well below the pool
    arrays = (p, o, pre, dl, res)
    st = np.zeros((n, NCOL), dtype=np.int64)
    st[:, S_ADMIT] = -1
    st[:, S_FINISH] = -1
    wq = np.empty(max(n, 1), dtype=np.int64)
    sc = np.zeros(NSC, dtype=np.int64)
    sc[C_HEAD], sc[C_TAIL], sc[C_TAU] = -1, -1, -1
    sc[C_ACTIVE] = 1 if policy == RESERVE else 0
    rate = np.zeros(1, dtype=np.float64)
    fh = np.empty((3, 64), dtype=np.int64)
    ph = np.empty((3, 64), dtype=np.int64)
    xh = np.empty((3, 64), dtype=np.int64)
    lg = np.empty((4, 64), dtype=np.int64)
    record = limits[5] == 1
    peaks = limits[6] == 1
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
            # each prefill end and arrival (the only call site: the pass is inlined)
            admit_due = False
            heaps = _admit_pass(now, pool, limits, st, wq, sc, rate, arrays, (fh, ph, xh, lg))
            fh, ph, xh, lg = heaps
            if arriving >= 0 and max_wait >= 0 and sc[C_WLEN] > max_wait:
                # the arrival is still waiting (arrivals join the tail) and the queue is full
                sc[C_WLEN] -= 1
                st[arriving, S_STATUS], st[arriving, S_REASON] = 4, 2
                if record:
                    lg = _log(lg, sc, now, arriving, LOG_REJECT, 2)
            arriving = -1
            continue
        horizon = min(t_evt, probes[j]) if j < probes.shape[0] else t_evt
        if policy == ON_DEMAND:
            if sc[C_ACTIVE] == 0 and sc[C_COMMIT] > pool and _bound(horizon, sc, rate) > pool:
                # the pool could run dry before the next event: track boundaries one by one
                sc[C_ACTIVE] = 1
                xh = _sync(now, st, sc, xh, rate, arrays, block)
                continue
            if sc[C_ACTIVE] == 1 and sc[C_COMMIT] <= pool - margin:
                _sleep(now, st, sc, rate, dl, block)
                continue
        if j < probes.shape[0] and probes[j] <= t_evt:
            if not peaks:
                level = sc[C_USED]
                if sc[C_ACTIVE] == 0:
                    level = _level_at(probes[j] - 1, st, sc, arrays, block)
                series[j, 0], series[j, 1], series[j, 2] = level, sc[C_NRUN], sc[C_WLEN]
                series[j, 3] = level
                j += 1
                continue
            if sc[C_ACTIVE] == 0:
                xh = _sync(probes[j] - 1, st, sc, xh, rate, arrays, block)
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
                        xh = _sync(t_evt - 1, st, sc, xh, rate, arrays, block)
                    bin_max = max(bin_max, sc[C_USED])
                    totals[0] = max(totals[0], sc[C_USED])
            i = fh[1, 0]
            sc[C_FH] = _heap_pop(fh, sc[C_FH])
            _leave(i, st, sc)
            st[i, S_STATUS] = 3
            st[i, S_FINISH] = t_evt
            if record:
                lg = _log(lg, sc, t_evt, i, LOG_FINISH, 0)
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
                lg = _preempt_until_fits(t_evt, pool, st, wq, sc, o, dl, lg, record)
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
            lg = _log(lg, sc, t_evt, i, LOG_REJECT, 1)
    totals[2], totals[3], totals[4] = sc[C_PRE_TOTAL], sc[C_MAXRUN], sc[C_MAXPF]
    return st, series, totals, lg[:, : sc[C_LOG]]
