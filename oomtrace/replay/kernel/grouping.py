"""The requests table's rows grouped into requests in one pass: the counterpart, run in C
(``oomtrace/replay/_kernel.c``; these functions are its reference), of the Polars grouping in
:mod:`oomtrace.replay.workload`, for traces that replay in C.

On a day (8.2 million lifecycle rows, two million requests) Polars' grouping by request id costs
about two CPU seconds, most of it building a list of row numbers per group; here each row is
looked up once in an open-addressing table keyed by a 64-bit hash of its id (Polars hashes the
ids, a few hundredths of a second) and each request keeps only the row numbers the workload
reads. A request's rows come close together in time, so a small direct-mapped table of the ids
seen last answers most rows from the processor's cache; only a request's first row, and the
rare row whose slot another id took meanwhile, looks in the large table (on a day about a tenth
less CPU, side by side: the first rows' misses remain). A second hash with another seed is kept
per request and checked on every row: two ids that share the first hash (about one chance in
ten million on a day) are found, and the caller groups with Polars instead.

The rows must be in time order; the requests come out in the order of their first row, which is
therefore arrival order.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np

# A row's code: its event (the low bits) and which counts it states (a bit each).
E_OTHER: Final = 0
E_ADMITTED: Final = 1
E_FIRST_TOKEN: Final = 2
E_END: Final = 3  # finished or aborted
E_REJECTED: Final = 4
E_EVENT: Final = 7  # the event's bits
E_PROMPT: Final = 8  # states prompt_tokens
E_MAX: Final = 16  # states max_tokens
E_OUTPUT: Final = 32  # states output_tokens

# columns of the per-request matrix (a row per request): row numbers, -1 where none applies
G_FIRST: Final = 0  # the request's first row
G_PROMPT: Final = 1  # first row stating prompt_tokens
G_MAX: Final = 2  # first row stating max_tokens
G_OUTPUT: Final = 3  # last end row stating output_tokens
G_ADMITTED: Final = 4  # first admitted row
G_FIRST_TOKEN: Final = 5  # first first_token row
G_END: Final = 6  # last end row
G_REJECTED: Final = 7  # a rejected row (its last)
G_NCOL: Final = 8
# slots of the table of recently seen ids (16 bytes each: 256 KiB, within a core's cache)
RECENT_SLOTS: Final = 1 << 14


def new_table(rows: int) -> Any:
    """The empty id table of :func:`group_ids` for ``rows`` rows: per slot the key and its
    request number + 1, a power of two of slots, about half full on a day (four rows a request).
    Made by NumPy, not in the C code: NumPy's large arrays are zeroed lazily and backed by
    huge pages where the kernel offers them on request, so a day's 64 MiB table takes 32 page
    faults instead of 16,384 and its random lookups miss the TLB less (numbering a day's rows
    0.40-0.44 -> 0.31 CPU s, best of 3)."""
    size = 16
    while size < rows // 2:
        size *= 2
    return np.zeros((size, 2), dtype=np.uint64)


def group_ids(key: Any, check: Any, table: Any) -> Any:
    """Per row, its request's number (from 0, in the order of first appearance), and the number
    of requests; -1 requests where two rows share ``key`` but not ``check`` (a hash collision).
    ``table`` is :func:`new_table` of the rows (filled here: a table is used once)."""
    n = key.shape[0]
    recent = np.zeros((RECENT_SLOTS, 2), dtype=np.uint64)  # as table, direct-mapped
    checks = np.zeros(max(n, 1), dtype=np.uint64)
    out = np.empty(n, dtype=np.int32)
    state = np.zeros(3, dtype=np.int64)  # next row, requests, collided
    while state[0] < n:
        _fill(key, check, table, recent, checks, out, state)
        if state[0] < n:  # the table is half full: twice as large, rehashed
            table = _rehash(table, 2 * table.shape[0])
    return out, -1 if state[2] else state[1]


def _fill(key: Any, check: Any, table: Any, recent: Any, checks: Any, out: Any, state: Any) -> None:
    """Number the rows from ``state[0]`` on until the table is half full (``state``: next row,
    requests so far, whether a collision was seen). An id is looked up in ``recent`` first (a
    slot per key's low bits, overwritten by the last id looked up there: every id in it is in
    ``table``), then in ``table``. A slot's key and number share a cache line."""
    size = table.shape[0]
    mask = np.uint64(size - 1)
    recent_mask = np.uint64(recent.shape[0] - 1)
    groups = state[1]
    collided = state[2]
    i = state[0]
    n = key.shape[0]
    while i < n and 2 * groups <= size:
        k = key[i]
        r = np.int64(k & recent_mask)
        number = np.int64(recent[r, 1])
        found = number - 1 if number != 0 and recent[r, 0] == k else np.int64(-1)
        s = np.int64(k & mask)
        while found < 0:
            number = np.int64(table[s, 1])
            if number == 0:
                table[s, 0] = k
                table[s, 1] = groups + 1
                checks[groups] = check[i]
                found = groups
                groups += 1
            elif table[s, 0] == k:
                found = number - 1
            else:
                s = (s + 1) & (size - 1)
        recent[r, 0], recent[r, 1] = k, found + 1
        if checks[found] != check[i]:
            collided = 1
        out[i] = found
        i += 1
    state[0], state[1], state[2] = i, groups, collided


def _rehash(table: Any, size: int) -> Any:
    """The table's entries in a table of ``size`` slots."""
    new = np.zeros((size, 2), dtype=np.uint64)
    mask = np.uint64(size - 1)
    for j in range(table.shape[0]):
        if table[j, 1] != 0:
            s = np.int64(table[j, 0] & mask)
            while new[s, 1] != 0:
                s = (s + 1) & (size - 1)
            new[s, 0], new[s, 1] = table[j, 0], table[j, 1]
    return new


def group_rows(ids: Any, groups: int, code: Any) -> Any:
    """The per-request rows (column ``G_*`` of the matrix, a row per request: a request's
    entries share a cache line) of the rows numbered ``ids`` by :func:`group_ids`, from each
    row's ``code`` (``E_*``)."""
    out = np.full((groups, G_NCOL), -1, dtype=np.int32)
    for i in range(ids.shape[0]):
        g = ids[i]
        c = code[i]
        event = c & E_EVENT
        if out[g, G_FIRST] < 0:
            out[g, G_FIRST] = i
        if c & E_PROMPT and out[g, G_PROMPT] < 0:
            out[g, G_PROMPT] = i
        if c & E_MAX and out[g, G_MAX] < 0:
            out[g, G_MAX] = i
        if event == E_ADMITTED and out[g, G_ADMITTED] < 0:
            out[g, G_ADMITTED] = i
        elif event == E_FIRST_TOKEN and out[g, G_FIRST_TOKEN] < 0:
            out[g, G_FIRST_TOKEN] = i
        elif event == E_END:
            out[g, G_END] = i
            if c & E_OUTPUT:
                out[g, G_OUTPUT] = i
        elif event == E_REJECTED:
            out[g, G_REJECTED] = i
    return out
