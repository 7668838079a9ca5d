"""What the compiled line scanner (:mod:`.line_scanner`) reads in a record's body, and the
layout of the record it writes: a "Received request" record's fields (its id, ``max_tokens``
and prompt token count, as :mod:`.request_lines` reads them), the checks that leave a record
or an id to the vectorised reader (colour codes, Ray's repeat suffix, a glued record, an id that
is not one plain word), and uvicorn's access line.

Searches over a whole body use the C library's (:mod:`oomtrace.ingest.text.byte_search`).
"""

# Loops stay loops here: numba compiles them (not generators), byte codes read as numbers.
# ruff: noqa: PLR0911, PLR0912, SIM110

from __future__ import annotations

from typing import Final

import numpy as np

from oomtrace.ingest.text.byte_search import compiled, find_byte

# The rows of ``records``.
R_LINE: Final = 0
R_KIND: Final = 1
R_MONTH_DAY: Final = 2  # the printed date, month * 100 + day
R_SECOND: Final = 3  # the printed time, seconds of the day
R_OUTER: Final = 4  # the outer time, ns since the epoch
R_BRACKETED: Final = 5
R_ID_START: Final = 6
R_ID_STOP: Final = 7
R_MAX_TOKENS: Final = 8
R_PROMPT_TOKENS: Final = 9
R_PARAMS_FIRST: Final = 10
R_TOLD: Final = 11  # an "Added request" right after its "Received request"
R_RUN: Final = 12
# the SamplingParams that size a request's step (request_lines.PARAMS), -1 for null
R_N: Final = 13
R_BEST_OF: Final = 14
R_LOGPROBS: Final = 15
R_PROMPT_LOGPROBS: Final = 16
RECORD_FIELDS: Final = 17
_ALLOC_FAILED: Final = np.frombuffer(b"ALLOC_FAILED", np.uint8)
_ACROSS: Final = np.frombuffer(b"x across cluster]", np.uint8)
_LEVEL_INFO: Final = np.frombuffer(b"INFO", np.uint8)
_LEVEL_DEBUG: Final = np.frombuffer(b"DEBUG", np.uint8)
_LEVEL_ERROR: Final = np.frombuffer(b"ERROR", np.uint8)
_LEVEL_WARNING: Final = np.frombuffer(b"WARNING", np.uint8)
_LEVEL_CRITICAL: Final = np.frombuffer(b"CRITICAL", np.uint8)
_INFO: Final = np.frombuffer(b"INFO:", np.uint8)
_ERROR: Final = np.frombuffer(b"ERROR:", np.uint8)
_WARNING: Final = np.frombuffer(b"WARNING:", np.uint8)
_HTTP: Final = np.frombuffer(b" HTTP/", np.uint8)
# The SamplingParams read (request_lines.PARAMS), each a row of _KEYS (padded), its length in
# _KEY_LENGTHS and its row of ``records`` in _KEY_ROWS.
_KEY_NAMES: Final = (b"max_tokens", b"n", b"best_of", b"logprobs", b"prompt_logprobs")
_KEYS: Final = np.array([list(name.ljust(16, b"\0")) for name in _KEY_NAMES], np.uint8)
_KEY_LENGTHS: Final = np.array([len(name) for name in _KEY_NAMES], np.int64)
_KEY_ROWS: Final = np.array([R_MAX_TOKENS, R_N, R_BEST_OF, R_LOGPROBS, R_PROMPT_LOGPROBS], np.int64)
_NONE: Final = np.frombuffer(b"None", np.uint8)
_TOKEN_IDS_KEY: Final = np.frombuffer(b"prompt_token_ids", np.uint8)
_TOKEN_IDS: Final = np.frombuffer(b" token ids>", np.uint8)


@compiled
def unusual(b: np.ndarray, body: int, stop: int) -> bool:
    """What ``line_records.UNUSUAL`` finds in ``b[body:stop]``: an escape byte, Ray's
    ``x across cluster]``, or a vLLM header (``LEVEL MM-DD HH:MM:SS ``), found at its first
    colon."""
    base = b.ctypes.data
    if find_byte(base, body, stop, 27) >= 0:
        return True
    # "x across cluster]", found at its "]" (a byte search: a few "]" in a line, most lines)
    n = _ACROSS.shape[0]
    c = find_byte(base, body + n - 1, stop, 93)
    while c >= 0:
        if is_at(b, c - n + 1, _ACROSS):
            return True
        c = find_byte(base, c + 1, stop, 93)
    c = find_byte(base, body, stop, 58)
    while c >= 0:
        if c - body >= 14 and c + 7 <= stop and _header_at_colon(b, body, c):
            return True
        c = find_byte(base, c + 1, stop, 58)
    return False


