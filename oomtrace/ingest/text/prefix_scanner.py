"""A compiled reader of the outer prefixes that supervisors put before a log line's own text:
the ``kubectl logs --timestamps`` / ``docker logs -t`` time (RFC 3339 in UTC, ``Z``, up to nine
fraction digits) and the process prefixes of vLLM and Ray (``(name pid=N[, ip=A])``, coloured
or not, one after another), read as :mod:`.outer_prefixes` reads them.

For a compiled line scanner (numba): :func:`outer_prefix` reads one line's prefixes, and the
forms it does not take (another time form, a name with parentheses, colons or non-ASCII bytes)
are the vectorised reader's. A log repeats its prefixes from line to line: the ``cache`` keeps
the last line's minute and process prefixes, so most lines compare bytes instead of parsing.
"""

# ruff: noqa: PLR0912, PLR0915

from __future__ import annotations

from typing import Final

import numpy as np

from oomtrace.ingest.text.byte_search import compiled

NO_TIME: Final = np.iinfo(np.int64).min
# What a line leaves the next, and what outer_prefix read: where the last outer time starts and
# its minute in ns, where the last process prefixes start and their length, the time read.
C_TS: Final = 0
C_MINUTE: Final = 1
C_PROC: Final = 2
C_PROC_LEN: Final = 3
C_TIME: Final = 4
CACHE: Final = 5


def new_cache() -> np.ndarray:
    """A cache for the first line of a text."""
    cache = np.full(CACHE, -1, np.int64)
    cache[C_PROC_LEN] = 0
    cache[C_TIME] = NO_TIME
    return cache


@compiled
def past_colour(b: np.ndarray, r: int, e: int) -> int:
    """Where an ANSI colour code (``ESC [ digits ; m``) at ``b[r]`` ends; ``r`` when none starts
    there, -1 when one starts but is not a colour code."""
    if r >= e or b[r] != 27:
        return r
    r += 1
    if r >= e or b[r] != 91:
        return -1
    r += 1
    while r < e and (48 <= b[r] <= 57 or b[r] == 59):
        r += 1
    if r >= e or b[r] != 109:
        return -1
    return r + 1


@compiled
def outer_prefix(b: np.ndarray, p: int, e: int, cache: np.ndarray) -> int:
    """Where the outer prefixes of the line ``b[p:e]`` end (``p`` when it has none), with the
    time they state in ``cache[C_TIME]`` (ns since the epoch; :data:`NO_TIME` when none); -1
    when the line starts like a prefix of a form this reader leaves to the vectorised one."""
    cache[C_TIME] = NO_TIME
    # --- an RFC 3339 UTC time: 2025-06-02T08:00:00[.fraction]Z (kubectl, docker) --------
    q = p
    if e - p >= 22 and b[p + 4] == 45 and b[p + 7] == 45 and b[p + 10] == 84:
        same = cache[C_TS] >= 0
        if same:
            for k in range(17):
                if b[p + k] != b[cache[C_TS] + k]:
                    same = False
                    break
        if not same:
            ok = b[p + 13] == 58 and b[p + 16] == 58
            for k in (0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15):
                ok = ok and 48 <= b[p + k] <= 57
            if not ok:
                return -1
            year = (b[p] - 48) * 1000 + (b[p + 1] - 48) * 100 + (b[p + 2] - 48) * 10
            year += b[p + 3] - 48
            month = (b[p + 5] - 48) * 10 + b[p + 6] - 48
            day = (b[p + 8] - 48) * 10 + b[p + 9] - 48
            hour = (b[p + 11] - 48) * 10 + b[p + 12] - 48
            minute = (b[p + 14] - 48) * 10 + b[p + 15] - 48
            leap = (year % 4 == 0 and year % 100 != 0) or year % 400 == 0
            days_in = 30 if month in (4, 6, 9, 11) else 31
            if month == 2:
                days_in = 29 if leap else 28
            if year < 1970 or month < 1 or month > 12 or day < 1 or day > days_in:
                return -1
            if hour > 23 or minute > 59:
                return -1
            # days since 1970-01-01 (H. Hinnant's days_from_civil)
            y = year - (month <= 2)
            era = y // 400
            yoe = y - era * 400
            doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
            days = era * 146097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719468
            cache[C_MINUTE] = (days * 86400 + hour * 3600 + minute * 60) * 1_000_000_000
            cache[C_TS] = p
        s1, s2 = b[p + 17], b[p + 18]
        if not (48 <= s1 <= 53 and 48 <= s2 <= 57):
            return -1
        q = p + 19
        frac = 0
        digits = 0
        if b[q] == 46 or b[q] == 44:
            q += 1
            while q < e and 48 <= b[q] <= 57 and digits < 10:
                frac = frac * 10 + b[q] - 48
                digits += 1
                q += 1
            if digits == 0 or digits > 9:
                return -1
        for _ in range(9 - digits):
            frac *= 10
        if q + 1 >= e or b[q] != 90 or b[q + 1] != 32:
            return -1
        cache[C_TIME] = cache[C_MINUTE] + ((s1 - 48) * 10 + s2 - 48) * 1_000_000_000 + frac
        q += 2
    elif e - p >= 11 and b[p + 4] == 45 and 48 <= b[p] <= 57:
        return -1  # some other form of time: the general reader's
    # --- process prefixes: (name pid=N[, ip=A]) with or without colour codes -----------
    first = q
    if cache[C_PROC_LEN] and e - q > cache[C_PROC_LEN]:
        same = True
        for k in range(cache[C_PROC_LEN]):
            if b[q + k] != b[cache[C_PROC] + k]:
                same = False
                break
        if same:
            q += cache[C_PROC_LEN]
    while q < e:
        r = past_colour(b, q, e)
        if r < 0 or r >= e or b[r] != 40:
            break
        pid = -1  # the last "pid=" in the name
        r += 1
        name = r
        while r < e and b[r] != 41:
            c = b[r]
            if c in (40, 27, 58) or c >= 128:
                r = e
                break
            if (
                c == 61
                and r - name >= 3
                and b[r - 1] == 100
                and b[r - 2] == 105
                and b[r - 3] == 112
            ):
                pid = r + 1
            r += 1
        if r >= e or pid < 0:
            break
        close = r
        d = pid
        while d < close and 48 <= b[d] <= 57:
            d += 1
        if d == pid:
            break
        if d < close:  # ", ip=" then [0-9A-Za-z.:-]+ up to the ")"
            if close - d < 7 or b[d] != 44 or b[d + 1] != 32 or b[d + 2] != 105:
                break
            if b[d + 3] != 112 or b[d + 4] != 61:
                break
            ok = True
            for k in range(d + 5, close):
                c = b[k]
                ok = ok and (48 <= c <= 57 or 65 <= c <= 90 or 97 <= c <= 122 or c in (45, 46, 58))
            if not ok:
                break
        r = past_colour(b, close + 1, e)
        if r < 0 or r >= e or b[r] != 32:
            break
        q = r + 1
    if q > first:
        cache[C_PROC] = first
        cache[C_PROC_LEN] = q - first
    return q
