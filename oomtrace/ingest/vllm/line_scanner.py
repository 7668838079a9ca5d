"""A compiled reader of the lines that make up nearly all of a busy vLLM server's log.

A server under load writes three kinds of line for every request: "Received request" and "Added
request" records and uvicorn's access line. This reader walks a chunk's bytes once, line by line,
and reads each line's outer prefix (a ``kubectl logs --timestamps`` / ``docker logs -t`` time and
vLLM's process prefixes, coloured or not), vLLM's own header (level, printed date and time,
``[file:line]``) and, for those three kinds, the request id: in one pass, with no string made.

It takes only the plain forms of those lines, each exactly as the table's patterns read them
(:data:`~.request_patterns.RECEIVED`, "Added request <id>", :data:`~.log_parser` 's uvicorn
test, :data:`~.line_patterns.HEADER` without fractions, :mod:`oomtrace.ingest.text.outer_prefixes`
for the timestamp and process prefixes); every other line is marked :data:`GENERAL` and read by
the vectorised reader (:mod:`.line_records`), which also reads every line when numba is missing
or the input is small. ``tests/unit/ingest/vllm/test_line_scanner.py`` holds the two readers to
the same result on generated lines of every shape.

Offsets are bytes into the chunk; a line that holds a non-ASCII byte where this reader looks is
left to the general reader (characters and bytes then differ).
"""

# Loops stay loops here: numba compiles them (not generators), byte codes read as numbers.
# ruff: noqa: PLR0911, PLR0912, PLR0915

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, TypeVar, cast

import numpy as np
from numba import njit

from oomtrace.ingest.text.byte_search import find_byte
from oomtrace.ingest.text.prefix_scanner import (
    C_PROC_LEN,
    C_TIME,
    CACHE,
    NO_TIME,
    outer_prefix,
)
from oomtrace.ingest.vllm.record_scanner import (
    R_BEST_OF,
    R_BRACKETED,
    R_ID_START,
    R_ID_STOP,
    R_KIND,
    R_LINE,
    R_LOGPROBS,
    R_MAX_TOKENS,
    R_MONTH_DAY,
    R_N,
    R_OUTER,
    R_PARAMS_FIRST,
    R_PROMPT_LOGPROBS,
    R_PROMPT_TOKENS,
    R_RUN,
    R_SECOND,
    R_TOLD,
    RECORD_FIELDS,
    access_line,
    is_at,
    plain_id,
    request_fields,
    unusual,
)

F = TypeVar("F", bound=Callable[..., Any])

GENERAL: Final = 0
ACCESS: Final = 1
# The request records, in the order of scanned_chunk's words for them.
RECEIVED: Final = 2
ADDED: Final = 3
ABORTED: Final = 4
# How many of the last Received records an "Added request" line is compared with.
RECENT: Final = 16

# Ids and header windows are read from the first this many characters (request_lines.ID_HEAD,
# log_header.HEADER_SLICE): longer ones go to the general reader, which cuts them the same way.
ID_HEAD: Final = 320
HEADER_SLICE: Final = 96

_RECEIVED: Final = np.frombuffer(b"Received request ", np.uint8)
_ADDED: Final = np.frombuffer(b"Added request ", np.uint8)
_PARAMS: Final = np.frombuffer(b": params: ", np.uint8)
_PROMPT: Final = np.frombuffer(b": prompt: ", np.uint8)
_ABORTED: Final = np.frombuffer(b"Aborted request", np.uint8)
# The rows of ``general`` and ``access``: a line's number in the text, its start and stop.
L_LINE: Final = 0
L_START: Final = 1
L_STOP: Final = 2
LINE_FIELDS: Final = 3
# The rows of ``runs``.
RUN_LAST: Final = 0
RUN_WEIGHT: Final = 1
RUN_FIELDS: Final = 2


