"""The compiled scanner reads what the vectorised reader reads: on every shape of line, in
chunks of any size, the vLLM parser gives the same trace and the same diagnostics whether the
scanner reads the request records and access lines first or not.

Lines are generated from the shapes real logs hold (``docs/formats/vllm.md``,
``docs/formats/log-prefixes-and-times.md``) and from the traps around them: ids with dots and
odd characters, ``max_tokens`` inside a stop string, token id lists cut or stated, OOM text in
a prompt, colour codes and records glued past the prefix, Ray's repeat suffix, access lines
with a header-like path, invalid dates, CRLF.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.ingest.parser_api import ClockOptions, ParseContext, ParseResult
from oomtrace.ingest.text.input_file import InputFile, TextChunk
from oomtrace.ingest.vllm import chunk_reading, log_parser
from oomtrace.ingest.vllm.chunk_reading import Reading
from oomtrace.ingest.vllm.log_parser import PARSER

DATA = Path(__file__).resolve().parents[3] / "data" / "vllm"
SAMPLES = Path(__file__).resolve().parents[4] / "sample_logs"


def test_the_compiled_scanner_is_built_where_ci_runs() -> None:
    # The scanner is optional (a machine without a C compiler reads every line the vectorised
    # way), so its tests skip where it is missing: CI must never test the fallback alone.
    if os.environ.get("CI", "").lower() not in ("1", "true", "yes"):
        pytest.skip("outside CI the scanner may be missing (no C compiler)")
    assert chunk_reading.scanner_available(), "oomtrace.ingest.vllm._line_scan was not built"


@pytest.fixture(scope="module")
def compiled() -> None:
    """The scanner's tests need it built (`pip install -e .` builds it)."""
    if not chunk_reading.scanner_available():
        pytest.skip("the C line scanner (oomtrace.ingest.vllm._line_scan) is not built")


def _parse(
    path: Path,
    *,
    scan: bool | None,
    piece_bytes: int = 1 << 20,
    pieces: int = 4,
    group: int | None = None,
) -> tuple[ParseResult, SourceDiagnostics]:
    """``path`` read in pieces, with the scanner (``scan``) or without it, or (None) in lines
    as a small input is read; ``pieces`` to a chunk (scanned pieces whose lines were copied out:
    ``group``, else as many)."""
    patch = pytest.MonkeyPatch()
    patch.setattr(chunk_reading, "SCAN_MIN_BYTES", 1 << 62 if scan is None else 0)
    patch.setattr(chunk_reading, "PIECE_BYTES", piece_bytes)
    patch.setattr(chunk_reading, "PIECES", pieces)
    patch.setattr(chunk_reading, "GROUP_PIECES", group or pieces)
    if scan is False:  # the same pieces, every line read the vectorised way
        patch.setattr(log_parser, "reading_for", lambda size: Reading(pieces=True, scan=False))
    try:
        diag = SourceDiagnostics(path.name, "vllm-log", "n")
        ctx = ParseContext(clock=ClockOptions(year=2025), mtime=datetime(2026, 1, 2, tzinfo=UTC))
        return PARSER.parse(InputFile(path, path.name), ctx, diag), diag
    finally:
        patch.undo()


def _same_tables(got: ParseResult, want: ParseResult) -> None:
    for table in ("samples", "requests", "events"):
        ours, theirs = getattr(got, table), getattr(want, table)
        assert (ours is None) == (theirs is None), table
        if ours is not None:
            assert_frame_equal(ours, theirs, check_row_order=True)
    assert (got.engine, got.engine_config, got.clock, got.host) == (
        want.engine, want.engine_config, want.clock, want.host
    )  # fmt: skip


