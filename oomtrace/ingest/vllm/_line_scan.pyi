"""The vLLM line scanner, a C extension (``_line_scan.c``: what it reads, what it leaves to the
vectorised reader). Arrays are NumPy's (any C-contiguous buffer of the stated item size)."""

from typing import Final

import numpy as np

# What scan_lines makes of a line: left to the vectorised reader, uvicorn's access line, or one
# of the request records.
GENERAL: Final[int]
ACCESS: Final[int]
RECEIVED: Final[int]
ADDED: Final[int]
ABORTED: Final[int]
RECENT: Final[int]
ID_HEAD: Final[int]
HEADER_SLICE: Final[int]
NO_TIME: Final[int]
# The rows of ``records``.
R_LINE: Final[int]
R_KIND: Final[int]
R_MONTH_DAY: Final[int]
R_SECOND: Final[int]
R_OUTER: Final[int]
R_BRACKETED: Final[int]
R_ID_START: Final[int]
R_ID_STOP: Final[int]
R_MAX_TOKENS: Final[int]
R_PROMPT_TOKENS: Final[int]
R_PARAMS_FIRST: Final[int]
R_TOLD: Final[int]
R_RUN: Final[int]
R_N: Final[int]
R_BEST_OF: Final[int]
R_LOGPROBS: Final[int]
R_PROMPT_LOGPROBS: Final[int]
RECORD_FIELDS: Final[int]
# The rows of ``general`` and ``access``.
L_LINE: Final[int]
L_START: Final[int]
L_STOP: Final[int]
LINE_FIELDS: Final[int]
# The rows of ``runs``.
RUN_LAST: Final[int]
RUN_WEIGHT: Final[int]
RUN_FIELDS: Final[int]

def count_lines(text: np.ndarray | bytes, /) -> int:
    """How many lines ``text`` holds (a last line without a newline counts)."""

def scan_lines(
    b: np.ndarray | bytes,
    general: np.ndarray,
    access: np.ndarray,
    records: np.ndarray,
    runs: np.ndarray,
    ids: np.ndarray,
    /,
) -> tuple[int, int, int, int, int, bool, int] | None:
    """Read every line of ``b`` (uint8); the int64 outputs need a column per line
    (:func:`count_lines`), ``ids`` (uint8) as many bytes as ``b`` at most. Writes, column by
    column:

    * ``general`` / ``access`` (:data:`LINE_FIELDS` rows): the lines left to the vectorised
      reader, and uvicorn's access lines: :data:`L_LINE`, :data:`L_START`, :data:`L_STOP` (the
      newline and one CR before it left out);
    * ``records`` (:data:`RECORD_FIELDS` rows): the request records, :data:`R_LINE` to
      :data:`R_PROMPT_LOGPROBS` (-1 stands for null; an outer time of :data:`NO_TIME` for
      none); a record's id is copied into ``ids`` and :data:`R_ID_START`/:data:`R_ID_STOP` say
      where (-1 for a told "Added request", which keeps no id);
    * ``runs`` (:data:`RUN_FIELDS` rows): the runs of records (the same printed second and full
      second): a run's last record (:data:`RUN_LAST`) and how many it holds
      (:data:`RUN_WEIGHT`).

    Returns how many of each it wrote, how many lines ``b`` holds (as :func:`count_lines`),
    whether a byte of it is not ASCII (in one pass with the rest) and how many bytes its longest
    line holds (without its newline and one CR before it); None where the outputs have
    too little room (nothing is written out of bounds: count the lines, give more, read again).
    ValueError where an array has the wrong shape or item size. The GIL is released
    meanwhile."""

def write_views(
    b: np.ndarray | bytes, starts: np.ndarray, stops: np.ndarray, views: np.ndarray, /
) -> None:
    """Arrow string views (16 bytes each, rows of ``views``) of ``b[starts[k]:stops[k]]``: the
    text stays where it is, in buffer 0 (short strings are copied into their view)."""

def set_wide(on: bool, /) -> bool:
    """Read 32 bytes a step (AVX2) where the processor can (the default there), or 16 (SSE2):
    the tests' way to hold both to the same result. Returns whether 32 are now read. Not to be
    called while a scan runs."""
