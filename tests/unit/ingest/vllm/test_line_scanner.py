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
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.ingest.parser_api import ClockOptions, ParseContext, ParseResult
from oomtrace.ingest.text.input_file import InputFile
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


@pytest.fixture
def compiled() -> None:
    """The scanner's tests need it built (`pip install -e .` builds it)."""
    if not chunk_reading.scanner_available():
        pytest.skip("the C line scanner (oomtrace.ingest.vllm._line_scan) is not built")


def _parse(
    path: Path, *, scan: bool | None, piece_bytes: int = 1 << 20, pieces: int = 4
) -> tuple[ParseResult, SourceDiagnostics]:
    """``path`` read in pieces, with the scanner (``scan``) or without it, or (None) in lines
    as a small input is read."""
    patch = pytest.MonkeyPatch()
    patch.setattr(chunk_reading, "SCAN_MIN_BYTES", 1 << 62 if scan is None else 0)
    patch.setattr(chunk_reading, "PIECE_BYTES", piece_bytes)
    patch.setattr(chunk_reading, "PIECES", pieces)
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