def _same(path: Path, piece_bytes: int, pieces: int = 2) -> None:
    """The scanner reads ``path`` as the vectorised reader does, diagnostics included: in pieces
    of ``piece_bytes`` (so records fall on both sides of every cut), as it does in the same
    pieces; and in one piece, as it does a small input, in lines. (Chunks are read alone: what a
    chunk's lines tell each other, such as the example kept for a skipped reason, is the same
    only where the chunks are.)"""
    got, got_diag = _parse(path, scan=True, piece_bytes=piece_bytes, pieces=pieces)
    want, want_diag = _parse(path, scan=False, piece_bytes=piece_bytes, pieces=pieces)
    _same_tables(got, want)
    assert got_diag.to_json() == want_diag.to_json()
    whole, whole_diag = _parse(path, scan=True, piece_bytes=1 << 30, pieces=1)
    lines, lines_diag = _parse(path, scan=None)
    _same_tables(whole, lines)
    assert whole_diag.to_json() == lines_diag.to_json()


def _files() -> Iterator[Path]:
    yield from sorted(DATA.glob("*.log"))
    yield from sorted(SAMPLES.glob("*/vllm*.log"))


@pytest.mark.parametrize("path", list(_files()), ids=lambda p: p.name)
def test_every_real_log_reads_the_same_with_the_scanner(compiled: None, path: Path) -> None:
    # GIVEN a log in a real format WHEN the scanner reads it first, in small pieces (so records
    # fall on both sides of every cut) THEN the trace and diagnostics are the vectorised reader's
    _same(path, piece_bytes=1500)


# --- generated lines of every shape -----------------------------------------------------------