def _jit(func: F) -> F:
    """numba's njit (cached on disk, the GIL released), typed so mypy keeps the signature.
    The reader is one function on purpose: each compiled function is a file to load from the
    cache on every run, and a call that passes arrays costs reference counting."""
    return cast("F", njit(cache=True, nogil=True, boundscheck=False)(func))


@_jit
def scan_lines(
    b: np.ndarray,
    general: np.ndarray,
    access: np.ndarray,
    records: np.ndarray,
    runs: np.ndarray,
    ids: np.ndarray,
) -> tuple[int, int, int, int]:
    """Read every line of ``b``; the outputs have room for as many as
    :func:`~oomtrace.ingest.text.byte_search.count_lines` counts. Writes, column by column:

    * ``general`` / ``access``: the lines left to the vectorised reader, and uvicorn's access
      lines: :data:`L_LINE`, :data:`L_START`, :data:`L_STOP` (the newline and one CR before it
      left out);
    * ``records``: the request records, :data:`R_LINE` to :data:`R_RUN` (-1 stands for null;
      an outer time of :data:`NO_TIME` for none); a record's id is copied into ``ids`` (as
      large as ``b``) while its line is at hand, and :data:`R_ID_START`/:data:`R_ID_STOP` say
      where (-1 for a told "Added request", which keeps no id);
    * ``runs``: the runs of records (:func:`_place_with` in ``line_records``): a run's last
      record (:data:`RUN_LAST`) and how many it holds (:data:`RUN_WEIGHT`).

    Returns how many of each it wrote."""
    base = b.ctypes.data
    size = b.shape[0]
    row = np.empty(RECORD_FIELDS, np.int64)
    cache = np.full(CACHE, -1, np.int64)  # prefix_scanner.new_cache
    cache[C_PROC_LEN] = 0
    cache[C_TIME] = NO_TIME
    n_general = n_access = n_records = n_runs = 0
    copied = 0
    broken = True  # a line of the other reader since the last record: the next starts a run
    start = 0
    line = 0
    while start < size:
        p = start
        e = find_byte(base, start, size, 10)
        if e < 0:
            e = size
        start = e + 1
        if e > p and b[e - 1] == 13:
            e -= 1
        kind = _read_line(b, p, e, row, cache)
        if kind == GENERAL:
            general[L_LINE, n_general] = line
            general[L_START, n_general] = p
            general[L_STOP, n_general] = e
            n_general += 1
            broken = True
        elif kind == ACCESS:
            access[L_LINE, n_access] = line
            access[L_START, n_access] = p
            access[L_STOP, n_access] = e
            n_access += 1
        else:
            k = n_records
            records[R_LINE, k] = line
            records[R_KIND, k] = kind
            for field in range(R_MONTH_DAY, R_TOLD):
                records[field, k] = row[field]
            for field in range(R_N, R_PROMPT_LOGPROBS + 1):
                records[field, k] = row[field]
            # Told only with a full time: one whose printed time places nothing is counted so.
            told = kind == ADDED and row[R_OUTER] != NO_TIME
            told = told and _told(b, ids, records, k, row[R_ID_START], row[R_ID_STOP])
            records[R_TOLD, k] = 1 if told else 0
            if told:
                records[R_ID_START, k] = records[R_ID_STOP, k] = -1
            else:
                records[R_ID_START, k] = copied
                for r in range(row[R_ID_START], row[R_ID_STOP]):
                    ids[copied] = b[r]
                    copied += 1
                records[R_ID_STOP, k] = copied
            # A run: the same printed second and full second as the record before it.
            second = -1 if row[R_OUTER] == NO_TIME else row[R_OUTER] // 1_000_000_000
            same = not broken and records[R_MONTH_DAY, k - 1] == row[R_MONTH_DAY]
            same = same and records[R_SECOND, k - 1] == row[R_SECOND]
            if same:
                previous = records[R_OUTER, k - 1]
                same = (-1 if previous == NO_TIME else previous // 1_000_000_000) == second
            if not same:
                n_runs += 1
            records[R_RUN, k] = n_runs - 1
            runs[RUN_LAST, n_runs - 1] = k
            runs[RUN_WEIGHT, n_runs - 1] = runs[RUN_WEIGHT, n_runs - 1] + 1 if same else 1
            n_records += 1
            broken = False
        line += 1
    return n_general, n_access, n_records, n_runs


@_jit
def _told(
    b: np.ndarray, ids: np.ndarray, records: np.ndarray, k: int, start: int, stop: int
) -> bool:
    """The "Added request" record ``k`` (its id ``b[start:stop]``) follows, within
    :data:`RECENT` records, the "Received request" of the same id: that tells the arrival
    already (``request_table``)."""
    n = stop - start
    for j in range(k - 1, max(k - 1 - RECENT, -1), -1):
        first = records[R_ID_START, j]
        if records[R_KIND, j] != RECEIVED or records[R_ID_STOP, j] - first != n:
            continue
        same = True
        for r in range(n):
            if ids[first + r] != b[start + r]:
                same = False
                break
        if same:
            return True
    return False


@_jit
def _read_line(b: np.ndarray, p: int, e: int, row: np.ndarray, cache: np.ndarray) -> int:
    """The kind of the line ``b[p:e]`` (:data:`GENERAL` for any this reader does not take),
    with a record's fields in ``row``. ``cache`` is :func:`~.prefix_scanner.outer_prefix`'s."""
    row[R_MAX_TOKENS] = row[R_PROMPT_TOKENS] = -1
    row[R_N] = row[R_BEST_OF] = row[R_LOGPROBS] = row[R_PROMPT_LOGPROBS] = -1
    row[R_PARAMS_FIRST] = 0
    # --- the outer prefixes: a kubectl/docker time, vLLM's and Ray's process prefixes ------
    q = outer_prefix(b, p, e, cache)
    if q < 0:
        return GENERAL
    row[R_OUTER] = cache[C_TIME]
    # --- vLLM's header: LEVEL MM-DD HH:MM:SS [file.py:N] (the bracket optional) --------
    c = b[q] if q < e else 0
    width = 0
    if c == 73 and e - q > 4 and b[q + 1] == 78 and b[q + 2] == 70 and b[q + 3] == 79:
        width = 4
    elif c == 68 and e - q > 5 and b[q + 1] == 69 and b[q + 2] == 66 and b[q + 3] == 85:
        width = 5 if b[q + 4] == 71 else 0
    elif c == 87 and e - q > 7 and b[q + 1] == 65 and b[q + 2] == 82 and b[q + 3] == 78:
        width = 7 if b[q + 4] == 73 and b[q + 5] == 78 and b[q + 6] == 71 else 0
    elif c == 69 and e - q > 5 and b[q + 1] == 82 and b[q + 2] == 82 and b[q + 3] == 79:
        width = 5 if b[q + 4] == 82 else 0
    elif c == 67 and e - q > 8 and b[q + 1] == 82 and b[q + 2] == 73 and b[q + 3] == 84:
        ok = b[q + 4] == 73 and b[q + 5] == 67 and b[q + 6] == 65 and b[q + 7] == 76
        width = 8 if ok else 0
    h = q + width + 1
    header = width > 0 and h + 16 <= e and b[h - 1] == 32
    if header:
        for k in (0, 1, 3, 4, 6, 7, 9, 10, 12, 13):
            header = header and 48 <= b[h + k] <= 57
        header = header and b[h + 2] == 45 and b[h + 5] == 32 and b[h + 8] == 58
        header = header and b[h + 11] == 58 and b[h + 14] == 32
    end = -1
    if header:
        r = h + 15
        br = b[r] == 91
        if br:
            r += 1
        name = r
        limit = min(e, q + HEADER_SLICE)
        while r < limit:
            c = b[r]
            if not (48 <= c <= 57 or 65 <= c <= 90 or 97 <= c <= 122 or c in (95, 46, 45)):
                break
            r += 1
        if r > name and r < limit and b[r] == 58:
            colon = r
            r += 1
            while r < limit and 48 <= b[r] <= 57:
                r += 1
            if r > colon + 1 and r + 2 <= limit and b[r] == 93 and b[r + 1] == 32:
                end = r + 2
    if end < 0:
        if not header and access_line(b, q, e):
            return ACCESS
        return GENERAL
    row[R_MONTH_DAY] = ((b[h] - 48) * 10 + b[h + 1] - 48) * 100 + (b[h + 3] - 48) * 10
    row[R_MONTH_DAY] += b[h + 4] - 48
    row[R_SECOND] = ((b[h + 6] - 48) * 10 + b[h + 7] - 48) * 3600
    row[R_SECOND] += ((b[h + 9] - 48) * 10 + b[h + 10] - 48) * 60
    row[R_SECOND] += (b[h + 12] - 48) * 10 + b[h + 13] - 48
    row[R_BRACKETED] = 1 if br else 0
    # --- the request records: "Received request <id>: params|prompt: ", "Added request <id>"
    if e - end > 17 and b[end] == 82 and b[end + 8] == 32 and is_at(b, end, _RECEIVED):
        r = end + 17
        while r < e and b[r] != 58 and 32 < b[r] < 127:
            r += 1
        # The id runs to the first ":", then ": prompt: " or ": params: ", all in the head.
        if r == end + 17 or r + 10 > e or b[r] != 58 or r - end + 10 > ID_HEAD:
            return GENERAL
        params_first = is_at(b, r, _PARAMS)
        if not params_first and not is_at(b, r, _PROMPT):
            return GENERAL
        # Colour codes, Ray's repeat suffix or a record glued on: the vectorised reader's.
        if unusual(b, end, e):
            return GENERAL
        request_fields(b, end, e, end + 17, r, params_first, row)
        return RECEIVED
    if e - end > 14 and b[end] == 65 and b[end + 5] == 32 and is_at(b, end, _ADDED):
        # The id runs to the end of the line (no "." of its own): "Added request <id>".
        first = end + 14
        if e - end > ID_HEAD or not plain_id(b, first, e):
            return GENERAL
        row[R_ID_START] = first
        row[R_ID_STOP] = e - 1 if b[e - 1] == 46 else e
        return ADDED
    if e - end > 16 and b[end] == 65 and b[end + 1] == 98 and is_at(b, end, _ABORTED):
        # "Aborted request <id>." or "Aborted request(s) <id>." with one id.
        first = end + 15
        if e - first > 4 and b[first] == 40 and b[first + 1] == 115 and b[first + 2] == 41:
            first += 3
        if b[first] != 32:
            return GENERAL
        first += 1
        if not plain_id(b, first, e):
            return GENERAL
        row[R_ID_START] = first
        row[R_ID_STOP] = e - 1 if b[e - 1] == 46 else e
        return ABORTED
    return GENERAL


@_jit
def write_views(b: np.ndarray, starts: np.ndarray, stops: np.ndarray, views: np.ndarray) -> None:
    """Arrow string views (16 bytes each) of ``b[starts[k]:stops[k]]`` into ``views``: the
    text stays where it is, in buffer 0 (short strings are copied into their view)."""
    for k in range(starts.shape[0]):
        s = starts[k]
        n = stops[k] - s
        views[k, 0] = n & 255
        views[k, 1] = (n >> 8) & 255
        views[k, 2] = (n >> 16) & 255
        views[k, 3] = (n >> 24) & 255
        if n <= 12:
            for j in range(12):
                views[k, 4 + j] = b[s + j] if j < n else 0
        else:
            for j in range(4):
                views[k, 4 + j] = b[s + j]
                views[k, 8 + j] = 0
            views[k, 12] = s & 255
            views[k, 13] = (s >> 8) & 255
            views[k, 14] = (s >> 16) & 255
            views[k, 15] = (s >> 24) & 255
