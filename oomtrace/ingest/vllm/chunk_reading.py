"""How the vLLM parser reads a file chunk by chunk, and with which reader.

Every chunk is read with no state shared with the others (so chunks are read side by side) and
gives a :class:`ReadChunk`: the records put to use, the skipped lines by reason, the clock brief.

A small input is split into lines and read by the vectorised reader (:mod:`.line_records`,
:mod:`.extract`). A large one is read in pieces, :data:`PIECES` to a chunk, by the compiled
scanner first (:mod:`.scanned_chunk`): the request records and access lines that make up nearly
all of a busy server's log are read there, the rest by the vectorised reader. Both readers give
the same rows from the same lines (``tests/unit/ingest/vllm/test_line_scanner.py``), so a file
can be read by both, chunk by chunk.

The scanner's machine code is compiled by numba the first time, once per machine (about ten
seconds of a core), and cached. Where the cache holds it, the scanner reads inputs from
:data:`SCAN_MIN_BYTES` on; where it does not, an input from :data:`COMPILE_MIN_BYTES` on has it
compiled alongside the reading, and the chunks read once it is ready use it. Below that, the code
is compiled once on request (``python -m oomtrace.ingest.vllm.scanned_chunk``); it is cached in
the user's cache directory (:func:`oomtrace.user_cache.numba_dir`).
"""

from __future__ import annotations

import gc
import importlib.util
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache, partial
from typing import Final

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

# From this size on an input is read by the compiled scanner first, where its code is cached:
# below it, loading numba costs more than the scanner saves (benchmarks/ingest_bench.py).
SCAN_MIN_BYTES: Final = 48 << 20
# From this size on the scanner is compiled alongside the reading where its code is not cached.
# Measured on 2 busy cores (benchmarks/ingest_bench.py, 1 GB): compiling costs a first run some
# 33 s of wall time (45 s, against 12 s without the scanner), the cached scanner saves 4.6-9 s a
# GB: an input pays for the compilation only from about 4-8 GB, so a read under the default input
# cap never compiles it; `python -m oomtrace.ingest.vllm.scanned_chunk` compiles it once.
COMPILE_MIN_BYTES: Final = 8 << 30
# How many times larger than its file a compressed log is taken to be, to choose the reader.
COMPRESSION: Final = 8
# Pieces of the file, PIECE_BYTES each, read as one chunk in the scanner's way: what the
# vectorised reader then does with the lines left costs per chunk, not per line.
PIECES: Final = 4
PIECE_BYTES: Final = CHUNK_BYTES


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


class Scanner:
    """Whether the compiled scanner reads the chunks of one input, and from when: ready at once
    where its code is cached, or once it is compiled alongside the reading."""

    def __init__(self, size: int) -> None:
        self.ready = threading.Event()
        self._compiling: threading.Thread | None = None
        if size < SCAN_MIN_BYTES:
            return
        # numba and pyarrow load only when a large input is read. Loading them makes some
        # hundred thousand objects that live as long as the process: the cyclic collector is
        # paused meanwhile (its full passes over them cost about 0.3 s of CPU a run and find
        # nothing) and they are then frozen out of its later passes.
        paused = gc.isenabled()
        gc.disable()
        try:
            if not scanner_available():
                return
            from oomtrace.ingest.vllm import scanned_chunk  # noqa: PLC0415

            if scanned_chunk.cached():
                scanned_chunk.warm()
                self.ready.set()
                return
        finally:
            gc.freeze()
            if paused:
                gc.enable()
        if size >= COMPILE_MIN_BYTES:
            self._compiling = threading.Thread(
                target=self._compile, args=(scanned_chunk.warm,), name="oomtrace-compile"
            )
            self._compiling.start()

    @property
    def used(self) -> bool:
        return self.ready.is_set() or self._compiling is not None

    def _compile(self, warm: Callable[[], None]) -> None:
        warm()
        self.ready.set()

    def close(self) -> None:
        """Wait for a compilation under way (so its code is cached for the next input)."""
        if self._compiling is not None:
            self._compiling.join()


@cache
def scanner_available() -> bool:
    """Whether numba is installed and the C library's byte searches can be called (the scanner
    is an accelerator, never required)."""
    if importlib.util.find_spec("numba") is None:
        return False
    from oomtrace.ingest.text.byte_search import available  # noqa: PLC0415

    return available()


def chunks(
    source: InputFile, diag: SourceDiagnostics, tz: str, scanner: Scanner
) -> Iterator[Callable[[int], ReadChunk]]:
    """The work of reading each chunk of ``source`` (given the chunk's number): in pieces, the
    scanner first where it is used, else in lines."""
    if not scanner.used:
        for chunk in source.line_chunks(diag):
            yield partial(read_chunk, chunk.lines.to_frame("line"), first_line=chunk.first_line,
                          tz=tz)  # fmt: skip
        return
    group: list[tuple[TextChunk, int]] = []
    for number, piece in enumerate(source.text_chunks(diag, PIECE_BYTES)):
        group.append((piece, number))
        if len(group) == PIECES:
            yield partial(_read_pieces, group, tz, scanner)
            group = []
    if group:
        yield partial(_read_pieces, group, tz, scanner)


def input_size(source: InputFile) -> int:
    """About how many bytes of text ``source`` holds."""
    return source.path.stat().st_size * (COMPRESSION if source.compressed else 1)


def _read_pieces(
    pieces: list[tuple[TextChunk, int]], tz: str, scanner: Scanner, index: int
) -> ReadChunk:
    """One chunk of pieces, the scanner first if it is ready. Lines are numbered within each
    piece (``record_seq`` keys need only be unique and in file order), so no chunk waits for
    the lines of another."""
    if not scanner.ready.is_set():
        parts = [numbered_lines(piece, number) for piece, number in pieces]
        lines = pl.concat([frame for frame, _ in parts])
        chunk = read_chunk(lines, index, first_line=0, tz=tz)
        chunk.lines, chunk.invalid_lines = lines.height, sum(bad for _, bad in parts)
        return chunk
    from oomtrace.ingest.vllm.scanned_chunk import scan_pieces  # noqa: PLC0415

    scanned = scan_pieces(pieces)
    records, rest, info, runs = build_records(
        scanned.general, flags(), chunk=index, first_line=0, tz=tz, scanned=scanned.runs
    )
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
