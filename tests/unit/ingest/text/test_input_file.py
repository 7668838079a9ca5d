"""Inputs as text: gzip, truncated streams, invalid UTF-8, CRLF and chunk boundaries."""

from __future__ import annotations

import gzip
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.ingest.text.input_file import InputFile, decode_lines


def _diag() -> SourceDiagnostics:
    return SourceDiagnostics("f", "test", "n")


def _lines(path: Path, chunk: int = 1 << 20) -> tuple[list[str], SourceDiagnostics]:
    diag = _diag()
    source = InputFile(path, path.name)
    chunks = list(source.line_chunks(diag, chunk_bytes=chunk))
    return pl.concat([c.lines for c in chunks]).to_list() if chunks else [], diag


def test_lines_survive_chunk_boundaries_and_count(tmp_path: Path) -> None:
    text = "".join(f"line {i} " + "x" * (i % 7) + "\n" for i in range(1000))
    path = tmp_path / "a.log"
    path.write_text(text)
    lines, diag = _lines(path, chunk=97)
    assert lines == text.splitlines()
    assert diag.lines_read == 1000


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(min_value=0, max_value=300), min_size=1, max_size=40),
    st.integers(min_value=1, max_value=120),
    st.booleans(),
    st.booleans(),
)
def test_pieces_end_at_newlines_and_hold_the_whole_text(
    tmp_path_factory: pytest.TempPathFactory,
    widths: list[int],
    chunk: int,
    final_newline: bool,
    compressed: bool,
) -> None:
    # GIVEN lines of any width (some longer than a piece), plain or gzip, with or without a
    # final newline
    text = "\n".join(f"{i}:" + "x" * width for i, width in enumerate(widths)).encode()
    text += b"\n" if final_newline else b""
    path = tmp_path_factory.mktemp("pieces") / "a.log"
    path.write_bytes(gzip.compress(text) if compressed else text)
    # WHEN the file is read in pieces of about `chunk` bytes
    pieces = list(InputFile(path, "a").text_chunks(_diag(), chunk_bytes=chunk))
    # THEN every piece but the last ends at a newline, and together they are the text
    assert b"".join(bytes(piece.text) for piece in pieces) == text
    assert all(bytes(piece.text).endswith(b"\n") for piece in pieces[:-1])
    assert all(piece.size for piece in pieces)