@compiled
def _header_at_colon(b: np.ndarray, body: int, c: int) -> bool:
    """A header's ``LEVEL MM-DD HH:MM:SS `` has its first colon at ``c`` (starting at or
    after ``body``)."""
    for k in (-8, -7, -5, -4, -2, -1, 1, 2, 4, 5):
        if not 48 <= b[c + k] <= 57:
            return False
    if b[c - 9] != 32 or b[c - 6] != 45 or b[c - 3] != 32 or b[c + 3] != 58 or b[c + 6] != 32:
        return False
    end = c - 9  # the level word ends here
    for word in (_LEVEL_INFO, _LEVEL_DEBUG, _LEVEL_ERROR, _LEVEL_WARNING, _LEVEL_CRITICAL):
        n = word.shape[0]
        if end - n >= body and is_at(b, end - n, word):
            return True
    return False


@compiled
def plain_id(b: np.ndarray, first: int, stop: int) -> bool:
    """``b[first:stop]`` is an id as the table's patterns take it whole, with nothing that could
    be told apart another way: printable ASCII, no space or comma, no "ALLOC_FAILED"."""
    if stop <= first:
        return False
    for r in range(first, stop):
        c = b[r]
        if c <= 32 or c >= 127 or c == 44:
            return False
        if c == 65 and r + 12 <= stop and is_at(b, r, _ALLOC_FAILED):
            return False
    return True


@compiled
def _params(b: np.ndarray, body: int, stop: int, params_first: bool, row: np.ndarray) -> None:
    """The values of the :data:`_KEYS` (``name=``, a word of its own, then digits or "None")
    in ``b[body:stop]`` into their rows of ``row``: the first where the params come first, else
    the last; -1 for null (and where a key is not there). One pass: each ``=`` is looked at once
    (a search per key cost a record five passes over its body)."""
    base = b.ctypes.data
    for f in range(_KEY_ROWS.shape[0]):
        row[_KEY_ROWS[f]] = -1
    found = 0  # a bit per key: a value taken (where the first counts, the others are not read)
    k = find_byte(base, body, stop, 61)
    while k >= 0:
        for f in range(_KEY_ROWS.shape[0]):
            n = _KEY_LENGTHS[f]
            start = k - n
            if start < body or (params_first and found & (1 << f)):
                continue
            if not is_at(b, start, _KEYS[f, :n]):
                continue
            c = b[start - 1]
            word = 48 <= c <= 57 or 65 <= c <= 90 or 97 <= c <= 122 or c == 95
            if start != body and word:
                continue
            value = _integer(b, k + 1, stop)
            if value != -2 or (k + 5 <= stop and is_at(b, k + 1, _NONE)):
                row[_KEY_ROWS[f]] = value if value != -2 else -1
                found |= 1 << f
            break  # the word before an "=" is one key at most
        k = find_byte(base, k + 1, stop, 61)


@compiled
def request_fields(
    b: np.ndarray,
    body: int,
    stop: int,
    id_start: int,
    colon: int,
    params_first: bool,
    row: np.ndarray,
) -> None:
    """A Received record's id, ``max_tokens`` and prompt token count into ``row``, as
    :mod:`.request_lines` reads them: the id without one final "."; the first ``max_tokens=``
    (a word of its own, then digits or "None") where the params come first, else the last; the
    ids listed after the last ``prompt_token_ids: [`` (to the first "]", digits, commas and
    spaces only), else the count a collector stated (``prompt_token_ids: <N token ids>``). -1
    stands for null."""
    row[R_ID_START] = id_start
    row[R_ID_STOP] = colon - 1 if b[colon - 1] == 46 else colon
    row[R_PARAMS_FIRST] = 1 if params_first else 0
    row[R_PROMPT_TOKENS] = -1
    _params(b, body, stop, params_first, row)
    # "prompt_token_ids: " then "[" (a list: the last one counts) or "<" (a stated count: the
    # first one counts, where no list does).
    listed = stated = -1
    k = _token_ids_key(b, body, stop)
    while k >= 0 and k + 18 < stop:
        if b[k + 18] == 91:
            listed = k
        elif b[k + 18] == 60 and stated < 0 and _stated_count(b, k + 19, stop) != -2:
            stated = k
        k = _token_ids_key(b, k + 1, stop)
    if listed >= 0:
        commas = 0
        chars = 0
        valid = True
        for r in range(listed + 19, stop):
            c = b[r]
            if c == 93:
                break
            chars += 1
            if c == 44:
                commas += 1
            elif c != 32 and not 48 <= c <= 57:
                valid = False
        if valid:
            row[R_PROMPT_TOKENS] = commas + 1 if chars else 0
            return
    if stated >= 0:
        row[R_PROMPT_TOKENS] = _stated_count(b, stated + 19, stop)


