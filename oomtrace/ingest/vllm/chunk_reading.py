"""How the vLLM parser reads a file chunk by chunk, and with which reader.

Every chunk is read with no state shared with the others (so chunks are read side by side) and
gives a :class:`ReadChunk`: the records put to use, the skipped lines by reason, the clock brief.

A small input is split into lines and read by the vectorised reader (:mod:`.line_records`,
:mod:`.extract`). A large one is read in pieces, each by the compiled scanner first as soon as it
is read (:mod:`.scanned_chunk`, the C extension :mod:`._line_scan`): the request records and
access lines that make up nearly all of a busy server's log are read there, the rest by the
vectorised reader, several scanned pieces to a chunk (:func:`read_chunks`). Both readers give
the same rows from the same lines (``tests/unit/ingest/vllm/test_line_scanner.py``), so a file
can be read by both, chunk by chunk.
Where the extension was not built (no C compiler at install), every input is read in lines.
"""

from __future__ import annotations

import gc
import logging
import os
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from functools import cache, partial
from typing import TYPE_CHECKING, Final

import polars as pl

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.ingest.text.input_file import CHUNK_BYTES, InputFile, TextChunk
from oomtrace.ingest.vllm.extract import Extracted, extract, flags
from oomtrace.ingest.vllm.file_tables import settled
from oomtrace.ingest.vllm.line_records import build_records, numbered_lines
from oomtrace.ingest.vllm.record_times import ChunkInfo
from oomtrace.ingest.vllm.request_lines import merge_request_rows, scanned_requests
from oomtrace.ingest.vllm.request_table import drop_told_additions
from oomtrace.ingest.vllm.skipped_lines import UVICORN_LINE, Skipped, skipped_lines

if TYPE_CHECKING:
    from oomtrace.ingest.vllm.scanned_chunk import ScannedChunk

log = logging.getLogger(__name__)

# From this size on an input is read by the compiled scanner first: below it, loading pyarrow
# and reading in pieces cost about what the scanner saves. Measured (the whole `oomtrace ingest`
# of benchmarks/ingest_log.py's log, the scanner forced on and off, best of 3-5 runs, 2 busy
# cores): CPU even at 0.1-2 MB (0.52-0.59 s either way), the scanner ahead from 5 MB (0.59 s
# against 0.65; 20 MB 0.65 against 0.78; 48 MB 0.80 against 1.12). (With numba, whose loading
# cost half a CPU second, this was 48 MiB.)
SCAN_MIN_BYTES: Final = 4 << 20
# How many times larger than its file a compressed log is taken to be, to choose the reader.
COMPRESSION: Final = 8
# Pieces of the file, PIECE_BYTES each, read as one chunk in the scanner's way: what the
# vectorised reader then does with the lines left costs per chunk, not per line.
PIECES: Final = 4
PIECE_BYTES: Final = CHUNK_BYTES
# Scanned pieces that make up one chunk of the vectorised reader at most, where the lines they
# leave it were copied out of them (scanned_chunk._lines). Its work on a chunk costs per call far
# more than per line (benchmarks/ingest_log.py's 1 GB log in 10 chunks: about 0.6 s of CPU in
# build_records and extract, for 3,369 lines); more pieces to a chunk hold more request rows
# until it is read (10: peak 494-525 MiB, 40: about 700).
GROUP_PIECES: Final = 10


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


# Chunks read side by side: one per core, at most two (each chunk in flight holds its memory,
# and Polars already spreads the work of one call over its own pool of threads).
WORKERS: Final = min(2, cores())


@dataclass
class ReadChunk:
    """What reading one chunk gives: records put to use, skipped lines, the clock brief, and
    (when the chunk's lines were counted here, not by the file reader) its line counts."""

    out: Extracted
    info: ChunkInfo
    recognised: int
    skipped: list[Skipped]
    lines: int = 0
    invalid_lines: int = 0


