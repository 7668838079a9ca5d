"""What each line of an SGLang log is: SGLang's ``[date time ranks]`` prefix split off the
message (:func:`split_prefix`, giving :data:`~.frames.PREFIX_PARTS`), and the kind of message it
may be, from cheap literal tests (:func:`classify`)."""

from __future__ import annotations

from typing import Final

import polars as pl

from oomtrace.ingest.frame_check import check_frame
from oomtrace.ingest.sglang import line_patterns as pat
from oomtrace.ingest.sglang.frames import PREFIX_PARTS
from oomtrace.ingest.torch.oom_phase import FRAME_LITERALS
from oomtrace.ingest.torch.oom_text import PREFILTER

_KV_POOL_OOM_LITERALS: Final = [
    " out of memory. Try to lower your batch size",
    "Out of memory. Try to lower your batch size",
    "No space left for only one request",
]
# The lines after it: "Try to allocate N tokens.", "Avaliable tokens: N" (0.4's spelling),
# "Available tokens: N (...)", "Available full tokens: N (...)".
_KV_POOL_FIGURE_LITERALS: Final = ["Try to allocate ", "liable tokens: ", "liable full tokens: "]
# The start-up refusal for want of KV room (line_patterns' ``no_kv_memory``): anywhere in the line.
_NO_KV_MEMORY_LITERALS: Final = [
    "Please try to increase --mem-fraction-static",
    "is larger than the profiled value -",
]


def split_prefix(lines: pl.Series) -> pl.DataFrame:
    """``line`` split into ``outer``, ``stamp``, ``ms``, ``ranks`` and ``msg`` (null where the line
    has no SGLang prefix). ``stamp`` is ``YYYY-MM-DD HH:MM:SS``, or ``HH:MM:SS`` where the release
    printed the time of day only.

    The fast path locates the prefix with one capture-free regex search and cuts with slices,
    several times faster than a capturing regex. Offsets from ``str.find`` count bytes while
    slices count characters, so lines with non-ASCII text take the capturing regex instead.
    Lines without SGLang's prefix are then tried as Python ``logging`` lines
    (:data:`~.line_patterns.PYTHON_LOGGING`).
    """
    line = pl.col("line")
    frame = pl.DataFrame(lines).with_columns(
        _ascii=(line.str.len_bytes() == line.str.len_chars()).fill_null(value=True)
    )
    fast = frame.filter("_ascii").with_columns(_pos=line.str.find(pat.PREFIX_FIND))
    fast = fast.with_columns(_rest=line.str.slice(pl.col("_pos")))
    # "[2025-02-27 04:46:39" has a date (its sixth character is "-"); "[04:46:39" does not
    width = pl.when(pl.col("_rest").str.slice(5, 1) == "-").then(19).otherwise(8)
    fast = fast.with_columns(_close=pl.col("_rest").str.find("]", literal=True), _w=width)
    inside = pl.col("_rest").str.slice(pl.col("_w") + 1, pl.col("_close") - pl.col("_w") - 1)
    fast = fast.select(
        "line",
        outer=line.str.slice(0, pl.col("_pos")),
        stamp=pl.col("_rest").str.slice(1, pl.col("_w")),
        ms=pl.when(inside.str.starts_with(".")).then(inside.str.slice(1, 3)),
        ranks=pl.when(inside.str.starts_with(".")).then(inside.str.slice(4)).otherwise(inside),
        msg=pl.col("_rest").str.slice(pl.col("_close") + 2),
    )
    if fast.height == frame.height:
        parts = fast
    else:
        slow = frame.with_row_index("_i").filter(~pl.col("_ascii"))
        slow = slow.with_columns(_p=line.str.extract_groups(pat.PREFIX)).unnest("_p")
        merged = pl.concat(
            [
                fast.with_columns(_i=frame.with_row_index("_i").filter("_ascii")["_i"]),
                slow.select("_i", *fast.columns),
            ],
            how="diagonal_relaxed",
        )
        parts = merged.sort("_i").select(fast.columns)
    return check_frame(_bare(_python_logging(parts)), PREFIX_PARTS, "SGLang line prefixes")