_ID = st.one_of(
    st.from_regex(r"(chat)?cmpl-[0-9a-f]{8,32}(-0)?", fullmatch=True),
    st.sampled_from(["abc.", "a.b.", ".", "x:y", "id with space", "ALLOC_FAILED-1", "é-1", "a,b"]),
)
_STAMP = st.one_of(
    st.just(""),
    st.sampled_from(
        [
            "2025-06-02T08:00:00Z ", "2025-06-02T08:00:00.5Z ", "2025-06-02T08:00:00.123456789Z ",
            "2025-06-02T08:00:00,25Z ", "2025-06-02T08:00:01.1234567891Z ",
            "2025-06-02T08:00:00+02:00 ", "2025-02-30T08:00:00Z ", "2025-06-02T24:00:00Z ",
            "2025-06-02 08:00:00 ", "1969-12-31T23:59:59Z ", "2025-12-31T23:59:59.999Z ",
        ]
    ),
)  # fmt: skip
_PROC = st.sampled_from(
    [
        "", "(APIServer pid=1) ", "\x1b[1;36m(APIServer pid=1)\x1b[0;0m ",
        "(EngineCore_DP0 pid=2) (Worker pid=3) ", "(RayWorker pid=4, ip=10.0.0.1) ",
        "(Map(Batches(X)) pid=5, ip=10.0.0.2) ", "(a:b pid=6) ", "(pid=7 x) ",
        "[pod/vllm-0/vllm] ", "vllm-1  | ", "3: ", "Jun 02 08:00:00 host vllm[9]: ",
    ]
)  # fmt: skip
_HEADER = st.builds(
    "{} {}-{} {}:{}:{}{} {}{}:{}] ".format,
    st.sampled_from(["INFO", "DEBUG", "WARNING", "ERROR", "CRITICAL", "NOTICE"]),
    st.sampled_from(["06", "12", "01", "13"]),
    st.sampled_from(["02", "31", "29"]),
    st.sampled_from(["08", "23", "00"]),
    st.sampled_from(["00", "59"]),
    st.sampled_from(["00", "59", "07"]),
    st.sampled_from(["", ".123"]),
    st.sampled_from(["[", ""]),
    st.sampled_from(["logger.py", "async_llm.py", "x-1.py", "a b.py"]),
    st.sampled_from(["43", "269"]),
)
_PARAMS = st.builds(
    "SamplingParams(n={}, temperature=0.7, stop={}, max_tokens={}, min_tokens=0{})".format,
    st.sampled_from(["1", "2", "None", "x"]),
    st.sampled_from(["[]", "['max_tokens=5']", "['xmax_tokens=9']", "['INFO 06-02 08:00:00 ']"]),
    st.sampled_from(["512", "None", "0007", "99999999999999999999", "x"]),
    st.sampled_from(
        [
            "", ", best_of=2, logprobs=5, prompt_logprobs=None", ", logprobs=None, best_of=None",
            ", prompt_logprobs=3, top_n=4, xbest_of=7", ", stop=['logprobs=1', 'n=3']",
        ]
    ),
)  # fmt: skip
_PROMPT = st.sampled_from(
    [
        "'hi'", "'CUDA out of memory. Tried to allocate 2.00 GiB'", "'max_tokens=3'",
        "'prompt_token_ids: [1, 2]'", "'a\x1b[0mb'", "'ünïcode'",
    ]
)  # fmt: skip
_TOKENS = st.sampled_from(
    [
        "", ", prompt_token_ids: [1, 2, 3]", ", prompt_token_ids: []",
        ", prompt_token_ids: [1, 2, ...]", ", prompt_token_ids: <12 token ids>",
        ", prompt_token_ids: [1, 2], prompt_token_ids: [5]",
        ", prompt_token_ids: <99999999999999999999 token ids>",
    ]
)  # fmt: skip
_RECEIVED = st.one_of(
    st.builds("Received request {}: params: {}, lora_request: None.".format, _ID, _PARAMS),
    st.builds(
        "Received request {}: prompt: {}, params: {}{}, lora_request: None.".format,
        _ID, _PROMPT, _PARAMS, _TOKENS,
    ),
)  # fmt: skip
_GLUED: Final = (
    "INFO 06-02 08:00:01 [loggers.py:1] Engine 000: Avg prompt throughput: 1.0 tokens/s, Avg "
    "generation throughput: 2.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: "
    "1.0%"
)
_SUFFIX = st.sampled_from(["", "", "", " [repeated 3x across cluster]", _GLUED, "\x1b[0m", "\r"])
_BODY = st.one_of(
    _RECEIVED,
    st.builds("Added request {}".format, _ID),
    st.builds("Added request {}.".format, _ID),
    st.builds("Aborted request {}.".format, _ID),
    st.builds("Aborted request(s) {}.".format, _ID),
    st.builds("Aborted request(s) {}, {}.".format, _ID, _ID),
    st.sampled_from(
        [
            _GLUED.split("] ", 1)[1],
            "Available KV cache memory: 2.30 GiB",
            "Model loading took 15.27 GiB memory and 6.123456 seconds",
            (
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.25 GiB. GPU 0 "
                "has a total capacity of 79.19 GiB of which 301.06 MiB is free."
            ),
            "Something else entirely",
        ]
    ),
)
_ACCESS = st.builds(
    'INFO:     {}:{} - "{} {} HTTP/1.1" {}{}'.format,
    st.sampled_from(["10.0.0.1", "127.0.0.1", "[::1]"]),
    st.sampled_from(["40000", "5"]),
    st.sampled_from(["POST", "GET"]),
    st.sampled_from(["/v1/chat/completions", "/Received%20request", "/out_of_memory", "/x y"]),
    st.sampled_from(["200", "500"]),
    st.sampled_from([" OK", " Internal Server Error", "", " 0K"]),
)
_LINE = st.one_of(
    st.builds("{}{}{}{}{}".format, _STAMP, _PROC, _HEADER, _BODY, _SUFFIX),
    st.builds("{}{}{}".format, _STAMP, _PROC, _ACCESS),
    st.sampled_from(["", "   ", "Traceback (most recent call last):", '  File "x.py", line 1']),
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(lines=st.lists(_LINE, min_size=1, max_size=30), piece_bytes=st.integers(200, 4000))
def test_generated_lines_read_the_same_with_the_scanner(
    compiled: None, tmp_path: Path, lines: list[str], piece_bytes: int
) -> None:
    # GIVEN a log of lines of every shape, the traps among them
    path = tmp_path / "vllm.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    # WHEN the scanner reads it first, in pieces of any size THEN it reads what the vectorised
    # reader reads, diagnostics included
    _same(path, piece_bytes)


def test_a_log_without_times_read_in_many_pieces_keeps_its_order(
    compiled: None, tmp_path: Path
) -> None:
    # GIVEN a log no line of which vLLM's header places in time (a file name with a space),
    # read in pieces of 200 bytes: its lines are numbered from piece 3 on as piece * 2**32 + line
    # (hypothesis found it: the stand-in instant of such a line was past the nanosecond clock)
    head = "INFO 06-02 08:00:00 [a b.py:43] "
    params = "params: SamplingParams(n=1, temperature=0.7, stop=[], max_tokens=512), lora: None."
    access = 'INFO:     10.0.0.1:40000 - "POST /v1/chat/completions HTTP/1.1" 200 OK'
    lines = [
        head + "Available KV cache memory: 2.30 GiB",
        head + f"Received request abc.: prompt: 'hi', {params}",
        access,
        access,
        head + f"Received request ALLOC_FAILED-1: {params}",
    ]
    path = tmp_path / "vllm.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    # THEN both readers read it alike, without a time
    _same(path, 200)


def test_long_ids_with_a_trap_past_their_first_sixteen_bytes_read_the_same(
    compiled: None, tmp_path: Path
) -> None:
    # GIVEN "Added request" and abort lines whose ids run past sixteen bytes (the scanner checks
    # an id sixteen bytes a step) with what makes an id not plain after them: a comma, a space,
    # "ALLOC_FAILED", a non-ASCII letter, a DEL, at every offset of a step
    head = "2025-06-02T08:00:00Z INFO 06-02 08:00:00 [async_llm.py:269] "
    lines = [head + "Added request chatcmpl-0123456789abcdef0123."]
    for trap in (",x", " x", "ALLOC_FAILED", "é", "\x7f", "A"):
        for offset in range(16, 34):
            rid = "chatcmpl-0123456789abcdef0123456789"[:offset] + trap + "-1"
            lines += [head + f"Added request {rid}.", head + f"Aborted request {rid}."]
    path = tmp_path / "vllm.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    # WHEN the scanner reads it first THEN it reads what the vectorised reader reads
    _same(path, piece_bytes=1 << 20)


def test_a_piece_with_invalid_utf8_is_read_whole_by_the_vectorised_reader(
    compiled: None, tmp_path: Path
) -> None:
    # GIVEN a log whose second piece holds an invalid byte
    good = "2025-06-02T08:00:00Z INFO 06-02 08:00:00 [logger.py:43] Added request a-{}\n"
    text = "".join(good.format(i) for i in range(40)).encode()
    path = tmp_path / "vllm.log"
    path.write_bytes(text[:2000] + b"\xff" + text[2000:])
    # WHEN the scanner reads it THEN the result is the vectorised reader's (the bad byte counted)
    _same(path, piece_bytes=1000)
    assert any(
        "invalid UTF-8" in note for note in _parse(path, scan=True, piece_bytes=1000)[1].notes
    )


def _scanned(piece: TextChunk) -> Any:
    from oomtrace.ingest.vllm.scanned_chunk import scan_chunk

    scanned = scan_chunk(piece, 1)
    assert scanned is not None
    return scanned[0]


def _in_a_new_thread(work: Callable[[], Any]) -> Any:
    """``work`` done in a thread of its own: the scanner's outputs are each thread's, kept from
    piece to piece (``scanned_chunk._Outputs``)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(work).result()


def test_a_piece_with_more_lines_than_the_outputs_hold_is_counted_and_read_again(
    compiled: None,
) -> None:
    from oomtrace.ingest.vllm.scanned_chunk import scan_chunk

    # GIVEN a real log (vLLM 0.11, two ranks, an OOM) and a thread whose outputs were sized
    # for a piece of one line
    data = (DATA / "v1_0.11_tp2_oom.log").read_bytes()
    first = data[: data.index(b"\n") + 1]

    def one_line_then_all() -> Any:
        assert scan_chunk(TextChunk(first, len(first)), 1) is not None
        return _scanned(TextChunk(data, len(data)))

    # WHEN the whole log is then scanned in that thread
    got = _in_a_new_thread(one_line_then_all)
    # THEN every line is read, as by a thread whose outputs had room from the start
    want = _in_a_new_thread(lambda: _scanned(TextChunk(data, len(data))))
    assert got.lines == want.lines == data.count(b"\n") == 33
    assert got.records == want.records > 0
    for name in ("general", "runs", "requests", "access_head"):
        assert_frame_equal(getattr(got, name), getattr(want, name))


def test_a_piece_of_valid_utf8_beyond_ascii_stays_with_the_scanner(compiled: None) -> None:

    # GIVEN a real log whose start-up banner is drawn in block characters (vLLM 0.32 on CPU)
    data = (DATA / "v1_0.32_cpu.log").read_bytes()
    assert max(data) >= 0x80
    # WHEN the scanner reads it THEN it keeps the piece (the bytes are UTF-8): the banner's
    # lines go to the vectorised reader as they were written, the request records are read
    scanned = _scanned(TextChunk(data, len(data)))
    banner = [line for line in scanned.general["line"].to_list() if "█" in line]
    assert banner == [line for line in data.decode().splitlines() if "█" in line]
    assert scanned.records > 0
    assert scanned.invalid_lines == 0


# --- any bytes at all -------------------------------------------------------------------------

_NEWLINE = st.sampled_from(["\n", "\n", "\n", "\r\n", "\r\r\n"])
_NOISE = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=60
)  # any characters: non-ASCII, control bytes, escapes, lone CRs


@st.composite
def _mixed_text(draw: st.DrawFn) -> str:
    """Lines of the real shapes and of noise, some cut short or run together, with LF or CRLF
    endings and perhaps none at the end."""
    parts: list[str] = []
    for _ in range(draw(st.integers(1, 25))):
        line = draw(st.one_of(_LINE, _LINE, _NOISE))
        if line and draw(st.booleans()) and draw(st.booleans()):
            line = line[: draw(st.integers(0, len(line) - 1))]  # a line cut short
        parts.append(line + draw(_NEWLINE))
    text = "".join(parts)
    return text[: -1 if draw(st.booleans()) else len(text)]


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(text=_mixed_text(), piece_bytes=st.integers(100, 3000))
def test_random_mixes_of_lines_and_noise_read_the_same_with_the_scanner(
    compiled: None, tmp_path: Path, text: str, piece_bytes: int
) -> None:
    # GIVEN a log of real line shapes mixed with any text, lines cut, CR/LF, no final newline
    path = tmp_path / "vllm.log"
    path.write_bytes(text.encode())
    # WHEN the scanner reads it first THEN it reads what the vectorised reader reads
    _same(path, piece_bytes)


def _scan(
    data: bytes,
) -> tuple[tuple[int, int, int, int, int, bool, int], tuple[np.ndarray, ...]]:
    from oomtrace.ingest.vllm import _line_scan as scan

    buf = np.frombuffer(data, np.uint8)
    n = scan.count_lines(buf)
    outputs = (
        np.full((scan.LINE_FIELDS, n), -7, np.int64),
        np.full((scan.LINE_FIELDS, n), -7, np.int64),
        np.full((scan.RECORD_FIELDS, n), -7, np.int64),
        np.full((scan.RUN_FIELDS, n), -7, np.int64),
        np.zeros(len(data), np.uint8),
    )
    scanned = scan.scan_lines(buf, *outputs)
    assert scanned is not None  # a column per line is room enough
    return scanned, outputs


@settings(max_examples=300, deadline=None)
@given(
    data=st.one_of(
        st.binary(max_size=600),
        _mixed_text().map(str.encode),
        st.tuples(_mixed_text(), st.binary(max_size=8), st.integers(0, 10**4)).map(
            lambda t: t[0].encode()[: t[2]] + t[1] + t[0].encode()[t[2] :]
        ),  # bytes of any value put into real lines (invalid UTF-8 among them)
    )
)
def test_the_scanner_accounts_for_every_line_of_any_bytes_within_its_bounds(
    compiled: None, data: bytes
) -> None:
    from oomtrace.ingest.vllm import _line_scan as scan

    # WHEN the scanner reads any bytes at all (the parser never hands it invalid UTF-8, but
    # nothing it reads may take it out of bounds)
    (n_general, n_access, n_records, n_runs, n_lines, non_ascii, widest), outputs = _scan(data)
    general, access, records, runs, ids = outputs
    # THEN every line is one of its outputs, once, in order, within the text, and counted
    lines = data.split(b"\n")
    if not lines[-1]:  # the text ends with its last line's newline (or is empty)
        lines.pop()
    assert n_general + n_access + n_records == len(lines) == n_lines == scan.count_lines(data)
    # AND it says whether any byte is not ASCII (only then is the text checked for UTF-8)
    assert non_ascii == any(byte >= 0x80 for byte in data)
    # AND how long its longest line is (without its newline and one CR before it)
    assert widest == max((len(line.removesuffix(b"\r")) for line in lines), default=0)
    taken = np.concatenate(
        [general[scan.L_LINE, :n_general], access[scan.L_LINE, :n_access],
         records[scan.R_LINE, :n_records]]
    )  # fmt: skip
    assert sorted(taken.tolist()) == list(range(len(lines)))
    for table, count in ((general, n_general), (access, n_access)):
        for number, start, stop in table[:, :count].T.tolist():
            assert data[start:stop] == lines[number].removesuffix(b"\r")
    # AND each record's id was copied from its own line, its run counted once
    for k in range(n_records):
        line = lines[records[scan.R_LINE, k]]
        start, stop = records[scan.R_ID_START, k], records[scan.R_ID_STOP, k]
        assert records[scan.R_KIND, k] in (scan.RECEIVED, scan.ADDED, scan.ABORTED)
        if records[scan.R_TOLD, k]:
            assert start == stop == -1
        else:
            assert 0 <= start <= stop <= len(data)  # an id "." is read as empty, as the table does
            assert bytes(ids[start:stop]) in line
    assert int(runs[scan.RUN_WEIGHT, :n_runs].sum()) == n_records


_ANY_BYTES: Final = st.one_of(
    st.binary(max_size=600),
    _mixed_text().map(str.encode),
    st.tuples(_mixed_text(), st.binary(max_size=8), st.integers(0, 10**4)).map(
        lambda t: t[0].encode()[: t[2]] + t[1] + t[0].encode()[t[2] :]
    ),  # bytes of any value put into real lines (invalid UTF-8 among them)
)


def _both_widths(data: bytes) -> tuple[Any, Any]:
    """``data`` scanned 32 bytes a step (AVX2) and 16 (SSE2)."""
    from oomtrace.ingest.vllm import _line_scan as scan

    if not scan.set_wide(True):
        pytest.skip("this processor has no AVX2: the scanner reads 16 bytes a step only")
    try:
        wide = _scan(data)
        scan.set_wide(False)
        narrow = _scan(data)
    finally:
        scan.set_wide(True)
    return wide, narrow


@settings(max_examples=300, deadline=None)
@given(data=_ANY_BYTES)
def test_the_scanner_reads_the_same_32_or_16_bytes_a_step(compiled: None, data: bytes) -> None:
    # WHEN any bytes are scanned with AVX2 and with SSE2 alone THEN every output is the same
    (wide, wide_out), (narrow, narrow_out) = _both_widths(data)
    assert wide == narrow
    for ours, theirs in zip(wide_out, narrow_out, strict=True):
        np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("path", list(_files()), ids=lambda p: p.name)
def test_every_real_log_scans_the_same_32_or_16_bytes_a_step(compiled: None, path: Path) -> None:
    (wide, wide_out), (narrow, narrow_out) = _both_widths(path.read_bytes())
    assert wide == narrow
    for ours, theirs in zip(wide_out, narrow_out, strict=True):
        np.testing.assert_array_equal(ours, theirs)


def test_the_scanner_refuses_outputs_of_the_wrong_shape_type_or_size(compiled: None) -> None:
    from oomtrace.ingest.vllm import _line_scan as scan

    text = b"2025-06-02T08:00:00Z INFO 06-02 08:00:00 [logger.py:43] Added request a\n" * 3
    buf = np.frombuffer(text, np.uint8)

    def outputs(columns: int = 3, dtype: type = np.int64, ids: int = len(text)) -> list[Any]:
        return [
            np.zeros((scan.LINE_FIELDS, columns), dtype),
            np.zeros((scan.LINE_FIELDS, columns), dtype),
            np.zeros((scan.RECORD_FIELDS, columns), dtype),
            np.zeros((scan.RUN_FIELDS, columns), dtype),
            np.zeros(ids, np.uint8),
        ]

    assert scan.scan_lines(buf, *outputs()) == (0, 0, 3, 1, 3, False, len(text) // 3 - 1)
    # Too little room is no error: None, and the caller counts the lines and gives more.
    assert scan.scan_lines(buf, *outputs(columns=2)) is None  # a column short
    assert scan.scan_lines(buf, *outputs(ids=2)) is None  # no room for the ids
    wrong: list[list[Any]] = [
        outputs(dtype=np.int32),
        [np.zeros((2, 3), np.int64), *outputs()[1:]],  # the wrong rows
        [*outputs()[:2], np.zeros((scan.RECORD_FIELDS, 4), np.int64), *outputs()[3:]],
        [*outputs()[:4], np.zeros((2, len(text)), np.uint8)],
        [outputs()[0][:, ::2], *outputs()[1:]],  # not contiguous
    ]
    for bad in wrong:
        with pytest.raises(ValueError, match=r"scan_lines|general|ids|expected|contiguous"):
            scan.scan_lines(buf, *bad)
    with pytest.raises(BufferError):
        scan.scan_lines(buf, *outputs()[:4], b"read-only")  # ids must be writable
    views = np.zeros((1, 16), np.uint8)
    starts, stops = np.array([0], np.int64), np.array([len(text) + 1], np.int64)
    with pytest.raises(ValueError, match="within b"):
        scan.write_views(buf, starts, stops, views)
    with pytest.raises(ValueError, match="expected"):
        scan.write_views(buf, starts, stops.astype(np.int32), views)
    scan.write_views(buf, starts, stops - 1, views)
    assert int.from_bytes(views[0, :4].tobytes(), "little") == len(text)


# --- chunks of scanned pieces -------------------------------------------------------------------


def _busy_log(requests: int) -> str:
    """A busy vLLM 0.12 server's log (the shapes of benchmarks/ingest_log.py, from vLLM's
    logger.py, async_llm.py, loggers.py and uvicorn): per request its "Received request" and
    "Added request" records and its access line, an abort each 7 requests and a stats line each
    25, under `kubectl logs --timestamps` and vLLM's coloured process prefix."""
    api = "\x1b[1;36m(APIServer pid=1)\x1b[0;0m "
    params = (
        "params: SamplingParams(n=1, presence_penalty=0.0, temperature=0.7, top_p=1.0, "
        "seed=None, stop=[], max_tokens={}, min_tokens=0, logprobs=None, prompt_logprobs=None, "
        "skip_special_tokens=True), lora_request: None."
    )
    lines = []
    for k in range(requests):
        second = k // 10
        outer = f"2025-06-02T08:{second // 60:02d}:{second % 60:02d}.{k % 10}00000000Z {api}"
        head = f"{outer}INFO 06-02 08:{second // 60:02d}:{second % 60:02d} "
        rid = f"chatcmpl-{k:032x}"
        lines += [
            f"{head}[logger.py:43] Received request {rid}: {params.format(16 + k)}",
            f"{head}[async_llm.py:269] Added request {rid}.",
            f'{outer}INFO:     10.0.0.{k % 250}:4{k:04d} - "POST /v1/completions HTTP/1.1" 200',
        ]
        if k % 7 == 3:
            lines.append(f"{head}[async_llm.py:437] Aborted request {rid}.")
        if k % 25 == 0:
            lines.append(
                f"{head}[loggers.py:123] Engine 000: Avg prompt throughput: {k}.5 tokens/s, "
                "Avg generation throughput: 11.0 tokens/s, Running: 3 reqs, Waiting: 1 reqs, "
                "GPU KV cache usage: 4.5%, Prefix cache hit rate: 49.7%"
            )
    return "\n".join(lines) + "\n"