@dataclass(frozen=True)
class Reading:
    """How the chunks of one input are read: in pieces (``pieces``), by the compiled scanner
    first (``scan``), or else in lines. :func:`reading_for` gives both or neither; pieces read
    without the scanner are the tests' way of reading the same pieces both ways
    (``tests/unit/ingest/vllm/test_line_scanner.py``)."""

    pieces: bool
    scan: bool


def reading_for(size: int) -> Reading:
    """How an input of about ``size`` bytes of text is read: by the scanner first from
    :data:`SCAN_MIN_BYTES` on where it is built, else in lines."""
    if size < SCAN_MIN_BYTES or not scanner_available():
        return Reading(pieces=False, scan=False)
    # pyarrow loads only when a large input is read. Loading it makes tens of thousands of
    # objects that live as long as the process: the cyclic collector is paused meanwhile (its
    # full passes over them find nothing) and they are then frozen out of its later passes.
    paused = gc.isenabled()
    gc.disable()
    try:
        from oomtrace.ingest.vllm import scanned_chunk  # noqa: F401, PLC0415
    finally:
        gc.freeze()
        if paused:
            gc.enable()
    return Reading(pieces=True, scan=True)


@cache
def scanner_available() -> bool:
    """Whether the compiled scanner was built with the package (it is an accelerator, never
    required: a machine without a C compiler installs without it)."""
    try:
        from oomtrace.ingest.vllm import _line_scan  # noqa: F401, PLC0415
    except ImportError as missing:
        log.debug("vLLM line scanner not built (%s): every line read the vectorised way", missing)
        return False
    return True


def chunks(
    source: InputFile, diag: SourceDiagnostics, tz: str, reading: Reading
) -> Iterator[Callable[[int], ReadChunk]]:
    """The work of reading each chunk of ``source`` (given the chunk's number) without the
    scanner: in lines, or in pieces (:data:`PIECES` to a chunk)."""
    if not reading.pieces:
        for chunk in source.line_chunks(diag):
            yield partial(read_chunk, chunk.lines.to_frame("line"), first_line=chunk.first_line,
                          tz=tz)  # fmt: skip
        return
    group: list[tuple[TextChunk, int]] = []
    for number, piece in enumerate(source.text_chunks(diag, PIECE_BYTES)):
        group.append((piece, number))
        if len(group) == PIECES:
            yield partial(_read_pieces, group, tz)
            group = []
    if group:
        yield partial(_read_pieces, group, tz)


def input_size(source: InputFile) -> int:
    """About how many bytes of text ``source`` holds."""
    return source.path.stat().st_size * (COMPRESSION if source.compressed else 1)


def _read_pieces(pieces: list[tuple[TextChunk, int]], tz: str, index: int) -> ReadChunk:
    """One chunk of pieces, every line read the vectorised way (as the scanner's pieces are read:
    see :func:`read_chunks`). Lines are numbered within each piece (``record_seq`` keys need only
    be unique and in file order), so no chunk waits for the lines of another."""
    parts = [numbered_lines(piece, number) for piece, number in pieces]
    lines = pl.concat([frame for frame, _ in parts])
    chunk = read_chunk(lines, index, first_line=0, tz=tz)
    chunk.lines, chunk.invalid_lines = lines.height, sum(bad for _, bad in parts)
    return chunk


def _read_scanned(scanned: ScannedChunk, tz: str, index: int) -> ReadChunk:
    """Everything one chunk of scanned pieces yields."""
    records, rest, info, runs = build_records(
        scanned.general, flags(), chunk=index, first_line=0, tz=tz, scanned=scanned.runs,
        widest=scanned.widest,
    )  # fmt: skip
    info.bracketed += scanned.bracketed
    info.header_lines += scanned.records
    requests = None
    if runs is not None and scanned.requests.height:
        requests = scanned_requests(scanned.requests, runs, index)
    chunk = _finish_chunk(
        records,
        pl.concat([rest, scanned.access_head]).sort("record_seq"),
        info,
        requests,
        {UVICORN_LINE: scanned.access - scanned.access_head.height},
    )
    chunk.recognised += scanned.records
    chunk.lines, chunk.invalid_lines = scanned.lines, scanned.invalid_lines
    return chunk


