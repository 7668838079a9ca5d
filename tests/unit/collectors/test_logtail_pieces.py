"""Long lines written in pieces by another process while the tail runs: a line is redacted whole
or dropped and counted, never stored in part (its prompt never reaches a segment)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from collectors.logtail import LogTailSource, TailSettings, resume_points
from collectors.segments import CaptureReadResult, read_capture
from collectors.writer import SegmentWriter
from tests.unit.collectors.factories import writer

SECRET = b"S3CR3T"
PARAMS = b", params: SamplingParams(n=1, temperature=0.0, max_tokens=7), lora_request: None."

# A separate process appends the pieces it is given, one per "go", and says when each is on disk.
APPENDER = """
import sys
path, sizes = sys.argv[1], [int(n) for n in sys.argv[2:]]
data = sys.stdin.buffer.read(sum(sizes))
with open(path, "ab", buffering=0) as f:
    at = 0
    for size in sizes:
        sys.stdin.buffer.readline()
        f.write(data[at : at + size])
        at += size
        sys.stdout.write("written\\n")
        sys.stdout.flush()
"""


class Appender:
    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self._proc = proc

    def next_piece(self) -> None:
        """Let the other process write its next piece; return once it is written."""
        assert self._proc.stdin is not None
        assert self._proc.stdout is not None
        self._proc.stdin.write(b"go\n")
        self._proc.stdin.flush()
        assert self._proc.stdout.readline() == b"written\n"


@contextmanager
def appender(path: Path, data: bytes, sizes: list[int]) -> Iterator[Appender]:
    assert sum(sizes) == len(data)
    args = [sys.executable, "-c", APPENDER, str(path), *map(str, sizes)]
    proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None
    proc.stdin.write(data)
    proc.stdin.flush()
    try:
        yield Appender(proc)
    finally:
        assert proc.stdin is not None
        assert proc.stdout is not None
        proc.stdin.close()
        proc.stdout.close()
        assert proc.wait(timeout=30) == 0


def request_line(prompt_bytes: int) -> bytes:
    prompt = (SECRET + b" and more words ") * (prompt_bytes // 22)
    return (
        b"INFO 03-11 06:18:50 [logger.py:39] Received request cmpl-7-0: prompt: '"
        + prompt
        + b"'"
        + PARAMS
        + b"\n"
    )


def split(data: bytes, parts: int) -> list[int]:
    size = len(data) // parts
    return [size] * (parts - 1) + [len(data) - size * (parts - 1)]


def captured_bytes(directory: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.oseg")))


def follow(log: Path, w: SegmentWriter, settings: TailSettings | None = None) -> LogTailSource:
    log.touch()
    source = LogTailSource(log, w, settings=settings)
    source.poll(1)
    return source


def capture_pieces(log: Path, data: bytes, sizes: list[int]) -> CaptureReadResult:
    """Follow ``log`` while another process appends ``data`` in pieces of ``sizes``, polling
    after each; the capture read back, once checked to hold no byte of the secret."""
    capture = log.parent / "capture"
    w = writer(capture)
    source = follow(log, w)
    with appender(log, data, sizes) as other:
        for ts in range(2, 2 + len(sizes)):
            other.next_piece()
            source.poll(ts)
    source.close()
    w.close()
    assert SECRET not in captured_bytes(capture)
    return read_capture(capture)


def test_a_long_request_line_written_in_pieces_is_redacted_whole(tmp_path: Path) -> None:
    # GIVEN a 200 KiB vLLM request line that the server writes in four pieces, the tail polling
    # after each (the first pieces are longer than the 64 Ki-character line cap)
    line = request_line(200 << 10)
    result = capture_pieces(tmp_path / "vllm.log", line, split(line, 4))
    # THEN no byte of the prompt is in the capture; the line is there once, redacted whole
    (lines,) = result.logs.values()
    (text,) = lines.text
    assert text.startswith("INFO 03-11 06:18:50 [logger.py:39] Received request cmpl-7-0: ")
    assert "prompt: <redacted" in text
    assert "max_tokens=7" in text


def test_a_line_longer_than_the_tail_can_read_is_dropped_and_counted(tmp_path: Path) -> None:
    # GIVEN a 9 MiB request line (over the 8 MiB a poll reads) written in three pieces, then a
    # short line
    log = tmp_path / "vllm.log"
    long_line = request_line(9 << 20)
    data = long_line + b"INFO 03-11 06:18:51 [loggers.py:80] after\n"
    result = capture_pieces(log, data, [*split(long_line, 3), len(data) - len(long_line)])
    # THEN the long line is not stored at all, the capture says one line was dropped, the next
    # line is read and a restart resumes after both
    (lines,) = result.logs.values()
    assert lines.text == ["INFO 03-11 06:18:51 [loggers.py:80] after"]
    (dropped,) = [d for d in result.diagnostics if d.kind == "long_log_line"]
    assert dropped.count == 1
    assert "8 MiB" in dropped.detail
    (point,) = resume_points(tmp_path / "capture", [log]).values()
    assert point.offset == len(data)


def test_an_agent_stopped_inside_an_unreadable_line_drops_it_again_after_a_restart(
    tmp_path: Path,
) -> None:
    # GIVEN an agent that read one line, then stopped while skipping a line too long to read
    settings = TailSettings(max_read_bytes=64 << 10)
    log, capture = tmp_path / "vllm.log", tmp_path / "capture"
    first = b"INFO 03-11 06:18:49 [loggers.py:80] first\n"
    long_line = request_line(200 << 10)
    w = writer(capture)
    source = follow(log, w, settings)
    with appender(log, first + long_line, [len(first), *split(long_line, 2)]) as other:
        other.next_piece()
        source.poll(2)
        other.next_piece()
        source.poll(3)
        source.close()
        w.close()
        other.next_piece()
    # WHEN a new agent resumes from the capture and a short line follows
    with log.open("ab") as f:
        f.write(b"INFO 03-11 06:18:52 [loggers.py:80] next\n")
    (point,) = resume_points(capture, [log]).values()
    w = writer(capture)
    restarted = LogTailSource(log, w, settings=settings, resume=point)
    for ts in range(4, 9):  # a poll reads 64 KiB here: five cover the rest of the file
        restarted.poll(ts)
    restarted.close()
    w.close()
    # THEN the long line is dropped (counted once), never stored, and both short lines are read
    assert SECRET not in captured_bytes(capture)
    result = read_capture(capture)
    assert [d.count for d in result.diagnostics if d.kind == "long_log_line"] == [1]
    (lines,) = result.logs.values()
    assert [text[-5:] for text in lines.text] == ["first", " next"]


def test_a_backlog_cut_inside_a_long_line_starts_at_the_next_line(tmp_path: Path) -> None:
    # GIVEN a log whose backlog limit falls more than 1 MiB before the end of a long prompt line
    log, capture = tmp_path / "vllm.log", tmp_path / "capture"
    log.write_bytes(request_line(3 << 20) + b"INFO 03-11 06:18:53 [loggers.py:80] last\n")
    w = writer(capture)
    source = LogTailSource(log, w, settings=TailSettings(backlog_bytes=5 << 19))
    # WHEN the tail opens it and reads the backlog
    source.poll(1)
    source.poll(2)
    source.close()
    w.close()
    # THEN the rest of the cut line is not read as a line of its own
    assert SECRET not in captured_bytes(capture)
    (lines,) = read_capture(capture).logs.values()
    assert lines.text == ["INFO 03-11 06:18:53 [loggers.py:80] last"]


def test_text_that_runs_over_several_lines_is_removed_across_polls(tmp_path: Path) -> None:
    # GIVEN TGI's DEBUG Input line for a chat prompt, its continuation written after a poll
    log = tmp_path / "tgi.log"
    first = (
        b"2024-11-03T14:51:23.328491Z DEBUG generate{}: text_generation_router::server: "
        b"router/src/server.rs:295: Input: <|system|>\n"
    )
    rest = b"You keep the " + SECRET + b"\n<|user|> tell me\n"
    success = (
        b"2024-11-03T14:51:27.393883Z  INFO generate{}: text_generation_router::server: "
        b"router/src/server.rs:322: Success\n"
    )
    result = capture_pieces(log, first + rest + success, [len(first), len(rest), len(success)])
    (lines,) = result.logs.values()
    assert lines.text[1:] == ["<redacted 19 chars>", "<redacted 16 chars>", success.decode()[:-1]]


def test_lines_after_an_unreadable_line_are_removed_until_a_log_record_starts(
    tmp_path: Path,
) -> None:
    # GIVEN TGI's Input line too long to read, its text running on over more lines
    log, capture = tmp_path / "tgi.log", tmp_path / "capture"
    head = b"2024-11-03T14:51:23.328491Z DEBUG generate{}: router/src/server.rs:295: Input: "
    success = b"2024-11-03T14:51:27.393883Z  INFO generate{}: router/src/server.rs:322: Success"
    log.write_bytes(head + b"x" * (80 << 10) + b"\n" + SECRET + b" runs on\n" + success + b"\n")
    w = writer(capture)
    source = LogTailSource(log, w, settings=TailSettings(max_read_bytes=64 << 10))
    for ts in range(1, 4):
        source.poll(ts)
    source.close()
    w.close()
    # THEN the continuation is removed, the next record is kept
    assert SECRET not in captured_bytes(capture)
    (lines,) = read_capture(capture).logs.values()
    assert lines.text == ["<redacted 14 chars>", success.decode()]
