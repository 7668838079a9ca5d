"""Reading inputs as text: transparent gzip, invalid UTF-8 kept visible, bounded memory.

Parsers never open files themselves. They ask an :class:`InputFile` for its head (to sniff) and
for its lines in chunks: each chunk is a Polars ``Series`` of strings, cut at a line boundary, so
a parser can apply vectorised string expressions to millions of lines while memory stays bounded
by the chunk size, not by the file size. Two limits keep it bounded whatever the input: a line
longer than :data:`MAX_LINE_BYTES` is skipped and counted, never gathered whole, and an input
larger than the cap (:data:`DEFAULT_MAX_INPUT_BYTES`, ``--max-input-size``) once decompressed is
refused before it is parsed (:meth:`InputFile.check_size`), since what a parser keeps grows with
what it reads.

What goes wrong with real files is recorded on the source's diagnostics, never raised, unless
nothing at all can be read: a truncated gzip stream yields the lines before the break, invalid
UTF-8 bytes are replaced (U+FFFD) and counted, CR and CRLF line ends are normalised.
"""

from __future__ import annotations

import ctypes
import io
import platform
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import BinaryIO, Final

import polars as pl

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.errors import InputError
from oomtrace.units import format_bytes

GZIP_MAGIC: Final = b"\x1f\x8b"
# No log line is longer (the collector reads 8 MiB at a time and drops longer lines too).
MAX_LINE_BYTES: Final = 8 << 20
LONG_LINE: Final = "line longer than 8 MiB (not read)"
# What one input may hold once decompressed: a day of a busy server's log fits; a zip bomb
# (16 MB expanding to 4 GB of valid lines) is refused before a byte of it is parsed.
DEFAULT_MAX_INPUT_BYTES: Final = 1 << 30
HEAD_BYTES: Final = 64 * 1024
# Below glibc's 32 MiB ceiling for its mmap threshold, so that blocks of this size can come from
# the heap and reuse its pages (see _reuse_freed_pages).
CHUNK_BYTES: Final = 24 * 1024 * 1024
# glibc's mallopt parameters (malloc.h) and the values _reuse_freed_pages sets.
_M_TRIM_THRESHOLD: Final = -1
_M_MMAP_THRESHOLD: Final = -3
_MMAP_THRESHOLD: Final = 32 << 20  # glibc's ceiling on 64-bit machines
_TRIM_THRESHOLD: Final = 1 << 30
_GZIP_WBITS: Final = 16 + zlib.MAX_WBITS
# Starts that Polars' line reader takes for a compressed stream: the magic numbers of gzip, zlib
# and zstd streams.
_COMPRESSED_STARTS: Final = (
    GZIP_MAGIC, b"\x78\x01", b"\x78\x5e", b"\x78\x9c", b"\x78\xda", b"\x28\xb5\x2f\xfd",
)  # fmt: skip


@dataclass(frozen=True)
class LineChunk:
    """Consecutive lines of a file. ``first_line`` is the 1-based number of ``lines[0]``."""

    lines: pl.Series
    first_line: int