def read_chunks(
    source: InputFile, diag: SourceDiagnostics, tz: str, reading: Reading, pool: Executor
) -> Iterator[ReadChunk]:
    """Every chunk of ``source`` read, in file order, its work spread over ``pool`` (Polars and
    the scanner release the GIL while they work). Memory stays bounded by the pieces and chunks
    in flight plus the rows they yield.

    Read by the scanner, a piece is scanned on its own as soon as it is read; the lines it
    leaves to the vectorised reader are copied out where they are few (a busy server's log), so
    the piece can go at once. Consecutive scanned pieces then make up a chunk for the
    vectorised reader, up to :data:`GROUP_PIECES` of them, or :data:`PIECES` where the pieces
    are still held: its work costs per chunk far more than per line."""
    if not reading.scan:
        pending: deque[Future[ReadChunk]] = deque()
        for index, work in enumerate(chunks(source, diag, tz, reading)):
            pending.append(pool.submit(work, index))
            if len(pending) >= WORKERS:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
        return
    from oomtrace.ingest.vllm.scanned_chunk import scan_piece  # noqa: PLC0415

    scans: deque[Future[tuple[ScannedChunk, bool]]] = deque()
    reads: deque[Future[ReadChunk]] = deque()
    group: list[ScannedChunk] = []
    held = closed = 0

    def take() -> None:
        nonlocal held, closed
        scanned, holds = scans.popleft().result()
        group.append(scanned)
        held += holds
        if len(group) >= GROUP_PIECES or held >= PIECES:
            reads.append(pool.submit(_read_group, group.copy(), tz, closed))
            group.clear()
            held, closed = 0, closed + 1

    for number, piece in enumerate(source.text_chunks(diag, PIECE_BYTES)):
        scans.append(pool.submit(scan_piece, piece, number))
        while len(scans) > WORKERS:
            take()
        while reads and (reads[0].done() or len(reads) > 1):
            yield reads.popleft().result()
    while scans:
        take()
    if group:
        reads.append(pool.submit(_read_group, group, tz, closed))
    while reads:
        yield reads.popleft().result()


def _read_group(group: list[ScannedChunk], tz: str, index: int) -> ReadChunk:
    from oomtrace.ingest.vllm.scanned_chunk import joined  # noqa: PLC0415

    return _read_scanned(joined(group), tz, index)


def read_chunk(lines: pl.DataFrame, index: int, *, first_line: int, tz: str) -> ReadChunk:
    """Everything one chunk of lines yields (``line``; ``record_seq`` where the lines are not
    numbered from ``first_line`` on; ``arrival_ts`` for lines a collector tailed)."""
    records, rest, info, _ = build_records(
        lines, flags(), chunk=index, first_line=first_line, tz=tz
    )
    return _finish_chunk(records, rest, info)


def _finish_chunk(
    records: pl.DataFrame,
    rest: pl.DataFrame,
    info: ChunkInfo,
    scanned_rows: pl.DataFrame | None = None,
    more_skipped: dict[str, int] | None = None,
) -> ReadChunk:
    out = Extracted()
    extract(records, out)
    out.own()
    if scanned_rows is not None:  # their text is their own already
        out.requests = [merge_request_rows([*out.requests, scanned_rows])]
    used = pl.concat(out.used).unique() if out.used else pl.Series([], dtype=pl.Int64)
    odd = pl.concat(out.unmatched) if out.unmatched else pl.Series([], dtype=pl.Int64)
    out.used.clear()
    out.unmatched.clear()
    out.requests = [settled(drop_told_additions(part)) for part in out.requests]
    unused = pl.concat(
        [records.filter(~pl.col("record_seq").is_in(used.implode())).select(rest.columns), rest]
    )
    return ReadChunk(out, info, used.len(), skipped_lines(unused, odd, more=more_skipped))
