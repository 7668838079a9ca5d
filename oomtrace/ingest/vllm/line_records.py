"""From raw lines to vLLM records, one chunk at a time and with no state shared between chunks
(so chunks can be read side by side): prefixes and the engine header read, candidate records
cut out, glued records split, each record's printed time kept for the clock.

Speed notes (``benchmarks/ingest_bench.py``; a 24 MiB chunk holds about 80k lines): a Polars
string operation costs some 20-100 ns per row whatever it does, a capturing regex several times
that, so the cost is the number of operations per row. Every line gets three capture-free scans
(where the header is, and the two literal sets); only candidate lines are parsed further; the
header is read at fixed offsets (:mod:`.log_header`); the rare cases (colour codes past the
prefix, Ray's repeat suffix, glued records) are found with one scan of the bodies and handled on
those rows alone. Eager Polars computes a sub-expression used twice in one call twice, so a
shared step is a column of its own.

A record keeps its time as printed (``printed_month_day`` = month*100+day, ``printed_second_of_day``
= seconds of the day) and a year offset local to its chunk (``year_offset``); ``chunk`` says which
chunk, so that :func:`oomtrace.ingest.text.yearless_clock.combine` can add each chunk's base once
the whole file is read. Lines without a header of their own (traceback lines, prints) take the time
of the record before them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from typing import Final

import polars as pl

from oomtrace.ingest.frame_check import check_frame
from oomtrace.ingest.text.input_file import TextChunk
from oomtrace.ingest.text.outer_prefixes import (
    ANSI,
    REPEATED,
    REPEATED_LITERAL,
    PrefixKind,
    detect_kinds,
    outer_columns,
    outer_pattern,
    parse_iso,
    time_sources,
)
from oomtrace.ingest.text.split_records import LOG_RECORD_START, find_split_records
from oomtrace.ingest.text.timestamps import glog_clock
from oomtrace.ingest.torch.oom_text import OOM_SHAPES
from oomtrace.ingest.vllm.frames import RECORD_TIME, RECORDS, SCANNED_RUNS, UNPARSED_LINES
from oomtrace.ingest.vllm.line_patterns import GLUED
from oomtrace.ingest.vllm.log_header import HEADER_AT, HEADER_FIELDS, read_header
from oomtrace.ingest.vllm.record_times import ChunkInfo, place, place_with
from oomtrace.ingest.vllm.skipped_lines import UVICORN
from oomtrace.schema import TS

TIME_COLUMNS: Final = tuple(RECORD_TIME)
FLAG_NAMES: Final = ("has_literal", "may_be_oom")
_LEVEL_TS: Final = HEADER_AT + " "
_TS_ONLY: Final = frozenset({"timestamp", "process", "nested"})
# What a record's body may hold that needs a second look: colour codes, Ray's repeat suffix, a
# record glued on.
UNUSUAL: Final = "\x1b|" + re.escape(REPEATED_LITERAL) + "|" + _LEVEL_TS
_SAMPLE: Final = 256
# What begins a record, so never goes on the one before: vLLM's header anywhere on the line, a
# supervisor's date at its start, or the prefix vLLM puts on every line a worker process prints
# ("(EngineCore pid=316) ", a traceback's lines included), so a folded traceback is joined too.
RECORD_START: Final = (
    HEADER_AT
    + r"|^\d{4}-\d\d-\d\d[T ]|^[A-Z][a-z]{2} [ \d]\d \d\d:|^\([\w ]+ pid=\d+(?:, ip=[^)]+)?\) "
)
# A bare record's lead: the indent of where it was pasted, then a header whose date and time the
# poster replaced by "..." ("INFO ... [gpu_worker.py:489] ") or left out ("INFO    [x.py:9]  "),
# or the "[file.py:N] " of a header cut short; and the Markdown a poster wrapped the record in
# ("**Sequence group ... preempted ...**" in bold, or as inline code), with its closing mark.
_LEVEL: Final = r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)[ \t]+"
_FILE_LINE: Final = r"\[[\w./-]+\.py:\d+\][ \t]+"
_MARKUP: Final = r"(?:\*\*|__|`)"
_BARE_LEAD: Final = (
    rf"^[ \t]*{_MARKUP}?(?:{_LEVEL}(?:\.{{3}}|\u2026)[ \t]+(?:{_FILE_LINE})?"
    rf"|{_LEVEL}{_FILE_LINE}|{_FILE_LINE})?|{_MARKUP}[ \t]*$"
)


def _plain(pattern: str) -> str:
    """``pattern`` with its named groups made non-capturing (for capture-free matching)."""
    return re.sub(r"\(\?P<\w+>", "(?:", pattern)


@cache
def _prefix_test(kinds: frozenset[PrefixKind]) -> str:
    return "^" + _plain(outer_pattern(kinds)) + "$"


def build_records(
    lines: pl.DataFrame,
    flags: Mapping[str, pl.Expr],
    *,
    chunk: int,
    first_line: int,
    tz: str,
    scanned: pl.DataFrame | None = None,
    widest: int = 0,
) -> tuple[pl.DataFrame, pl.DataFrame, ChunkInfo, pl.DataFrame | None]:
    """One chunk read: ``(records, rest, info, scanned)``.

    ``lines`` are the chunk's lines from ``first_line`` on, or (with a ``record_seq`` column)
    the lines of it the scanner left (:mod:`._line_scan`); ``scanned`` are the runs of the
    records it read (:data:`~.frames.SCANNED_RUNS`), placed here with the others and given back
    with ``year_offset``; ``widest``, the characters of the chunk's longest line where the scanner
    took it (the lines of a fold are as long as the chunk's longest, not as the longest left).

    ``records`` (:data:`~.frames.RECORDS`) are the lines that were parsed, in file order: the
    printed time (:data:`~.frames.RECORD_TIME`), ``line``,
    ``level``, ``bracketed``, the boolean ``flags`` (expressions over the raw ``line``; a record is
    a candidate, ``is_candidate``, when any is true) and, for candidates only, ``body`` (the text
    after the header). ``rest`` (``record_seq``, ``line``, ``has_header``) are the lines nothing
    needed parsed, kept only to be counted."""
    info = ChunkInfo()
    if "arrival_ts" not in lines.columns:
        lines = lines.with_columns(arrival_ts=pl.lit(None, TS))
    line = pl.col("line")
    if "record_seq" not in lines.columns:
        seq = pl.int_range(first_line, first_line + lines.height, dtype=pl.Int64) * 256
        lines = lines.with_columns(record_seq=seq)
    split = find_split_records(lines.get_column("line"), starts=RECORD_START, widest=widest)
    if split.joined:
        # Records folded at a fixed width: read whole on their first line; the pieces counted.
        lines = lines.with_columns(split.lines).filter(~split.continued)
        info.rejoined = split.joined
    frame = lines.with_columns(
        header_at=line.str.find(HEADER_AT),
        **flags,
    ).with_columns(is_candidate=pl.any_horizontal(*flags))
    # A candidate without a header of its own (a traceback line) takes the time of the header
    # line before it, so then every header line of the chunk is parsed too.
    bare = pl.col("is_candidate") & pl.col("header_at").is_null()
    headerless = frame.select(bare.any()).item()
    if headerless and frame.select((bare & pl.col("may_be_oom")).any()).item():
        frame = _rejoin_reflowed_oom(frame, flags, info, widest)
    if headerless:
        frame = _not_access_lines(frame, bare)
        headerless = frame.select(bare.any()).item()
    parse = pl.col("is_candidate") | (pl.col("header_at").is_not_null() if headerless else False)
    rest = frame.filter(~parse).select(
        "record_seq", "line", has_header=pl.col("header_at").is_not_null()
    )
    records = _parse(frame.filter(parse)).drop("header_at").with_columns(_body())
    if headerless:
        # A record pasted without its header may keep what _BARE_LEAD names.
        bare = pl.col("is_candidate") & ~pl.col("has_header")
        records = records.with_columns(
            body=pl.when(bare)
            .then(pl.col("body").str.replace_all(_BARE_LEAD, ""))
            .otherwise("body")
        )
        records = _own_glog_times(records, bare)
    records = _split_lead(records, flags, info)
    # Colour codes past the prefix, Ray's repeat suffix and glued records are all rare: one
    # scan of the candidate bodies finds the records that may have any of them, and only those
    # go through the steps that look for each.
    unusual = pl.col("is_candidate") & pl.col("body").str.contains(UNUSUAL).fill_null(value=False)
    if records.select(unusual.any()).item():
        odd = _unusual(records.filter(unusual), flags, info)
        plain = records.filter(~unusual).with_columns(repeat=pl.lit(1, pl.Int32))
        records = pl.concat([plain, odd.select(plain.columns)], how="vertical_relaxed").sort(
            "record_seq"
        )
    else:
        records = records.with_columns(repeat=pl.lit(1, pl.Int32))
    records = records.with_columns(chunk=pl.lit(chunk, pl.Int32))
    if scanned is None or scanned.height == 0:
        records = place(records, info, tz)
    else:
        records, scanned = place_with(
            records, check_frame(scanned, SCANNED_RUNS, "scanned runs"), info, tz
        )
    _count(records, info)
    info.header_lines = int(records.get_column("has_header").sum()) + int(
        rest.get_column("has_header").sum()
    )
    return (
        check_frame(records, RECORDS, "vLLM records"),
        check_frame(rest, UNPARSED_LINES, "vLLM unparsed lines"),
        info,
        scanned,
    )


def _own_glog_times(records: pl.DataFrame, bare: pl.Expr) -> pl.DataFrame:
    """``records`` with the headerless candidates that print PyTorch's own year-less time (c10's
    ``[rank1]:[W812 16:00:28.643448608 CUDACachingAllocator.cpp:3933] ...``, glog's ``E0306
    16:40:07.708802 ...``) given that time as their printed one, on the clock vLLM's headers
    print (the host's), rather than the time of the header line before them."""
    # (the headerless candidates are few: only they are searched)
    rows = records.select(bare.arg_true()).to_series()
    if rows.len() == 0:
        return records
    month_day, second = glog_clock(pl.col("body"))
    own = records[rows].select(month_day.alias("md"), second.alias("s"))
    found = own.get_column("md").is_not_null()
    rows, own = rows.filter(found), own.filter(found)
    return records.with_columns(
        records.get_column("printed_month_day").scatter(rows, own.get_column("md")),
        records.get_column("printed_second_of_day").scatter(rows, own.get_column("s")),
    )


def _rejoin_reflowed_oom(
    frame: pl.DataFrame, flags: Mapping[str, pl.Expr], info: ChunkInfo, widest: int
) -> pl.DataFrame:
    """``frame`` with a PyTorch OOM message pasted without a header and re-flowed at spaces (a
    sentence a line, as vllm issue 52871 quotes it) joined back onto its first line, as the
    PyTorch reader joins it; rare, so only run where a headerless line may be an OOM."""
    # An exception's name starts a record here too, as in the PyTorch reader.
    starts = f"{RECORD_START}|{LOG_RECORD_START}"
    split = find_split_records(
        frame.get_column("line"), starts=starts, opens=OOM_SHAPES, widest=widest
    )
    if not split.joined:
        return frame
    info.rejoined += split.joined
    frame = frame.with_columns(split.lines).filter(~split.continued)
    return frame.with_columns(header_at=pl.col("line").str.find(HEADER_AT), **flags).with_columns(
        is_candidate=pl.any_horizontal(*flags)
    )


def _not_access_lines(frame: pl.DataFrame, bare: pl.Expr) -> pl.DataFrame:
    """``frame`` with uvicorn's access lines among the headerless candidates made
    non-candidates: an access line is never a record, whatever its URL holds."""
    rows = frame.select(bare.arg_true()).to_series()
    access = frame[rows].get_column("line").str.contains(UVICORN)
    if not access.any():
        return frame
    candidate = frame.get_column("is_candidate").scatter(rows.filter(access), False)
    return frame.with_columns(candidate)


def piece_first_line(number: int) -> int:
    """The number of piece ``number``'s first line: counted from 1 like a file's lines, so a
    file read in one piece is numbered alike by both readers."""
    return (number << 32) + 1


def numbered_lines(piece: TextChunk, number: int) -> tuple[pl.DataFrame, int]:
    """The lines of the file's piece ``number`` with their ``record_seq`` (numbered within the
    piece: see :mod:`.frames`), and how many held invalid UTF-8."""
    lines, bad = piece.lines()
    first = piece_first_line(number)
    seq = pl.int_range(first, first + lines.len(), dtype=pl.Int64, eager=True) * 256
    return pl.DataFrame({"record_seq": seq, "line": lines}), bad


def _body() -> pl.Expr:
    return (
        pl.when(pl.col("is_candidate"))
        .then(pl.col("line").str.slice(pl.col("body_start")))
        .alias("body")
    )


def _unusual(frame: pl.DataFrame, flags: Mapping[str, pl.Expr], info: ChunkInfo) -> pl.DataFrame:
    """Records that may hold colour codes past their prefix, a repeat suffix or a glued record:
    each looked for in turn (cleaning colour codes can reveal the other two)."""
    frame = _cleanup_ansi(frame, flags)
    frame = _repeat_suffix(frame, info)
    glued = pl.col("is_candidate") & pl.col("body").str.contains(_LEVEL_TS)
    if frame.select(glued.any()).item():
        frame = _split_glued(frame, info)
    return frame


def _parse(frame: pl.DataFrame, kinds: frozenset[PrefixKind] | None = None) -> pl.DataFrame:
    """Header fields, prefix fields, and ``prefix_chars``/``body_start`` (prefix and prefix+header
    lengths in characters) for every row of ``frame``.

    The prefix kinds are detected on a sample; the full-prefix test that confirms each header
    checks every row, and rows it rejects are looked at again for kinds the sample missed."""
    line, hpos = pl.col("line"), pl.col("header_at")
    frame = frame.with_columns(
        prefix_text=line.cast(pl.Binary).bin.head(hpos.fill_null(0)).cast(pl.String, strict=False)
    )
    if kinds is None:
        kinds = detect_kinds(_sample(frame), "prefix_text") | detect_kinds(
            frame.filter(hpos.is_null()), "line"
        )
    frame = frame.with_columns(
        _ok=hpos.is_not_null()
        & (
            (hpos == 0)
            | pl.col("prefix_text").str.contains(_prefix_test(kinds)).fill_null(value=False)
        ),
    )
    rejected = frame.filter((hpos > 0) & ~pl.col("_ok"))
    if rejected.height:
        more = detect_kinds(rejected, "prefix_text") - kinds
        if more:
            return _parse(frame.drop("prefix_text", "_ok"), kinds | more)
    # A prefix of no form the grammar knows (TorchServe's "... MODEL_LOG - ", a script's own
    # "[date time]", a progress bar the record was printed after) still ends where vLLM's
    # header starts: the record is read after it, with no time or process taken from it.
    unknown = (hpos > 0) & ~pl.col("_ok") & pl.col("prefix_text").str.ends_with(" ")
    frame = read_header(frame.with_columns(_unknown=unknown.fill_null(value=False)))
    frame = frame.with_columns(
        has_header=(pl.col("_ok") | pl.col("_unknown")) & pl.col("header_chars").is_not_null()
    )
    outer = _outer(frame, kinds)
    if outer.select(pl.col("_unknown").any()).item():
        outer = outer.with_columns(
            pl.when(~pl.col("_unknown")).then(pl.col(name)).alias(name)
            for name in ("outer_ts", "host", "proc")
        )
    header = pl.col("has_header")
    return outer.with_columns(
        unknown_prefix=pl.col("_unknown") & header,
        body_start=pl.col("prefix_chars")
        + pl.when(header).then(pl.col("header_chars")).otherwise(0),
        level=pl.when(header).then(pl.col("header_level")),
        bracketed=header & pl.col("header_bracketed"),
        printed_month_day=pl.when(header).then(pl.col("header_month_day")),
        printed_second_of_day=pl.when(header).then(pl.col("header_second_of_day")),
    ).drop("prefix_text", "_ok", "_unknown", *HEADER_FIELDS)


def _sample(frame: pl.DataFrame) -> pl.DataFrame:
    """The first and last :data:`_SAMPLE` rows with a prefix before their header (``prefix_text``),
    found near the ends of the chunk when they are there, so as not to filter all of it."""
    prefixed = pl.col("header_at") > 0
    near = 16 * _SAMPLE
    head = frame.head(near).filter(prefixed).head(_SAMPLE)
    tail = frame.tail(near).filter(prefixed).tail(_SAMPLE)
    if head.height < _SAMPLE or tail.height < _SAMPLE:
        every = frame.filter(prefixed)
        head, tail = every.head(_SAMPLE), every.tail(_SAMPLE)
    return pl.concat([head.select("prefix_text"), tail.select("prefix_text")])


def _outer(frame: pl.DataFrame, kinds: frozenset[PrefixKind]) -> pl.DataFrame:
    """``prefix_chars``, ``outer_ts``, ``host``, ``proc``: from the prefix before a confirmed header
    (cheaply when the chunk has only timestamps and process prefixes), else by matching the
    outer-prefix pattern at the start of the line (headerless lines: rare)."""
    if not kinds:
        # No prefix of a known form: where a header follows one of no known form, it ends there.
        return frame.with_columns(
            prefix_chars=pl.col("prefix_text").str.len_chars().fill_null(0).cast(pl.UInt32),
            outer_ts=pl.lit(None, TS),
            host=pl.lit(None, pl.String),
            proc=pl.lit(None, pl.String),
        )
    # The formulas for rows with a header run on every row; the few rows without one are
    # then read from the start of their line and written in place.
    pre = pl.col("prefix_text")
    if kinds <= _TS_ONLY:
        # Step by step: a sub-expression used twice in one call is computed twice.
        # (the stamp may be bracketed, as CI runners print it: outer_prefixes._OUTER_TS)
        whole, stamp, proc = pl.col("_wh"), pl.col("_st"), pl.col("_pr")
        out = (
            frame.with_columns(
                _wh=pre.str.extract(r"^(\[?[0-9]{4}-[0-9]{2}-[0-9]{2}T[^ \]]+\]? )", 1)
            )
            .with_columns(
                _st=whole.str.strip_chars("[] "),
                _pr=pre.str.slice(whole.str.len_chars().fill_null(0)).str.strip_chars_end(" "),
            )
            .with_columns(
                prefix_chars=pre.str.len_chars(),
                outer_ts=parse_iso(stamp),
                host=pl.lit(None, pl.String),
                proc=pl.when(proc.str.len_bytes() > 0).then(proc),
            )
            .drop("_wh", "_st", "_pr")
        )
    else:
        groups = pre.str.extract_groups("^(?P<outer>" + outer_pattern(kinds) + ")$")
        out = (
            frame.with_columns(_p=groups)
            .with_columns(prefix_chars=pre.str.len_chars(), **outer_columns(pl.col("_p"), kinds))
            .drop("_p")
        )
    out = out.with_columns(pl.col("prefix_chars").cast(pl.UInt32))
    without = (~frame.get_column("has_header")).arg_true()
    if without.len() == 0:
        return out
    groups = pl.col("line").str.extract_groups("^(?P<outer>" + outer_pattern(kinds) + ")")
    patch = (
        frame[without]
        .select(_p=groups)
        .select(
            prefix_chars=pl.col("_p").struct.field("outer").str.len_chars().cast(pl.UInt32),
            **outer_columns(pl.col("_p"), kinds),
        )
    )
    return out.with_columns(
        out.get_column(name).scatter(without, patch.get_column(name)) for name in patch.columns
    )


def _cleanup_ansi(frame: pl.DataFrame, flags: Mapping[str, pl.Expr]) -> pl.DataFrame:
    """Colour codes beyond the process prefix (a coloured level name, say): strip them from
    those candidate lines only and read them again."""
    coloured = (
        pl.col("is_candidate") & pl.col("body").str.contains("\x1b", literal=True)
    ).fill_null(value=False)
    redo = frame.filter(coloured)
    if redo.height == 0:
        return frame
    cleaned = redo.select("record_seq", "arrival_ts", line=pl.col("line").str.replace_all(ANSI, ""))
    cleaned = cleaned.with_columns(header_at=pl.col("line").str.find(HEADER_AT), **flags)
    cleaned = _parse(cleaned).drop("header_at")
    cleaned = cleaned.with_columns(is_candidate=pl.any_horizontal(*flags)).with_columns(_body())
    rest = frame.filter(~coloured)
    return pl.concat([rest, cleaned.select(rest.columns)]).sort("record_seq")


def _repeat_suffix(frame: pl.DataFrame, info: ChunkInfo) -> pl.DataFrame:
    # The suffix pattern is anchored at the end of the body: only a body can hold it.
    has = pl.col("is_candidate") & pl.col("body").str.contains(REPEATED_LITERAL, literal=True)
    if not frame.select(has.any()).item():
        return frame.with_columns(repeat=pl.lit(1, pl.Int32))
    frame = frame.with_columns(
        repeat=pl.when(has)
        .then(pl.col("body").str.extract(REPEATED, 1).cast(pl.Int32, strict=False))
        .otherwise(1)
        .fill_null(1),
        body=pl.when(has).then(pl.col("body").str.replace(REPEATED, "")).otherwise("body"),
    )
    info.ray_collapsed += int(frame.get_column("repeat").sum()) - frame.height
    return frame


def _split_lead(
    records: pl.DataFrame, flags: Mapping[str, pl.Expr], info: ChunkInfo
) -> pl.DataFrame:
    """A record whose line begins with text of no prefix form the grammar knows: where that
    text is itself a candidate (an OOM message, a stats record cut from its header) it is a
    record glued in front of this one (``...cuda.html#environment-variables)  ERROR 07-04 ...``),
    not a prefix, and becomes piece 0 of the line, headerless, with the printed time of the
    header it was glued to; the record is piece 1."""
    unknown = pl.col("unknown_prefix")
    if not records.select(unknown.any()).item():
        return records.drop("unknown_prefix")
    rows = records.filter(unknown)
    text = pl.col("line").str.slice(0, pl.col("prefix_chars"))
    lead = (
        rows.with_columns(line=text)
        .with_columns(**flags)
        .with_columns(is_candidate=pl.any_horizontal(*flags))
        .filter(pl.col("is_candidate"))
    )
    if lead.height == 0:
        return records.drop("unknown_prefix")
    lead = lead.with_columns(
        line=pl.col("line").str.strip_chars(),
        has_header=pl.lit(value=False),
        level=pl.lit(None, pl.String),
        bracketed=pl.lit(value=False),
        prefix_chars=pl.lit(0, pl.UInt32),
        body_start=pl.lit(0, pl.UInt32),
    ).with_columns(body=pl.col("line"))
    info.glued += lead.height  # the record was glued onto the end of that text
    seqs = lead.get_column("record_seq")
    moved = pl.col("record_seq").is_in(seqs.implode())
    # The record keeps its line from its header on (what a skip count shows of it).
    records = records.with_columns(
        record_seq=pl.when(moved).then(pl.col("record_seq") + 1).otherwise("record_seq"),
        line=pl.when(moved)
        .then(pl.col("line").str.slice(pl.col("prefix_chars")))
        .otherwise("line"),
        body_start=pl.when(moved)
        .then(pl.col("body_start") - pl.col("prefix_chars"))
        .otherwise("body_start"),
        prefix_chars=pl.when(moved).then(pl.lit(0, pl.UInt32)).otherwise("prefix_chars"),
    )
    columns = records.columns
    return (
        pl.concat([records, lead.select(columns)], how="vertical_relaxed")
        .sort("record_seq")
        .drop("unknown_prefix")
    )


def _split_glued(frame: pl.DataFrame, info: ChunkInfo) -> pl.DataFrame:
    """Split records glued onto one line (``...hit rate: 0.0%INFO 07-28 06:41:19 [...]``)."""
    glued = (pl.col("is_candidate") & pl.col("body").str.contains(_LEVEL_TS)).fill_null(value=False)
    single = frame.filter(~glued)
    pieces = (
        frame.filter(glued)
        .with_columns(pl.col("body").str.replace_all(GLUED, "\n$0").str.split("\n"))
        .with_columns(_piece=pl.int_ranges(pl.col("body").list.len(), dtype=pl.Int64))
        .explode("body", "_piece")
        .filter(pl.col("body").str.len_bytes() > 0)
        .with_columns(record_seq=pl.col("record_seq") + pl.col("_piece"))
    )
    info.glued += int((pieces.get_column("_piece") > 0).sum())
    first = pieces.filter(pl.col("_piece") == 0).drop("_piece")
    rest = pieces.filter(pl.col("_piece") > 0)
    if rest.height:
        inherited = rest.select("record_seq", "arrival_ts", "outer_ts", "host", "repeat", "proc")
        again = rest.select("record_seq", *FLAG_NAMES, "is_candidate", line=pl.col("body"))
        again = _parse(
            again.with_columns(header_at=pl.col("line").str.find(HEADER_AT)),
            frozenset(("process",)),
        ).drop("header_at")
        again = again.with_columns(body=pl.col("line").str.slice(pl.col("body_start")))
        again = again.drop("outer_ts", "host").join(
            inherited.rename({"proc": "_proc0"}), on="record_seq"
        )
        rest = again.with_columns(proc=pl.coalesce("proc", "_proc0")).drop("_proc0")
    columns = single.columns
    parts = [single, first.select(columns)]
    if rest.height:
        parts.append(rest.select(columns))
    return pl.concat(parts, how="vertical_relaxed").sort("record_seq")


def _count(frame: pl.DataFrame, info: ChunkInfo) -> None:
    hosts = frame.get_column("host").drop_nulls()
    if hosts.len():
        for host, count in hosts.value_counts().iter_rows():
            info.hosts[host] = info.hosts.get(host, 0) + int(count)
    timed = frame.get_column("outer_ts").is_not_null().arg_true()
    if timed.len():  # a log keeps one supervisor's prefix: a few lines tell which one it is
        sample = pl.concat([timed.head(8), timed.tail(8)]).unique(maintain_order=True)
        info.time_sources = time_sources(frame.get_column("line").gather(sample))
    info.bracketed = int(frame.select(pl.col("bracketed").fill_null(value=False).sum()).item())
