"""The segment writer: background flushing, rotation, sticky records, keyed repeats, drops."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from collectors.segments import read_capture
from collectors.writer import SegmentWriter
from tests.unit.collectors.factories import writer
from tests.waiting import wait_until


def sample(ts: int) -> dict[str, object]:
    return {"k": "s", "ts": ts, "src": "collector.nvml", "dev": 0, "m": {"device_used_bytes": ts}}


def test_the_flusher_writes_records_to_disk_without_a_close(tmp_path: Path) -> None:
    w = writer(tmp_path, flush_interval_s=0.05)
    try:
        w.append(sample(1))
        assert wait_until(lambda: read_capture(tmp_path).samples.ts_ns == [1])
    finally:
        w.close()


def test_close_marks_the_segment_closed_cleanly(tmp_path: Path) -> None:
    w = writer(tmp_path)
    w.append(sample(1))
    w.close()
    (segment,) = read_capture(tmp_path).segments
    assert segment.closed_cleanly
    assert segment.records == 2  # the sample and the close record


def test_segments_rotate_by_size_and_each_starts_with_the_sticky_records(tmp_path: Path) -> None:
    # GIVEN a writer with tiny segments and a sticky device inventory
    w = writer(tmp_path, max_segment_bytes=600, flush_interval_s=10.0)
    inventory = {"k": "info", "ts": 1, "src": "collector.nvml", "data": {"devices": [0]}}
    w.set_sticky("inventory", inventory)
    cache = {"k": "prom", "ts": 1, "src": "p", "url": "u", "info": 1, "text": "c 1\n"}
    w.set_sticky("cache", cache)
    # WHEN enough records for several segments are written
    for ts in range(2, 30):
        w.append(sample(ts))
        w.flush()
    w.close()
    # THEN there are several segments, every one of them holds the inventory, nothing is lost
    result = read_capture(tmp_path)
    assert len(result.segments) >= 3
    assert sorted(result.samples.ts_ns) == list(range(2, 30))
    assert len(result.infos) == 1  # the same info, deduplicated on reading
    assert result.prometheus["u"].text == ["c 1\n"]
    for segment in result.segments[1:]:
        text = (tmp_path / segment.file).read_text()
        assert '"k":"info"' in text.splitlines()[1]
    assert [s.closed_cleanly for s in result.segments] == [False] * (len(result.segments) - 1) + [
        True
    ]


def test_a_keyed_repeat_is_never_the_first_of_its_key_in_a_segment(tmp_path: Path) -> None:
    w = writer(tmp_path, max_segment_bytes=500, flush_interval_s=10.0)
    url = "http://127.0.0.1:1/metrics"
    for ts in range(1, 20):
        full = {"k": "prom", "ts": ts, "src": "p", "url": url, "text": "x 1\n"}
        w.append_keyed("p", full, {**full, "same": 1, "text": None})
        w.flush()
    w.close()
    result = read_capture(tmp_path)
    assert len(result.segments) > 2
    assert result.prometheus[url].text == ["x 1\n"] * 19
    assert not [d for d in result.diagnostics if d.kind == "unresolved_repeat"]


def test_a_full_buffer_drops_new_records_and_says_how_many(tmp_path: Path) -> None:
    w = writer(tmp_path, max_buffer_bytes=400, flush_interval_s=10.0)
    accepted = [w.append(sample(ts)) for ts in range(10)]
    w.close()
    assert accepted.count(False) > 0
    result = read_capture(tmp_path)
    (dropped,) = [d for d in result.diagnostics if d.kind == "dropped_records"]
    assert dropped.count == accepted.count(False)
    assert len(result.samples) == accepted.count(True)


def test_the_open_segment_is_locked_against_retention(tmp_path: Path) -> None:
    w = writer(tmp_path)
    try:
        (path,) = tmp_path.glob("seg-*.oseg")
        fd = os.open(path, os.O_RDONLY)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
    finally:
        w.close()


def test_the_header_names_the_process_the_writer_was_given(tmp_path: Path) -> None:
    # GIVEN a writer told which process it writes for (a capture generated for a sample)
    w = SegmentWriter(tmp_path, node="node-a", stream="agent-4242", writer="agent", pid=4242)
    # WHEN it opens its segment and closes it
    w.start()
    w.close()
    # THEN the header states that pid, not the generator's own
    (segment,) = read_capture(tmp_path).segments
    assert segment.header.pid == 4242
    assert segment.header.pid != os.getpid()