@dataclass(frozen=True)
class InputFile:
    """One input file as the user named it. ``name`` is what reports show (never an absolute
    path); ``path`` is where to read it."""

    path: Path
    name: str

    @property
    def compressed(self) -> bool:
        with self.path.open("rb") as raw:
            return raw.read(2) == GZIP_MAGIC

    @property
    def mtime(self) -> datetime:
        return datetime.fromtimestamp(self.path.stat().st_mtime, tz=UTC)

    def blocks(self, diag: SourceDiagnostics | None, size: int = CHUNK_BYTES) -> Iterator[bytes]:
        """The decompressed content in blocks of about ``size`` bytes.

        Gzip is decoded with ``zlib`` directly rather than ``gzip.GzipFile`` so that a truncated
        stream still yields every byte before the break (GzipFile raises and loses the block),
        and concatenated members (``cat a.gz b.gz``) are all read.
        """
        with self.path.open("rb") as raw:
            first = raw.read(2)
            raw.seek(0)
            if first != GZIP_MAGIC:
                while block := raw.read(size):
                    yield block
                return
            inflate = zlib.decompressobj(wbits=_GZIP_WBITS)
            produced = 0
            while True:
                # Logs compress ~10-20x: read a slice so each decompressed block stays near `size`.
                compressed = raw.read(max(size // 32, 1024))
                try:
                    out = inflate.decompress(compressed) if compressed else inflate.flush()
                    while inflate.eof and inflate.unused_data:
                        rest = inflate.unused_data
                        inflate = zlib.decompressobj(wbits=_GZIP_WBITS)
                        out += inflate.decompress(rest)
                except zlib.error as err:
                    if diag is not None:
                        diag.note(
                            f"compressed stream is damaged after {produced:,} bytes ({err}); "
                            "read what was before it",
                            lost=True,
                        )
                    return
                produced += len(out)
                if out:
                    yield out
                if not compressed:
                    if not inflate.eof and diag is not None:
                        diag.note(
                            f"compressed stream ends early after {produced:,} bytes; "
                            "read what was there",
                            lost=True,
                        )
                    return

    def check_size(self, limit: int) -> None:
        """Raise :class:`InputError` when the content is larger than ``limit`` bytes once
        decompressed. A gzip stream is decompressed to count (up to the limit, nothing kept)."""
        remedy = (
            f"over the {format_bytes(limit)} read per input; pass --max-input-size with a larger "
            "size to read it, or split it"
        )
        if not self.compressed:
            size = self.path.stat().st_size
            if size > limit:
                raise InputError(f"{self.name}: {format_bytes(size)}, {remedy}")
            return
        produced = 0
        for block in self.blocks(None, 1 << 20):
            produced += len(block)
            if produced > limit:
                raise InputError(
                    f"{self.name}: more than {format_bytes(limit)} once decompressed "
                    f"({format_bytes(self.path.stat().st_size)} compressed), {remedy}"
                )

    def head(self, size: int = HEAD_BYTES) -> str:
        """The decompressed start of the file as text (for sniffing), invalid bytes replaced."""
        data = b""
        for block in self.blocks(None, size):
            data += block
            if len(data) >= size:
                break
        return data[:size].decode("utf-8", errors="replace")

    def read_bytes(self, diag: SourceDiagnostics, limit: int | None = None) -> bytes:
        """The whole decompressed content (for formats that are not line-oriented, such as
        JSON and pickles). A truncated gzip stream gives what was readable, with a note."""
        out = io.BytesIO()
        for block in self.blocks(diag, 1 << 20):
            out.write(block)
            if limit is not None and out.tell() > limit:
                raise InputError(
                    f"{self.name}: larger than {limit:,} bytes; split it or pass a smaller export"
                )
        return out.getvalue()

    def text_chunks(
        self, diag: SourceDiagnostics | None, chunk_bytes: int = CHUNK_BYTES
    ) -> Iterator[TextChunk]:
        """The decompressed content in pieces of about ``chunk_bytes`` that end at a newline (the
        last may end at the end of the file), not yet split into lines. A damaged or truncated
        compressed stream is noted in ``diag``. A line longer than :data:`MAX_LINE_BYTES` that
        runs over more than one piece is skipped (counted in ``diag`` as read and skipped), never
        gathered; one that fits in a piece is left to the reader of the piece.

        A plain file is read piece by piece with no copy: where a piece ends inside a line, the
        file is read again from that line's start for the next piece. A compressed stream's
        pieces are cut and the cut line carried over (the only bytes copied twice)."""
        long = _LongLines(diag)
        if chunk_bytes >= _MMAP_THRESHOLD // 4:
            _reuse_freed_pages()
        with self.path.open("rb") as raw:
            plain = raw.read(2) != GZIP_MAGIC and raw.seekable()
            raw.seek(0)
            if plain:
                yield from _plain_pieces(raw, chunk_bytes, long)
                long.close()
                return
        yield from _cut_pieces(self.blocks(diag, chunk_bytes), long)
        long.close()

    def line_chunks(
        self, diag: SourceDiagnostics, chunk_bytes: int = CHUNK_BYTES
    ) -> Iterator[LineChunk]:
        """The file's lines, in chunks cut at newlines. Counts ``diag.lines_read``. A line longer
        than :data:`MAX_LINE_BYTES` is skipped (the lines after it in its chunk move up one)."""
        start = diag.lines_read
        invalid_lines = long_lines = 0
        for piece in self.text_chunks(diag, chunk_bytes):
            # Lines read so far, skipped long ones included, number this chunk's first line.
            first_line = diag.lines_read - start + 1
            lines, bad = piece.lines()
            invalid_lines += bad
            diag.lines_read += lines.len()
            too_long = lines.str.len_bytes() > MAX_LINE_BYTES
            if too_long.any():
                long_lines += int(too_long.sum())
                lines = lines.filter(~too_long)
            yield LineChunk(lines, first_line)
        diag.skip(LONG_LINE, long_lines, None)
        note_invalid_utf8(diag, invalid_lines)

    def numbered_lines(self, diag: SourceDiagnostics) -> pl.DataFrame:
        """All the file's lines as one table: ``n`` (Int64, the line's number from 1) and
        ``line`` (String), for formats small enough to read whole (nvidia-smi's monitor output,
        gpustat). An empty file gives an empty table of the same schema."""
        parts = [
            pl.DataFrame({"line": c.lines}, schema={"line": pl.String}).with_row_index(
                "n", offset=c.first_line
            )
            for c in self.line_chunks(diag)
        ]
        if not parts:
            return pl.DataFrame(schema={"n": pl.Int64, "line": pl.String})
        return pl.concat(parts).with_columns(pl.col("n").cast(pl.Int64))


@dataclass(frozen=True)
class TextChunk:
    """Whole lines of a file as bytes: ``data[:size]`` (``data`` may run on into a line the next
    chunk holds). Parsers with a scanner of their own read the bytes; others split them
    (:meth:`lines`)."""

    data: bytes
    size: int

    @property
    def text(self) -> memoryview:
        return memoryview(self.data)[: self.size]

    def lines(self) -> tuple[pl.Series, int]:
        """The lines, and how many held invalid UTF-8 (see :func:`decode_lines`)."""
        return decode_lines(self.data if self.size == len(self.data) else self.data[: self.size])


@cache
def _reuse_freed_pages() -> bool:
    """Have glibc's malloc keep the pages of freed blocks for the next ones (whether it could).

    A file is read in blocks of :data:`CHUNK_BYTES`, several in flight, each freed once its lines
    are read. By default glibc maps a block that large afresh or, once the first is freed, hands
    the heap's free top back to the system when it passes twice the block's size: either way
    every page of the next block is faulted in and zeroed by the kernel again. Serving blocks
    from the heap (an mmap threshold at glibc's ceiling) and keeping up to a GiB of free heap
    makes the pages stay: ``oomtrace ingest`` of a 1 GB vLLM log takes 152 thousand page faults
    instead of 273 thousand, and about 0.4 s less system time (``/usr/bin/time -f %R``, quiet
    machine, 2026-12). A process that reads a large file is a short command; the memory is
    returned when it exits. Elsewhere (another C library, another system) nothing changes."""
    if sys.platform != "linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return bool(
        mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD) and mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD)
    )


