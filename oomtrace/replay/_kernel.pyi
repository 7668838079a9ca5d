"""The replay kernel in C (``_kernel.c``: a port of :mod:`oomtrace.replay.kernel`'s ``simulate``
and :mod:`~oomtrace.replay.kernel.grouping`). Arrays are NumPy's (any C-contiguous buffer of the
stated item size); :mod:`oomtrace.replay.compiled` wraps them."""

from typing import Final

import numpy as np

INF: Final[int]
ON_DEMAND: Final[int]
RESERVE: Final[int]
S_SEG: Final[int]
S_FIRST: Final[int]
S_G0: Final[int]
S_VER: Final[int]
S_STATUS: Final[int]
S_ADMIT: Final[int]
S_FINISH: Final[int]
S_NPRE: Final[int]
S_REASON: Final[int]
S_CHUNK: Final[int]
S_BLK: Final[int]
S_KNEXT: Final[int]
S_PREV: Final[int]
S_NEXT: Final[int]
S_FINAL: Final[int]
NCOL: Final[int]
C_NRUN: Final[int]
C_HEAD: Final[int]
C_TAIL: Final[int]
C_WHEAD: Final[int]
C_WLEN: Final[int]
C_USED: Final[int]
C_PF: Final[int]
C_PRE_TOTAL: Final[int]
C_FH: Final[int]
C_PH: Final[int]
C_XH: Final[int]
C_ACTIVE: Final[int]
C_TAU: Final[int]
C_RACC: Final[int]
C_COMMIT: Final[int]
C_MAXRUN: Final[int]
C_MAXPF: Final[int]
C_LOG: Final[int]
NSC: Final[int]
LOG_ADMIT: Final[int]
LOG_PREEMPT: Final[int]
LOG_FINISH: Final[int]
LOG_REJECT: Final[int]
E_OTHER: Final[int]
E_ADMITTED: Final[int]
E_FIRST_TOKEN: Final[int]
E_END: Final[int]
E_REJECTED: Final[int]
E_EVENT: Final[int]
E_PROMPT: Final[int]
E_MAX: Final[int]
E_OUTPUT: Final[int]
G_FIRST: Final[int]
G_PROMPT: Final[int]
G_MAX: Final[int]
G_OUTPUT: Final[int]
G_ADMITTED: Final[int]
G_FIRST_TOKEN: Final[int]
G_END: Final[int]
G_REJECTED: Final[int]
G_NCOL: Final[int]
RECENT_SLOTS: Final[int]
NLIMITS: Final[int]

def simulate(
    arr: np.ndarray, p: np.ndarray, o: np.ndarray, pre: np.ndarray, dl: np.ndarray,
    res: np.ndarray, pool: int, limits: np.ndarray, probes: np.ndarray, st: np.ndarray,
    series: np.ndarray, totals: np.ndarray, log: np.ndarray, /,
) -> int: ...  # fmt: skip
def group_ids(key: np.ndarray, check: np.ndarray, table: np.ndarray, out: np.ndarray, /) -> int: ...
def group_rows(ids: np.ndarray, code: np.ndarray, out: np.ndarray, /) -> None: ...
