"""The lines of a vLLM log that nothing was read from, counted by reason, each reason with a
first example that holds no prompt or output text (``PRIVATE_MARKERS``)."""

from __future__ import annotations

import re
from typing import Final

import polars as pl

from oomtrace.diagnostics import WITHHELD
from oomtrace.ingest.text.outer_prefixes import ANSI, OUTER
from oomtrace.ingest.vllm.line_patterns import PRIVATE_MARKERS

UNKNOWN_STATS: Final = "stats line in an unrecognised shape"
UVICORN_LINE: Final = "uvicorn access line (no timestamp; not used)"
NOT_USED: Final = "vLLM record of a kind not used"
NO_HEADER: Final = "line without a vLLM header (traceback, progress bar or print)"
EMPTY: Final = "empty line"
# Unanchored on purpose: whatever prefix precedes it, this text is an access line.
UVICORN: Final = r"(?:INFO|WARNING|ERROR):\s+\S+ - \""
_OUTER: Final = re.compile("^(?:" + OUTER + ")")
_ANSI: Final = re.compile(ANSI)
PRIVATE: Final = "|".join(re.escape(marker) for marker in PRIVATE_MARKERS)
_PRIVATE_RE: Final = re.compile(PRIVATE)
# How many lines of each skip reason are looked at for a first example free of private text.
EXAMPLE_HEAD: Final = 64

Skipped = tuple[str, int, str]


def skipped_lines(
    unused: pl.DataFrame, odd: pl.Series, *, more: dict[str, int] | None = None
) -> list[Skipped]:
    """Every record not put to use (``record_seq``, ``line``, ``has_header``), under one reason
    each, with a safe first example; reasons in the order their first line comes in ``unused``.
    ``odd`` are the stats records no stats shape matched. ``more`` adds lines of a reason that
    ``unused`` holds only the first :data:`EXAMPLE_HEAD` of (the scanner's access lines)."""
    if unused.height == 0:
        return []
    line = pl.col("line")
    unused = unused.with_row_index("_i")
    if odd.len():
        unused = unused.with_columns(_odd=pl.col("record_seq").is_in(odd.implode()))
    else:
        unused = unused.with_columns(_odd=pl.lit(value=False))
    # Only lines without an engine header can be access lines, blank or headerless: the tests
    # for those run on them alone.
    plain = pl.col("_odd") | pl.col("has_header")
    bare = unused.filter(~plain).with_columns(
        _reason=pl.when(line.str.contains(UVICORN))
        .then(pl.lit(UVICORN_LINE))
        .when(line.str.contains(r"^\s*$"))
        .then(pl.lit(EMPTY))
        .otherwise(pl.lit(NO_HEADER))
    )
    known = unused.filter(plain).with_columns(
        _reason=pl.when(pl.col("_odd")).then(pl.lit(UNKNOWN_STATS)).otherwise(pl.lit(NOT_USED))
    )
    groups = [
        part.group_by("_reason").agg(pl.len(), pl.col("_i").first(), _head=line.head(EXAMPLE_HEAD))
        for part in (known, bare)
        if part.height
    ]
    found = []
    for why, count, _, head in pl.concat(groups).sort("_i").iter_rows():
        example = next((text for text in head if not _PRIVATE_RE.search(text)), None)
        if example is None and count > len(head):
            # Every line in the head may hold text: look further (rare).
            whole = pl.concat([known, bare]).filter(pl.col("_reason") == why).sort("_i")
            example = whole.select(line.filter(~line.str.contains(PRIVATE)).first()).item()
        shown = WITHHELD if example is None else _OUTER.sub("", _ANSI.sub("", example), 1)
        found.append((why, count + (more or {}).get(why, 0), shown))
    return found


def example_rows(lines: pl.Series) -> pl.Series:
    """Which of ``lines`` (all of one reason, in file order) to keep to choose that reason's
    example from: the first :data:`EXAMPLE_HEAD`, and the first safe one after them when none
    of those is safe (what :func:`skipped_lines` would look at)."""
    head = lines.head(EXAMPLE_HEAD)
    rows = pl.int_range(0, head.len(), eager=True)
    if lines.len() <= EXAMPLE_HEAD or not head.str.contains(PRIVATE).all():
        return rows
    later = lines.slice(EXAMPLE_HEAD).str.contains(PRIVATE).not_().arg_true().head(1)
    return pl.concat([rows, later + EXAMPLE_HEAD])