class _LongLines:
    """Lines over :data:`MAX_LINE_BYTES` met while cutting pieces: the bytes of the one being
    gathered, and how many were skipped (counted as read and skipped in ``diag`` at the end)."""

    def __init__(self, diag: SourceDiagnostics | None) -> None:
        self.diag = diag
        self.skipped = 0
        self.gathered = 0

    def gather(self, size: int) -> bool:
        """Add ``size`` bytes to the line being gathered: whether it is now too long."""
        self.gathered += size
        if self.gathered <= MAX_LINE_BYTES:
            return False
        self.gathered = 0
        return True

    def skip_one(self) -> None:
        self.skipped += 1
        if self.diag is not None:
            self.diag.lines_read += 1

    def close(self) -> None:
        if self.diag is not None:
            self.diag.skip(LONG_LINE, self.skipped, None)


def _plain_pieces(raw: BinaryIO, size: int, long: _LongLines) -> Iterator[TextChunk]:
    pending: list[bytes] = []  # pieces of one line longer than `size`
    skipping = False  # inside a line already known to be too long: read on to its end
    while data := raw.read(size):
        if skipping:
            end = data.find(b"\n")
            if end < 0:
                continue
            skipping = False
            long.skip_one()
            raw.seek(end + 1 - len(data), io.SEEK_CUR)
            continue
        if len(data) < size:  # the end of the file: whatever is left is whole lines
            yield _joined(pending, data, len(data))
            return
        cut = data.rfind(b"\n")
        if cut < 0:
            pending.append(data)
            if long.gather(len(data)):
                pending, skipping = [], True
            continue
        long.gathered = 0
        yield _joined(pending, data, cut + 1)
        pending = []
        # Read the cut line again with the next piece rather than copy it over.
        raw.seek(cut + 1 - len(data), io.SEEK_CUR)
    if skipping:  # a too long last line without its newline
        long.skip_one()
    elif pending:
        yield _joined(pending[:-1], pending[-1], len(pending[-1]))


