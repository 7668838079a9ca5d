"""Binary min-heaps of (time, request, version) in preallocated arrays, updated in place.

A heap is an int64 array of 3 rows (time, request, version) whose columns ``0 .. size - 1`` hold
the entries, ordered by time, then request; its size lives in a slot of the kernel's scalar
vector. The array is made once, before the event loop, and never replaced (the C port allocates each
heap once, as wide as the workload, and never grows it).

Entries are removed lazily: a request admitted again, preempted or finished bumps its version,
and an entry whose version is no longer the request's is stale, skipped when it reaches the top.
So a heap holds at most one live entry per request, and the pushed request's older entries are
already stale when it is pushed: a heap as wide as the workload that fills up is compacted
(stale entries dropped, the rest heapified) and always has room after. Which entries are live
does not depend on where the heap keeps them, and live entries pop in (time, request) order,
which is a total order over them: compacting never changes what the simulation does.
"""

from __future__ import annotations

from typing import Any

from oomtrace.replay.kernel.layout import INF, S_VER


def _heap_sift_down(h: Any, size: int, k: int, t: int, i: int, v: int) -> None:
    """Place (t, i, v) at position ``k`` (free) and sift it down among the first ``size``."""
    moving = True
    while moving and 2 * k + 1 < size:
        child = 2 * k + 1
        right = child + 1
        if right < size and (
            h[0, right] < h[0, child] or (h[0, right] == h[0, child] and h[1, right] < h[1, child])
        ):
            child = right
        moving = h[0, child] < t or (h[0, child] == t and h[1, child] < i)
        if moving:
            h[0, k], h[1, k], h[2, k] = h[0, child], h[1, child], h[2, child]
            k = child
    h[0, k], h[1, k], h[2, k] = t, i, v


def _heap_room(h: Any, size: int, st: Any) -> int:
    """The size of the heap with room for one more entry: a full heap drops its stale entries
    and heapifies the rest; otherwise nothing changes (the loops run zero times: no branch
    that only some paths take reads an array, see :mod:`oomtrace.replay.kernel`)."""
    full = size == h.shape[1]
    kept = 0 if full else size
    for k in range(size if full else 0):
        if h[2, k] == st[h[1, k], S_VER]:
            h[0, kept], h[1, kept], h[2, kept] = h[0, k], h[1, k], h[2, k]
            kept += 1
    for k in range(kept // 2 - 1 if full else -1, -1, -1):
        _heap_sift_down(h, kept, k, h[0, k], h[1, k], h[2, k])
    return kept


def _heap_push(h: Any, size: int, t: int, i: int, v: int) -> int:
    """Push (t, i, v) onto a heap with room (:func:`_heap_room`); returns the new size."""
    k = size
    size = k + 1
    moving = True
    while moving and k > 0:
        up = (k - 1) >> 1
        moving = h[0, up] > t or (h[0, up] == t and h[1, up] > i)
        if moving:
            h[0, k], h[1, k], h[2, k] = h[0, up], h[1, up], h[2, up]
            k = up
    h[0, k], h[1, k], h[2, k] = t, i, v
    return size


def _heap_pop(h: Any, size: int) -> int:
    """Remove the top entry; returns the new size. The last entry takes the top's place."""
    size -= 1
    _heap_sift_down(h, size, 0, h[0, size], h[1, size], h[2, size])
    return size


def _heap_replace_top(h: Any, size: int, t: int, i: int, v: int) -> None:
    """Replace the top entry by (t, i, v): one sift-down instead of a pop and a push."""
    _heap_sift_down(h, size, 0, t, i, v)


def _heap_top(h: Any, size: int, st: Any) -> tuple[int, int]:
    """Drop stale entries from the top; returns the new size and the live top's time, or INF.
    The event loop calls it three times an event."""
    while size > 0 and h[2, 0] != st[h[1, 0], S_VER]:
        size = _heap_pop(h, size)
    return size, int(h[0, 0]) if size > 0 else INF
