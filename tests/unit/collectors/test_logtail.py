"""Following a real log file: arrival stamps, partial lines, both kinds of rotation, restarts,
redaction and OOM markers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from collectors.logtail import LogTailSource, ResumePoint, TailSettings, resume_points
from collectors.retention import KeepMarker
from tests.unit.collectors.factories import MemorySink, writer


def append(path: Path, *lines: str) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.writelines(line + "\n" for line in lines)


def lines_of(sink: MemorySink) -> list[tuple[int, str]]:
    return [(r["ts"], line) for r in sink.kind("log") for line in r["lines"]]


_OPEN: list[LogTailSource] = []


def tail(path: Path, sink: object, **kwargs: object) -> LogTailSource:
    """A source that the autouse fixture closes after the test (it keeps files open)."""
    source = LogTailSource(path, sink, **kwargs)  # type: ignore[arg-type]
    _OPEN.append(source)
    return source


@pytest.fixture(autouse=True)
def _close_sources() -> Iterator[None]:
    yield
    while _OPEN:
        _OPEN.pop().close()


def test_each_line_is_stamped_with_the_poll_that_read_it(tmp_path: Path) -> None:
    # GIVEN a log with one old line, followed from its start
    log = tmp_path / "vllm.log"
    append(log, "old")
    sink = MemorySink()
    source = tail(log, sink)
    source.poll(100)
    # WHEN two lines arrive before the next poll and one after it
    append(log, "a", "b")
    source.poll(200)
    append(log, "c")
    source.poll(300)
    # THEN each line carries the time of the poll that first saw it; the old line is backlog
    assert lines_of(sink) == [(100, "old"), (200, "a"), (200, "b"), (300, "c")]
    assert [r.get("bl") for r in sink.kind("log")] == [1, None, None]


def test_an_unfinished_line_waits_for_its_newline(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text("")
    sink = MemorySink()
    source = tail(log, sink)
    source.poll(1)
    with log.open("a") as f:
        f.write("INFO half a li")
    source.poll(2)
    append(log, "ne")
    source.poll(3)
    assert lines_of(sink) == [(3, "INFO half a line")]


def test_rename_and_create_reads_the_old_file_to_its_end_then_the_new_one(tmp_path: Path) -> None:
    # GIVEN a followed log whose writer keeps its file open across the rename (as engines do)
    log = tmp_path / "vllm.log"
    append(log, "1")
    sink = MemorySink()
    source = tail(log, sink)
    source.poll(10)
    with log.open("a", encoding="utf-8") as engine:
        engine.write("2\n")
        engine.flush()
        # WHEN logrotate renames it and creates a new file, and the engine writes once more
        # to the old one before it reopens its log
        log.rename(tmp_path / "vllm.log.1")
        append(log, "3")
        source.poll(20)
        engine.write("4\n")
    source.poll(30)
    # THEN nothing is lost, and the new file is a new generation
    assert sorted(line for _, line in lines_of(sink)) == ["1", "2", "3", "4"]
    assert [r["how"] for r in sink.kind("rot")] == ["rename"]
    generations = {line: r["gen"] for r in sink.kind("log") for line in r["lines"]}
    assert generations == {"1": 0, "2": 0, "3": 1, "4": 0}


def test_copy_truncate_is_detected_and_the_file_is_read_again_from_its_start(
    tmp_path: Path,
) -> None:
    log = tmp_path / "vllm.log"
    append(log, "first line of the old content")
    sink = MemorySink()
    source = tail(log, sink)
    source.poll(1)
    # WHEN the file is copied away and truncated, then a short line is written
    (tmp_path / "vllm.log.1").write_bytes(log.read_bytes())
    with log.open("r+") as f:
        f.truncate(0)
    append(log, "new")
    source.poll(2)
    assert lines_of(sink)[-1] == (2, "new")
    (rotation,) = sink.kind("rot")
    assert rotation["how"] == "truncate"
    assert sink.kind("log")[-1]["gen"] == 1


def test_a_truncation_refilled_past_the_read_position_is_still_detected(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    append(log, "aaaa")
    sink = MemorySink()
    source = tail(log, sink)
    source.poll(1)
    # WHEN truncated and refilled to more than before between two polls
    log.write_text("bbbbbbbbbbbb\n")
    source.poll(2)
    assert lines_of(sink) == [(1, "aaaa"), (2, "bbbbbbbbbbbb")]
    assert [r["how"] for r in sink.kind("rot")] == ["truncate"]


def test_a_missing_file_is_an_error_until_it_appears(tmp_path: Path) -> None:
    log = tmp_path / "later.log"
    sink = MemorySink()
    source = tail(log, sink)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        source.poll(1)
    append(log, "started")
    source.poll(2)
    assert lines_of(sink) == [(2, "started")]


def test_prompts_never_reach_the_sink(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    append(
        log,
        "INFO 03-11 06:18:50 [logger.py:39] Received request cmpl-1: prompt: 'my secret plan', "
        "params: SamplingParams(max_tokens=7), prompt_token_ids: [1, 2, 3], lora_request: None.",
    )
    sink = MemorySink()
    tail(log, sink).poll(1)
    ((_, line),) = lines_of(sink)
    assert "secret" not in line
    assert "prompt: <redacted 14 chars>" in line
    assert "prompt_token_ids: <3 token ids>" in line


def test_an_oom_line_protects_the_segments_around_it(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    append(log, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.25 GiB.")
    tail(log, MemorySink(), keep=KeepMarker(tmp_path)).poll(1)
    assert len(list(tmp_path.glob("keep-*.json"))) == 1


def test_following_from_the_end_skips_what_is_already_there(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    append(log, "history")
    sink = MemorySink()
    source = tail(log, sink, settings=TailSettings(from_start=False))
    source.poll(1)
    append(log, "news")
    source.poll(2)
    assert lines_of(sink) == [(2, "news")]


def test_an_overlong_line_is_cut_after_redaction(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    append(log, "x" * 300)
    sink = MemorySink()
    tail(log, sink, settings=TailSettings(max_line_chars=100)).poll(1)
    assert lines_of(sink) == [(1, "x" * 100 + "…[200 chars cut]")]


def test_a_restart_resumes_exactly_where_the_flushed_capture_ended(tmp_path: Path) -> None:
    # GIVEN a capture whose last log record ended after line "2"
    log, capture = tmp_path / "vllm.log", tmp_path / "capture"
    append(log, "1", "2")
    w = writer(capture)
    tail(log, w).poll(1)
    w.close()
    append(log, "3")
    # WHEN a new agent starts from the resume point THEN it reads only what is new
    (point,) = resume_points(capture, [log]).values()
    sink = MemorySink()
    tail(log, sink, resume=point).poll(2)
    assert lines_of(sink) == [(2, "3")]
    assert sink.kind("log")[0]["bl"] == 1  # read late: the time is an upper bound


def test_a_file_renamed_while_the_agent_was_down_is_finished_before_the_new_one(
    tmp_path: Path,
) -> None:
    log = tmp_path / "vllm.log"
    append(log, "1", "2")
    st = log.stat()
    point = ResumePoint(st.st_dev, st.st_ino, offset=2, generation=0)  # after line "1"
    log.rename(tmp_path / "vllm.log.1")
    append(log, "3")
    sink = MemorySink()
    tail(log, sink, resume=point).poll(5)
    assert [line for _, line in lines_of(sink)] == ["2", "3"]
    assert sink.kind("rot")[0]["detail"] == "renamed to vllm.log.1 while not running"


def test_a_symlinked_path_is_followed_by_name(tmp_path: Path) -> None:
    target = tmp_path / "real.log"
    append(target, "x")
    link = tmp_path / "current.log"
    link.symlink_to(target)
    sink = MemorySink()
    source = tail(link, sink)
    source.poll(1)
    assert sink.kind("log")[0]["path"] == str(link)