def _joined(pending: list[bytes], data: bytes, size: int) -> TextChunk:
    if not pending:
        return TextChunk(data, size)
    whole = b"".join((*pending, memoryview(data)[:size]))
    return TextChunk(whole, len(whole))


def _cut_pieces(blocks: Iterator[bytes], long: _LongLines) -> Iterator[TextChunk]:
    carry = b""
    skipping = False  # inside a line already known to be too long: read on to its end
    for read in blocks:
        block = read
        if skipping:
            end = read.find(b"\n")
            if end < 0:
                continue
            block, skipping = read[end + 1 :], False
            long.skip_one()
        cut = block.rfind(b"\n")
        if cut < 0:
            carry += block
            if len(carry) > MAX_LINE_BYTES:
                carry, skipping = b"", True
            continue
        # Only the piece of a line cut at the block's edges is copied twice.
        text = b"".join((carry, memoryview(block)[: cut + 1])) if carry else block[: cut + 1]
        carry = block[cut + 1 :]
        if len(carry) > MAX_LINE_BYTES:
            carry, skipping = b"", True
        yield TextChunk(text, len(text))
    if skipping:  # a too long last line without its newline
        long.skip_one()
    elif carry:
        yield TextChunk(carry, len(carry))


def note_invalid_utf8(diag: SourceDiagnostics, lines: int) -> None:
    """The note a source gets when ``lines`` of its lines held invalid UTF-8."""
    if lines:
        diag.note(f"{lines:,} line(s) held invalid UTF-8 bytes (shown as U+FFFD)", lost=True)


def decode_lines(text: bytes) -> tuple[pl.Series, int]:
    """The lines of ``text`` (split at ``\\n``; a final newline ends the last line; one CR
    before each newline dropped) and how many held invalid UTF-8 (replaced by U+FFFD)."""
    if not text:
        return pl.Series("line", [], dtype=pl.String), 0
    if not text.startswith(_COMPRESSED_STARTS):
        # Polars' own line reader splits, drops the CR of a CRLF and validates UTF-8 in one pass
        # over the bytes (tests/unit/ingest/text holds it to splitting in Python). It takes text
        # that starts like a compressed stream for one: those starts go to Python.
        try:
            return pl.read_lines(text, name="line").to_series(), 0
        except (pl.exceptions.ComputeError, OSError):
            pass  # invalid UTF-8: the Python path replaces and counts it
    parts = text.split(b"\n")
    if text.endswith(b"\n"):
        parts.pop()
    return _decode_lines(parts, b"\r" in text)


def _decode_lines(parts: list[bytes], has_cr: bool) -> tuple[pl.Series, int]:
    # Validating UTF-8 in one Binary->String cast is several times faster than decoding each
    # line in Python or splitting one huge Polars string.
    try:
        lines = pl.Series("line", parts, dtype=pl.Binary).cast(pl.String)
        bad = 0
    except pl.exceptions.ComputeError:
        text = b"\n".join(parts).decode("utf-8", errors="replace").split("\n")
        lines = pl.Series("line", text, dtype=pl.String)
        bad = int(lines.str.contains("\ufffd", literal=True).sum())
    # CRLF endings and vLLM's "\r\n"-joined continuation records both leave a CR behind.
    if has_cr:
        lines = lines.str.strip_suffix("\r")
    return lines, bad


def first_line(lines: pl.Series) -> str | None:
    """The first of ``lines`` (None when there are none): the example a skip reason keeps."""
    return str(lines[0]) if lines.len() and lines[0] is not None else None