def test_chunks_number_their_first_line(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    path.write_text("".join(f"{i}\n" for i in range(100)))
    chunks = list(InputFile(path, "a").line_chunks(_diag(), chunk_bytes=50))
    for chunk in chunks:
        assert chunk.lines[0] == str(chunk.first_line - 1)


def test_crlf_and_a_missing_final_newline(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    path.write_bytes(b"one\r\ntwo\r\nthree")
    assert _lines(path)[0] == ["one", "two", "three"]


def test_gzip_is_read_transparently_whatever_the_name(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    path.write_bytes(gzip.compress(b"alpha\nbeta\n"))
    source = InputFile(path, "server.log")
    assert source.compressed
    assert source.head() == "alpha\nbeta\n"
    assert _lines(path)[0] == ["alpha", "beta"]


def test_truncated_gzip_yields_what_was_there_with_a_note(tmp_path: Path) -> None:
    body = "".join(f"line {i}\n" for i in range(20000)).encode()
    path = tmp_path / "cut.log.gz"
    path.write_bytes(gzip.compress(body)[:-2000])
    lines, diag = _lines(path, chunk=4096)
    assert 0 < len(lines) < 20000
    assert lines[:3] == ["line 0", "line 1", "line 2"]
    assert any("compressed stream ends early" in n for n in diag.notes)


def test_invalid_utf8_is_replaced_and_counted(tmp_path: Path) -> None:
    path = tmp_path / "bad.log"
    path.write_bytes(b"ok\nbad \xff\xfe here\nok again\n")
    lines, diag = _lines(path)
    assert lines[1] == "bad \ufffd\ufffd here"
    assert diag.notes == ["1 line(s) held invalid UTF-8 bytes (shown as U+FFFD)"]


def test_read_bytes_of_a_truncated_gzip_keeps_the_prefix(tmp_path: Path) -> None:
    path = tmp_path / "m.json.gz"
    path.write_bytes(gzip.compress(b"{" + b" " * 100000 + b"}")[:-50])
    diag = _diag()
    data = InputFile(path, "m.json.gz").read_bytes(diag)
    assert data.startswith(b"{")
    assert diag.notes


def test_empty_lines_quotes_and_separator_bytes_keep_every_line(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    path.write_bytes(b'a\n\nb "q" c\r\n"open quote\nunit\x1fsep\nend\n')
    lines, diag = _lines(path)
    assert lines == ["a", "", 'b "q" c', '"open quote', "unit\x1fsep", "end"]
    assert diag.lines_read == 6


def test_fast_and_fallback_splitting_agree(tmp_path: Path) -> None:
    body = b"".join(b'line %d "x" \xff\r\n' % i if i % 3 else b"plain %d\n" % i for i in range(50))
    plain, with_sep = tmp_path / "a.log", tmp_path / "b.log"
    plain.write_bytes(body)
    with_sep.write_bytes(body + b"\x1f\n")
    fast, fast_diag = _lines(plain)
    slow, slow_diag = _lines(with_sep)
    assert slow[:-1] == fast
    assert fast_diag.notes == slow_diag.notes


def test_a_crlf_split_across_two_blocks_loses_its_cr(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    path.write_bytes(b"abc\r\n" + b"x" * 10 + b"\n")
    assert _lines(path, chunk=4)[0] == ["abc", "x" * 10]


def _reference_lines(text: bytes) -> tuple[list[str], int]:
    """What splitting in Python gives: lines at LF, one CR before each LF dropped, invalid
    UTF-8 replaced and the lines that held it counted."""
    parts = text.split(b"\n") if text else []
    if text.endswith(b"\n"):
        parts.pop()
    try:
        lines = [part.decode("utf-8") for part in parts]
        bad = 0
    except UnicodeDecodeError:
        lines = b"\n".join(parts).decode("utf-8", errors="replace").split("\n")
        bad = sum("\ufffd" in line for line in lines)
    return [line.removesuffix("\r") for line in lines], bad


# Separators, quotes, CRs, a byte-order mark, invalid UTF-8, and starts of compressed streams
# (gzip, zlib, zstd) that Polars' line reader would take for a whole compressed input.
_ODD_BYTES = [
    b"\n", b"\r", b"\r\n", b'"', b"\xef\xbb\xbf", b"\x1f", b"\x1e", b"\xff", b"\xc3",
    b"\x1f\x8b", b"x^", b"x\x01", b"x\xda\x80", b"(\xb5/\xfd",
]  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.binary(max_size=12),
            st.sampled_from(_ODD_BYTES),
            st.text(max_size=8).map(str.encode),
        ),
        max_size=30,
    )
)
def test_splitting_a_block_into_lines_matches_splitting_in_python(pieces: list[bytes]) -> None:
    # GIVEN any bytes: separators, quotes, CRs, byte-order marks, invalid UTF-8
    text = b"".join(pieces)
    # WHEN they are split into lines
    lines, bad = decode_lines(text)
    # THEN the lines and the count of lines with invalid UTF-8 are what Python's split gives
    assert (lines.to_list(), bad) == _reference_lines(text)


def test_a_block_that_starts_like_a_compressed_stream_keeps_its_lines(tmp_path: Path) -> None:
    # GIVEN a log whose first line starts with bytes a zlib stream starts with ("x^")
    path = tmp_path / "a.log"
    path.write_bytes(b"x^2 grows fast\nINFO 06-02 08:00:00 [x.py:1] ok\n")
    # WHEN it is read THEN the lines are there as written
    assert _lines(path)[0] == ["x^2 grows fast", "INFO 06-02 08:00:00 [x.py:1] ok"]
