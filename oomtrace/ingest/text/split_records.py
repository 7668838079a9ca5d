"""Records split across lines by whoever showed them, found and joined back: the shared step
every line parser can run on a chunk before reading it.

Two ways a record comes apart (issue 17's "shared text shapes"):

* **fixed width**: a terminal, a pager or ``docker logs`` piped through a tool that folds at N
  columns breaks every longer line at exactly N characters, mid-word ("generation throughpu" /
  "t: 569.6 tokens/s"). Every broken line is then exactly as long as the longest line of the
  chunk; the piece after it does not start a record. The pieces are joined with nothing between.
* **word wrap**: an issue form, an e-mail or a person re-flowing a pasted message breaks it at a
  space, at no fixed width ("GPU 0" / "has a total capacity"). Only a record the parser names as
  one that may be re-flowed (``opens``: a PyTorch OOM message, say) is followed onto the lines
  after it, and they are joined with a space.

Records glued onto one line (a lost newline) are the opposite case; each parser splits those at
its own record heads (``oomtrace/ingest/vllm/line_records.py``, ``_split_glued``).

Usage (``starts`` and ``opens`` are regexes over the raw line; what starts a record is the
parser's to say)::

    split = find_split_records(lines, starts=r"^\\d{4}-\\d\\d-\\d\\dT|^(INFO|ERROR) ")
    if split.joined:
        lines = split.lines  # each record whole on its first line, its other lines ""

Lines stay where they were (a continuation becomes an empty line), so line numbers and counts
do not move; ``continued`` says which lines were continuations, for the parser to count them as
read into the record before rather than as blank.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import polars as pl

# What begins a record in most logs, for parsers with no sharper test: a date or a syslog time,
# a level word, a Python exception or traceback head, a bracketed or parenthesised prefix.
LOG_RECORD_START: Final = (
    r"^(?:\d{4}-\d\d-\d\d[T ]|[A-Za-z][a-z]{2} [ \d]\d \d\d:|(?:DEBUG|INFO|WARNING|WARN|ERROR|"
    r"CRITICAL|FATAL)\b|[\w.]+(?:Error|Exception)\b|Traceback|\[|\()"
)
# A fold narrower than this is no terminal's; a shorter line before a piece is no wrapped line.
MIN_WIDTH: Final = 60
# Re-flowing: wider than this, a line broken once was folded by a terminal, not re-flowed.
MIN_FOLDED: Final = 100
# Word wrap: the line before a continuation is at least this long (a short line ended there).
MIN_WRAPPED: Final = 40
# Fixed width: at least this many lines end at the fold and go on (one could be chance).
MIN_FOLDS: Final = 2


@dataclass(frozen=True)
class SplitRecords:
    """``lines`` with every split record joined on its first line (its other lines empty);
    ``continued`` (bool) marks those other lines; ``joined`` counts them; ``width`` is the fold
    found (None: none, or word wrap only)."""

    lines: pl.Series
    continued: pl.Series
    joined: int
    width: int | None


def find_split_records(
    lines: pl.Series, *, starts: str, opens: str | None = None, widest: int = 0
) -> SplitRecords:
    """Find and join the records of ``lines`` split at a fixed width or (after a line matching
    ``opens``) re-flowed at spaces. ``starts`` matches a line that begins a record: such a line
    is never a continuation. ``widest``: where ``lines`` are some of a chunk's (those a faster
    reader left), the characters of the chunk's longest line, the only width a fold can have.
    Costs two length scans over the chunk when nothing is split."""
    frame = pl.DataFrame({"line": lines}).with_columns(n=pl.col("line").str.len_chars())
    none = SplitRecords(lines, pl.Series("continued", [False] * lines.len()), 0, None)
    if frame.height < 2:
        return none
    width = max(int(frame.select(pl.col("n").max().fill_null(0)).item()), widest)
    # Cheap first: a fold leaves several lines of the very same, longest, length.
    folds = int((frame.get_column("n") == width).sum()) if width >= MIN_WIDTH else 0
    if folds < MIN_FOLDS and opens is None:
        return none
    line, n = pl.col("line"), pl.col("n")
    # A fold may fall just before a space; an indented line after a re-flowed one is code. One
    # that falls just after a space, before a bracket or a parenthesis (vLLM's "[file.py:N]",
    # a process prefix), leaves a piece that reads like a record's start: after a line of the
    # fold's width that ends in a space (a record ends with none), it is a piece.
    cut_after_space = ((n.shift(1) == width) & line.shift(1).str.ends_with(" ")).fill_null(
        value=False
    )
    start = line.str.contains(starts) & ~(line.str.contains(r"^[\[(]") & cut_after_space)
    start = start.fill_null(value=False)
    frame = frame.with_columns(start=start).with_columns(piece=(n > 0) & ~pl.col("start"))
    # A fold breaks a record: the line before the piece starts one, or is itself a piece of a
    # line folded more than once (so headerless text whose longest lines tie is left alone).
    broken = pl.col("start").shift(1) | (n.shift(2) == width)
    fixed = pl.col("piece") & (n.shift(1) == width) & broken
    continued = frame.select(fixed.fill_null(value=False)).to_series()
    spaced = pl.Series([False] * frame.height)
    if int(continued.sum()) < MIN_FOLDS:
        continued = pl.Series([False] * frame.height)
        width = 0
    if not continued.any() and opens is not None:
        continued = _reflowed(frame, opens)
        # A break after a line wider than anyone re-flows text is a terminal's or a form's fold
        # (mid-word); after a narrower one it was a space.
        folded = n.shift(1) >= MIN_FOLDED
        spaced = frame.select(~folded.fill_null(value=False)).to_series() & continued
    joined = int(continued.sum())
    if not joined:
        return none
    return SplitRecords(
        _join(lines, continued, spaced), continued.alias("continued"), joined, width or None
    )


def _reflowed(frame: pl.DataFrame, opens: str) -> pl.Series:
    """Lines that go on a record opened by a line matching ``opens``: runs of pieces, each after
    a line long enough to have been wrapped, whose line before the run opens a record."""
    after_long = pl.col("n").shift(1) >= MIN_WRAPPED
    # Aligned columns ("Requested     : 320.00 MiB") are a table printed so, never prose re-flowed.
    line = pl.col("line")
    prose = ~line.str.contains("  ", literal=True) & ~line.str.contains(r"^\s")
    cand = (pl.col("piece") & after_long & prose).fill_null(value=False)
    run = (~cand).cum_sum()
    head_opens = pl.col("line").str.contains(opens).fill_null(value=False).first().over(run)
    return frame.select((cand & head_opens).alias("continued")).to_series()


def _join(lines: pl.Series, continued: pl.Series, spaced: pl.Series) -> pl.Series:
    """Each record's lines joined on its first (a ``spaced`` line after a space); the others
    empty."""
    frame = pl.DataFrame({"line": lines, "c": continued, "s": spaced}).with_columns(
        record=(~pl.col("c")).cum_sum()
    )
    text = pl.when(pl.col("s")).then(pl.lit(" ") + pl.col("line")).otherwise(pl.col("line"))
    whole = text.fill_null("").str.join("").over("record")
    out = frame.select(pl.when(pl.col("c")).then(pl.lit("")).otherwise(whole).alias(lines.name))
    return out.to_series()