@compiled
def _token_ids_key(b: np.ndarray, start: int, stop: int) -> int:
    """Where the first ``prompt_token_ids: `` in ``b[start:stop]`` starts, -1 when there is
    none. Found at its colon, a byte search (a search for the whole word cost a record a slower
    pass over its body: most records hold a few colons)."""
    base = b.ctypes.data
    n: int = _TOKEN_IDS_KEY.shape[0]
    c = find_byte(base, start + n, stop, 58)
    while c >= 0:
        if c + 2 <= stop and b[c + 1] == 32 and is_at(b, c - n, _TOKEN_IDS_KEY):
            return c - n
        c = find_byte(base, c + 1, stop, 58)
    return -1


@compiled
def _stated_count(b: np.ndarray, v: int, stop: int) -> int:
    """``<digits> token ids>`` at ``v``: the count (-1 when it overflows), -2 when not there."""
    r = v
    while r < stop and 48 <= b[r] <= 57:
        r += 1
    if r == v or r + 11 > stop or not is_at(b, r, _TOKEN_IDS):
        return -2
    return _integer(b, v, stop)


@compiled
def _integer(b: np.ndarray, p: int, stop: int) -> int:
    """The decimal digits at ``p`` as a non-negative int64, as a cast reads them: -1 when they
    overflow it, -2 when there are none."""
    if p >= stop or not 48 <= b[p] <= 57:
        return -2
    value = 0
    limit = 9223372036854775807
    overflow = False
    while p < stop and 48 <= b[p] <= 57:
        d = b[p] - 48
        if value > (limit - d) // 10:
            overflow = True
        else:
            value = value * 10 + d
        p += 1
    return -1 if overflow else value


@compiled
def is_at(b: np.ndarray, p: int, word: np.ndarray) -> bool:
    """``word`` is at ``b[p:]`` (the caller checked there is room)."""
    for k in range(word.shape[0]):
        if b[p + k] != word[k]:
            return False
    return True


@compiled
def access_line(b: np.ndarray, p: int, e: int) -> bool:
    """Uvicorn's access line, strictly, at ``p``: ``INFO:`` (or ``WARNING:``, ``ERROR:``),
    spaces, the client, `` - "METHOD target HTTP/1.1" 200`` and letters of a reason phrase. In
    that form it holds no vLLM header and no text a record is told by."""
    q = p
    if e - q > 8 and b[q] == 73 and is_at(b, q, _INFO):
        q += 5
    elif e - q > 9 and b[q] == 69 and is_at(b, q, _ERROR):
        q += 6
    elif e - q > 11 and b[q] == 87 and is_at(b, q, _WARNING):
        q += 8
    else:
        return False
    if b[q] != 32:
        return False
    while q < e and b[q] == 32:
        q += 1
    client = q
    while q < e and 32 < b[q] < 127:
        q += 1
    if q == client or q + 5 > e or b[q + 1] != 45 or b[q + 2] != 32 or b[q + 3] != 34:
        return False
    q += 4
    method = q
    while q < e and 65 <= b[q] <= 90:
        q += 1
    if q == method or q >= e or b[q] != 32:
        return False
    q += 1
    target = q
    while q < e and 32 < b[q] < 127 and b[q] != 34:
        q += 1
    if q == target or q + 7 > e or not is_at(b, q, _HTTP):
        return False
    q += 6
    while q < e and (48 <= b[q] <= 57 or b[q] == 46):
        q += 1
    if q + 5 > e or b[q] != 34 or b[q + 1] != 32:
        return False
    q += 2
    for k in range(3):
        if not 48 <= b[q + k] <= 57:
            return False
    q += 3
    if q < e and b[q] != 32:
        return False
    for k in range(q, e):
        c = b[k]
        if not (65 <= c <= 90 or 97 <= c <= 122 or c in (32, 39, 45)):
            return False
    return True
