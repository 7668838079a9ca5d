"""vLLM's own header (``INFO 06-02 08:00:00 [file.py:12] ``) of each record, read after the
outer prefixes: level, printed date and time, whether the file name is bracketed (0.8+), and
its length (where the message starts).

A standard header (ASCII file name, whole seconds: what vLLM prints) is confirmed by a capture-free
match and read at the byte offsets its level's length fixes, with integer arithmetic on two 8-byte
words; any other header is captured by :data:`~oomtrace.ingest.vllm.line_patterns.HEADER`.
``tests/unit/ingest/vllm/test_chunk_readers.py`` holds the two readings to the same result on
generated headers of every shape.
"""

from __future__ import annotations

from typing import Final

import polars as pl

from oomtrace.ingest.frame_check import check_frame
from oomtrace.ingest.text.yearless_clock import month_day_expr
from oomtrace.ingest.vllm.frames import HEADER_COLUMNS
from oomtrace.ingest.vllm.line_patterns import HEADER

# Where the engine header starts (capture-free); confirmed by reading the window it points at.
# A logging format that pads the level to a width ("INFO  09-09 05:27:57", vllm PR 24505) puts
# more than one space after it; such a header is read by the capturing pattern.
HEADER_AT: Final = (
    r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) +[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}"
)
# What read_header adds (frames.HEADER_COLUMNS): length in characters (null: no header), level,
# bracket, month*100+day, seconds of the day.
HEADER_FIELDS: Final = tuple(HEADER_COLUMNS)
# The header must fit in this many characters from where it starts.
HEADER_SLICE: Final = 96
_HEADER_WHOLE: Final = "^(?P<hdr>" + HEADER.removeprefix("^") + ")"
# Read at fixed offsets: one space after the level.
_SIMPLE_HEADER: Final = "^" + HEADER_AT.replace(" +", " ", 1) + r" \[?[A-Za-z0-9_.\-]+:[0-9]+\] "
_LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_LEVEL_WIDTH: Final = {ord(level[0]): len(level) for level in _LEVELS}
_LEVEL_NAME: Final = {ord(level[0]): level for level in _LEVELS}


def read_header(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` (``line``, ``header_at`` where :data:`HEADER_AT` was found, ``prefix_text`` the
    text before it, ``record_seq``) with :data:`HEADER_FIELDS` of the header starting at
    ``prefix_text``'s end."""
    text = pl.col("line").str.slice(pl.col("prefix_text").str.len_chars(), HEADER_SLICE)
    frame = frame.with_columns(header_window=text).with_columns(
        simple_header=pl.col("header_window").str.contains(_SIMPLE_HEADER).fill_null(value=False)
    )
    captured = pl.col("header_at").is_not_null() & ~pl.col("simple_header")
    if not frame.select(captured.any()).item():
        read = _simple_fields(frame)
    else:
        simple = _simple_fields(frame.filter(~captured))
        other = captured_fields(frame.filter(captured))
        read = pl.concat([simple, other.select(simple.columns)]).sort("record_seq")
    return check_frame(read, HEADER_COLUMNS, "vLLM header fields", at_least=True)


def _simple_fields(frame: pl.DataFrame) -> pl.DataFrame:
    raw = pl.col("header_window").cast(pl.Binary)
    simple = pl.col("simple_header")
    frame = frame.with_columns(_b=raw.bin.get(0, null_on_oob=True)).with_columns(
        _w=pl.col("_b").replace_strict(_LEVEL_WIDTH, default=None, return_dtype=pl.Int64)
    )
    # Two little-endian words: "MM-DD HH" after the level, then ":MM:SS [" (or ":MM:SS x").
    frame = frame.with_columns(
        _d=raw.bin.slice(pl.col("_w") + 1, 8).bin.reinterpret(dtype=pl.UInt64),
        _t=raw.bin.slice(pl.col("_w") + 9, 8).bin.reinterpret(dtype=pl.UInt64),
    )
    date, time = pl.col("_d"), pl.col("_t")

    def two(word: pl.Expr, at: int) -> pl.Expr:
        return _byte(word, at) * 10 + _byte(word, at + 1) - 11 * 48

    return frame.with_columns(
        # An ASCII header: its length in bytes is its length in characters.
        header_chars=pl.when(simple)
        .then(pl.col("header_window").str.find("] ", literal=True) + 2)
        .cast(pl.UInt32),
        header_level=pl.when(simple).then(
            pl.col("_b").replace_strict(_LEVEL_NAME, default=None, return_dtype=pl.String)
        ),
        header_bracketed=(simple & (_byte(time, 7) == ord("["))).fill_null(value=False),
        header_month_day=pl.when(simple).then(two(date, 0) * 100 + two(date, 3)).cast(pl.Int32),
        header_second_of_day=pl.when(simple)
        .then(two(date, 6) * 3600 + two(time, 1) * 60 + two(time, 4))
        .cast(pl.Int32),
    ).drop("header_window", "simple_header", "_b", "_w", "_d", "_t")


def _byte(word: pl.Expr, at: int) -> pl.Expr:
    shift: int = 256**at
    return (word // shift % 256).cast(pl.Int32)


def captured_fields(frame: pl.DataFrame) -> pl.DataFrame:
    """:data:`HEADER_FIELDS` by capturing HEADER on ``header_window``, the window after
    ``prefix_text``."""
    frame = frame.with_columns(_h=pl.col("header_window").str.extract_groups(_HEADER_WHOLE))
    h = pl.col("_h").struct.field
    md, hms = h("md"), h("hms")
    return frame.with_columns(
        header_chars=h("hdr").str.len_chars().cast(pl.UInt32),
        header_level=h("level"),
        header_bracketed=h("br").is_not_null(),
        header_month_day=month_day_expr(
            md.str.head(2).cast(pl.Int32), md.str.tail(2).cast(pl.Int32)
        ),
        header_second_of_day=(
            hms.str.head(2).cast(pl.Int32) * 3600
            + hms.str.slice(3, 2).cast(pl.Int32) * 60
            + hms.str.tail(2).cast(pl.Int32)
        ),
    ).drop("header_window", "simple_header", "_h")
