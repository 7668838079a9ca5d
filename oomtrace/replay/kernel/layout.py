"""The kernel's shared vocabulary: the codes, the columns of the per-request state matrix, the
slots of the scalar vector, and the closed forms of one request's progress (tokens produced by an
instant, its next block boundary). ``oomtrace/replay/_kernel.c`` declares the same names with the
same values (``tests/unit/replay/test_c_kernel.py`` compares them)."""

from __future__ import annotations

from typing import Any

INF = 1 << 61  # doubled in comparisons, so well inside int64

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


def _blocks(n: int, block: int) -> int:
    return (n + block - 1) // block


def _produced(i: int, t: int, st: Any, o: Any, dl: Any) -> int:
    """Output tokens request ``i`` has produced by instant ``t`` (inclusive)."""
    first, g0, o_i, dl_i = st[i, S_FIRST], st[i, S_G0], o[i], dl[i]
    return int(g0) if t < first else int(min(g0 + (t - first) // dl_i + 1, o_i))


def _next_boundary(i: int, st: Any, o: Any, dl: Any) -> int:
    """When request ``i`` starts its next block, or INF if it stores no further block.

    The k-th token of a residency (k >= 1) is produced at ``first + (k - 1) * dl`` and stored
    when the request goes on (its total output stays below ``o``); it starts a block when the
    stored count before it is a multiple of ``block``."""
    k, g0, first, o_i, dl_i = st[i, S_KNEXT], st[i, S_G0], st[i, S_FIRST], o[i], dl[i]
    return INF if g0 + k > o_i - 1 else int(first + (k - 1) * dl_i)