def _python_logging(parts: pl.DataFrame) -> pl.DataFrame:
    """Lines without SGLang's prefix read in the other forms SGLang's lines come in
    (:data:`~.line_patterns.OTHER_PREFIXES`: Python ``logging``'s own prefix, a format with the
    rank tag beside the source file, SGLang's prefix that lost its ``[``), the first that fits."""
    indexed = parts.with_row_index("_i")
    # only the lines SGLang's prefix did not cut (tracebacks, other output) are looked at
    bare = indexed.filter(pl.col("msg").is_null())
    bare = bare.filter(pl.col("line").str.contains(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:"))
    if bare.height == 0:
        return parts
    found: list[pl.DataFrame] = []
    for pattern in pat.OTHER_PREFIXES:
        fits = (
            bare.select("_i", _p=pl.col("line").str.extract_groups(pattern))
            .unnest("_p")
            .filter(pl.col("msg").is_not_null())
        )
        if fits.height:
            found.append(
                fits.select(
                    "_i",
                    _outer=pl.col("outer"),
                    _stamp=pl.concat_str(pl.col("date"), pl.lit(" "), pl.col("time")),
                    _ms=pl.col("ms"),
                    _ranks=pl.col("ranks").str.strip_chars()
                    if "ranks" in fits.columns
                    else pl.lit(None, pl.String),
                    _msg=pl.col("msg"),
                )
            )
            bare = bare.filter(~pl.col("_i").is_in(fits.get_column("_i").implode()))
    if not found:
        return parts
    read = pl.concat(found)
    joined = indexed.join(read, on="_i", how="left", maintain_order="left")
    return joined.select(
        "line",
        outer=pl.when(pl.col("_msg").is_not_null()).then(pl.col("_outer")).otherwise("outer"),
        stamp=pl.coalesce("stamp", "_stamp"),
        ms=pl.coalesce("ms", "_ms"),
        ranks=pl.coalesce("ranks", "_ranks"),
        msg=pl.coalesce("msg", "_msg"),
    )


def _bare(parts: pl.DataFrame) -> pl.DataFrame:
    """Lines still without a prefix that are one of SGLang's messages (:data:`.BARE`), as pasted
    into an issue without the time, or with the rank tag only: their message, and no stamp."""
    bare = pl.col("msg").is_null() & pl.col("line").str.contains_any(list(pat.BARE_STARTS))
    if not parts.select(bare.any()).item():
        return parts
    found = pl.when(bare).then(pl.col("line").str.extract_groups(pat.BARE))
    return (
        parts.with_columns(_b=found)
        .with_columns(
            ranks=pl.coalesce("ranks", pl.col("_b").struct.field("ranks")),
            msg=pl.coalesce("msg", pl.col("_b").struct.field("msg")),
        )
        .drop("_b")
    )


def classify() -> pl.Expr:
    """Each line's candidate kind from cheap literal tests (the message's first words), else
    ``torch_oom`` for any line that may hold a PyTorch OOM, else null.
    :meth:`~.log_parser._Acc._validated` then applies each kind's full pattern to its own lines
    only."""
    line, msg = pl.col("line"), pl.col("msg")
    choices = [
        pl.when(line.str.contains_any(_KV_POOL_OOM_LITERALS)).then(pl.lit("kv_pool_oom")),
        pl.when(line.str.contains_any(_KV_POOL_FIGURE_LITERALS)).then(pl.lit("kv_pool_figures")),
        pl.when(line.str.contains_any(_NO_KV_MEMORY_LITERALS)).then(pl.lit("no_kv_memory")),
    ]
    for kind in pat.KINDS:
        if kind.starts:
            cheap = pl.any_horizontal([msg.str.starts_with(word) for word in kind.starts])
            choices.append(pl.when(cheap).then(pl.lit(kind.name)))
    choices.append(pl.when(line.str.contains(PREFILTER)).then(pl.lit("torch_oom")))
    # a traceback's frame that says what the engine was doing (oomtrace/ingest/torch/oom_phase.py)
    choices.append(pl.when(line.str.contains_any(list(FRAME_LITERALS))).then(pl.lit("oom_phase")))
    return pl.coalesce(choices)
