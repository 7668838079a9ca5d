"""The pool's level: exact in closed form at an instant, bounded while dormant, and advanced
block boundary by block boundary while the pool could run dry.

While dormant (the running requests' final lengths fit the pool), blocks are not tracked one by
one: each running request's blocks follow in closed form from when it was admitted, so the level
at any instant is a pass over the running requests, and a cheap upper bound says when that pass
is needed. While active, the next block boundary of each running request sits in a heap.
"""

# ruff: noqa: PLR0917

from __future__ import annotations

from typing import Any

from oomtrace.replay.kernel.heaps import _heap_pop, _heap_push, _heap_replace_top
from oomtrace.replay.kernel.layout import (
    C_ACTIVE,
    C_HEAD,
    C_NRUN,
    C_RACC,
    C_TAU,
    C_USED,
    C_XH,
    INF,
    S_BLK,
    S_G0,
    S_KNEXT,
    S_NEXT,
    S_VER,
    _blocks,
    _next_boundary,
    _produced,
)


def _sync(
    t: int, st: Any, sc: Any, xh: Any, rate: Any, p: Any, o: Any, dl: Any, block: int
) -> None:
    """Make every running request's blocks (and the level) exact as of instant ``t``, in closed
    form; when active, rebuild the heap of next block boundaries ``xh``."""
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
                # emptied above and one entry per running request: it has room
                sc[C_XH] = _heap_push(xh, sc[C_XH], boundary, i, st[i, S_VER])
        i = st[i, S_NEXT]
    sc[C_USED], sc[C_TAU], sc[C_RACC] = total, t, sc[C_NRUN]


def _level_at(t: int, st: Any, sc: Any, p: Any, o: Any, dl: Any, block: int) -> int:
    """The level at instant ``t`` while dormant, in closed form as :func:`_sync` computes it,
    changing nothing (a probe that reads only the level leaves the bound as it was)."""
    total = 0
    i = sc[C_HEAD]
    while i >= 0:
        g0 = st[i, S_G0]
        done = _produced(i, t, st, o, dl) - g0
        total += _blocks(p[i] + g0 + min(done, o[i] - 1 - g0), block)
        i = st[i, S_NEXT]
    return total


def _bound(t: int, sc: Any, rate: Any) -> int:
    """An upper bound of the level at ``t`` while dormant: each running request has started at
    most ``(t - tau) / (block * dl) + 1`` blocks since ``tau`` (or since its admission)."""
    active, used, tau, racc, speed = sc[C_ACTIVE], sc[C_USED], sc[C_TAU], sc[C_RACC], rate[0]
    return int(used) if active == 1 else int(used + racc + (t - tau) * speed * (1.0 + 1e-9) + 1.0)


def _sleep(now: int, st: Any, sc: Any, rate: Any, dl: Any, block: int) -> None:
    """Stop tracking block boundaries: the running requests fit the pool at their final
    lengths, so it cannot run dry until more are admitted."""
    sc[C_ACTIVE], sc[C_XH], sc[C_TAU], sc[C_RACC] = 0, 0, now - 1, sc[C_NRUN]
    rate[0] = 0.0
    i = sc[C_HEAD]
    while i >= 0:
        rate[0] += 1.0 / (block * dl[i])
        i = st[i, S_NEXT]


def _cross(
    t: int, until: int, pool: int, st: Any, sc: Any, xh: Any, o: Any, dl: Any, block: int
) -> int:
    """Apply block boundaries from instant ``t`` on, instant by instant, up to ``until`` (the
    next other event: a finish or probe at ``until`` comes first, a prefill end or arrival after
    the boundaries of its instant; ``until`` is even for the former and odd for the latter, see
    the caller) while the pool holds them. Returns the last instant applied; the level is above
    ``pool`` after it if the pool ran dry there."""
    last = t
    holds = True
    while holds and sc[C_XH] > 0 and 2 * xh[0, 0] < until:
        at, i, ver = xh[0, 0], xh[1, 0], xh[2, 0]
        holds = at <= last or sc[C_USED] <= pool  # else the pool ran dry at the last instant
        if holds and ver != st[i, S_VER]:
            sc[C_XH] = _heap_pop(xh, sc[C_XH])
        elif holds:
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