def test_a_busy_servers_piece_is_let_go_once_scanned(compiled: None) -> None:
    from oomtrace.ingest.vllm.scanned_chunk import scan_piece

    # GIVEN a piece of a busy server's log: its few stats lines are the vectorised reader's
    data = _busy_log(200).encode()
    stats = [line for line in data.decode().splitlines() if "Engine 000" in line]
    # WHEN the scanner reads it
    scanned, held = scan_piece(TextChunk(data, len(data)), 0)
    del data
    # THEN those lines were copied out of the piece (which is held no longer) and read alike
    assert not held
    assert scanned.general["line"].to_list() == stats
    assert scanned.records == 200 + 200 + 29
    assert scanned.access == 200
    # AND a piece of start-up lines, nearly all the vectorised reader's, stays held (no copy)
    startup = (DATA / "v1_0.11_tp2_oom.log").read_bytes()
    assert scan_piece(TextChunk(startup, len(startup)), 0)[1]


def test_chunks_of_many_scanned_pieces_read_what_lines_read(compiled: None, tmp_path: Path) -> None:
    # GIVEN a busy server's log cut into some 40 pieces of 3,000 bytes
    path = tmp_path / "vllm.log"
    path.write_text(_busy_log(300), encoding="utf-8")
    # WHEN the scanner reads it, up to 8 pieces a chunk (their other lines copied out), and
    # when it is read in lines
    got, got_diag = _parse(path, scan=True, piece_bytes=3000, pieces=2, group=8)
    want, want_diag = _parse(path, scan=None)
    # THEN the tables are the same, and every line is counted alike
    _same_tables(got, want)
    assert got.requests is not None
    assert got.requests.height == 300 + 43
    assert (got_diag.lines_read, got_diag.lines_recognised) == (
        want_diag.lines_read, want_diag.lines_recognised
    )  # fmt: skip


