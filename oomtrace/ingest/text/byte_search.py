"""Byte searches for compiled line scanners: the C library's ``memchr`` (vector instructions,
several bytes a cycle), called from numba-compiled code.

A scanner walks a chunk's lines one by one; finding each line's end, or the byte a word is told
by in a long line (its colon, its "="), byte by byte costs it a branch a byte. This is the C
library's own search, bound by name when
the scanner is compiled (so the compiled code stays cacheable), on addresses: a call passes
integers only, so it costs no reference counting however often it is made.

:func:`available` says whether this platform's C library can be bound so (Linux and macOS:
where it cannot, parsers read their input without a compiled scanner).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, Final, TypeVar, cast

import numpy as np
from numba import njit, types

F = TypeVar("F", bound=Callable[..., Any])

# Typed for numba, which calls it; to mypy it is opaque.
_MEMCHR: Final[Any] = types.ExternalFunction(
    "memchr", types.intp(types.intp, types.intc, types.uintp)
)


def available() -> bool:
    """Whether the C library's ``memchr`` can be bound by name (not on Windows)."""
    return sys.platform != "win32"


def compiled(func: F) -> F:
    """numba's njit (cached on disk, the GIL released), typed so mypy keeps the signature."""
    return cast("F", njit(cache=True, nogil=True, boundscheck=False)(func))


@compiled
def find_byte(base: int, start: int, stop: int, byte: int) -> int:
    """The offset of the first ``byte`` in ``[start, stop)`` of the text at address ``base``;
    -1 when there is none."""
    if stop <= start:
        return -1
    found = _MEMCHR(base + start, byte, stop - start)
    return -1 if found == 0 else found - base


@compiled
def count_lines(text: np.ndarray) -> int:
    """How many lines ``text`` holds (a last line without a newline counts)."""
    base = text.ctypes.data
    size = text.shape[0]
    start = 0
    count = 0
    while start < size:
        end = find_byte(base, start, size, 10)
        count += 1
        if end < 0:
            break
        start = end + 1
    return count
