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

import io
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

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
# Below glibc's 32 MiB ceiling for its mmap threshold: once the first block is freed, later
# blocks of this size come from the heap, reusing pages instead of faulting fresh ones in for
# every block (measured: reading and cutting a block costs a third of what it does at 32 MiB).
CHUNK_BYTES: Final = 24 * 1024 * 1024
_GZIP_WBITS: Final = 16 + zlib.MAX_WBITS
# Starts that Polars' CSV reader treats specially: a byte-order mark, and the magic numbers of
# gzip, zlib and zstd streams.
_NOT_FOR_CSV: Final = (
    b"\xef\xbb\xbf", GZIP_MAGIC, b"\x78\x01", b"\x78\x5e", b"\x78\x9c", b"\x78\xda",
    b"\x28\xb5\x2f\xfd",
)  # fmt: skip
# Control bytes that logs hardly ever hold, tried in turn as a CSV separator the text lacks.
_SEPARATORS: Final = (b"\x1f", b"\x1e", b"\x1d", b"\x1c", b"\x01", b"\x02", b"\x03")


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

    def line_chunks(
        self, diag: SourceDiagnostics, chunk_bytes: int = CHUNK_BYTES
    ) -> Iterator[LineChunk]:
        """The file's lines, in chunks cut at newlines. Counts ``diag.lines_read``. A line longer
        than :data:`MAX_LINE_BYTES` is skipped (the lines after it in its chunk move up one)."""
        lines_in = _LineCounts(diag)
        line_no = 1
        carry = b""
        skipping = False  # inside a line already known to be too long: read on to its end
        for read in self.blocks(diag, chunk_bytes):
            block = read
            if skipping:
                end = read.find(b"\n")
                if end < 0:
                    continue
                block, skipping = read[end + 1 :], False
                lines_in.skipped_one()
                line_no += 1
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
            lines = lines_in.decode(text)
            yield LineChunk(lines, line_no)
            line_no += lines.len() + lines_in.long_in_last
        if carry:
            yield LineChunk(lines_in.decode(carry), line_no)
        if skipping:  # a too long last line without its newline
            lines_in.skipped_one()
        diag.skip(LONG_LINE, lines_in.long, None)
        if lines_in.invalid:
            diag.note(
                f"{lines_in.invalid:,} line(s) held invalid UTF-8 bytes (shown as U+FFFD)",
                lost=True,
            )


class _LineCounts:
    """What :meth:`InputFile.line_chunks` counts as it goes: lines read (on ``diag``), too
    long, with invalid UTF-8."""

    def __init__(self, diag: SourceDiagnostics) -> None:
        self.diag = diag
        self.long = self.invalid = self.long_in_last = 0

    def skipped_one(self) -> None:
        self.long += 1
        self.diag.lines_read += 1

    def decode(self, text: bytes) -> pl.Series:
        lines, bad = decode_lines(text)
        self.invalid += bad
        self.diag.lines_read += lines.len()
        too_long = lines.str.len_bytes() > MAX_LINE_BYTES
        self.long_in_last = int(too_long.sum())
        if self.long_in_last:
            lines = lines.filter(~too_long)
            self.long += self.long_in_last
        return lines


def decode_lines(text: bytes) -> tuple[pl.Series, int]:
    """The lines of ``text`` (split at ``\\n``; a final newline ends the last line; one CR
    before each newline dropped) and how many held invalid UTF-8 (replaced by U+FFFD)."""
    if not text:
        return pl.Series("line", [], dtype=pl.String), 0
    separator = next((s for s in _SEPARATORS if s not in text), None)
    if separator is not None and not text.startswith(_NOT_FOR_CSV):
        # Polars' CSV reader with a separator the text lacks and no quoting is a line splitter
        # that validates UTF-8 as it goes: twice as fast as splitting in Python. It also drops
        # the CR of a CRLF (as below) and, only at the very start, a byte-order mark, and it
        # takes text that starts like a compressed stream for one: those starts go to Python.
        try:
            lines = pl.read_csv(
                text,
                has_header=False,
                separator=separator.decode(),
                quote_char=None,
                schema={"line": pl.String},
                empty_string_is_null=False,
                raise_if_empty=False,
            ).to_series()
        except (pl.exceptions.ComputeError, OSError):
            pass  # invalid UTF-8 (or a start read as compressed): the Python path handles it
        else:
            # Whatever else the reader might make of odd text, it must have given every line.
            if lines.len() == text.count(b"\n") + (not text.endswith(b"\n")):
                return lines, 0
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