def test_lines_left_by_the_scanner_are_not_taken_for_a_fold_the_whole_chunk_has_not(
    compiled: None, tmp_path: Path
) -> None:
    # The cause of a failure of test_random_mixes_of_lines_and_noise_read_the_same_with_the_
    # scanner, crafted: GIVEN a Received record (the longest line, which the scanner takes)
    # and two stats lines of one length with Ray's repeat suffix, each followed by a line of
    # text that starts no record
    head = "INFO 06-02 08:00:00 [logger.py:43] "
    received = (
        f"{head}Received request cmpl-1: prompt: 'x', params: SamplingParams(n=1, max_tokens=5,"
        " temperature=0.7, top_p=1.0, top_k=-1, min_p=0.0, seed=None), prompt_token_ids: [1, 2,"
        " 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]"
    )
    stats = (
        "INFO 06-02 08:00:01 [loggers.py:123] Engine 000: Avg prompt throughput: 2192.5 "
        "tokens/s, Running: 3 reqs [repeated 3x across cluster]"
    )
    path = tmp_path / "vllm.log"
    path.write_text(f"{received}\n{stats}\nsome text\n{stats}\nmore text\n")
    # WHEN the file is read as one scanned piece and in lines THEN the two read the same: no
    # fold (the longest line has no piece after it), and Ray's note in both
    whole, whole_diag = _parse(path, scan=True, piece_bytes=1 << 30, pieces=1)
    lines, lines_diag = _parse(path, scan=None)
    assert any("Ray's log de-duplication left out 4" in note for note in lines_diag.notes)
    assert whole_diag.to_json() == lines_diag.to_json()
    _same_tables(whole, lines)
