"""A full disk (ENOSPC) never breaks the segment format: the next record after a failed write
starts on a new line, a segment's first line is its header, and the lost count is exact."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from collectors.segments import read_capture
from tests.unit.collectors.factories import writer

REAL_WRITE = os.write


class FullDisk:
    """``os.write`` for files under one directory, as a filling disk answers it: ``partial(n)``
    writes ``n`` more bytes (a short write) and then fails, ``full()`` fails before writing
    anything, ``free()`` writes everything."""

    def __init__(self, directory: Path) -> None:
        self._directory = str(directory)
        self._next: Callable[[int, bytes], int] | None = None

    def partial(self, n: int) -> None:
        def short_write(fd: int, data: bytes) -> int:
            self.full()
            return REAL_WRITE(fd, data[:n])

        self._next = short_write

    def full(self) -> None:
        self._next = self._fail

    def free(self) -> None:
        self._next = None

    def _fail(self, fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def write(self, fd: int, data: bytes) -> int:
        target = Path(f"/proc/self/fd/{fd}").readlink()
        if self._next is None or not str(target).startswith(self._directory):
            return REAL_WRITE(fd, data)
        return self._next(fd, bytes(data))


@pytest.fixture
def disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FullDisk:
    full = FullDisk(tmp_path)
    monkeypatch.setattr(os, "write", full.write)
    return full


def sample(ts: int) -> dict[str, object]:
    return {"k": "s", "ts": ts, "src": "collector.nvml", "dev": 0, "m": {"device_used_bytes": ts}}


def dropped(directory: Path) -> int:
    return sum(d.count for d in read_capture(directory).diagnostics if d.kind == "dropped_records")


def test_after_a_write_that_wrote_nothing_the_next_record_still_starts_a_line(
    tmp_path: Path, disk: FullDisk
) -> None:
    # GIVEN a writer whose disk fills up in the middle of a flush
    w = writer(tmp_path, flush_interval_s=3600.0)
    w.append(sample(1))
    w.flush()
    w.append(sample(2))
    w.append(sample(3))
    disk.partial(10)  # sample 2 torn after 10 bytes, sample 3 never written
    w.flush()
    # WHEN the next flush fails before writing a byte, and the one after succeeds
    w.append(sample(4))
    disk.full()
    w.flush()
    disk.free()
    w.append(sample(5))
    w.flush()
    w.close()
    # THEN the record written after the failures is read, and exactly three are counted lost
    result = read_capture(tmp_path)
    assert result.samples.ts_ns == [1, 5]
    assert dropped(tmp_path) == 3
    assert [d.count for d in result.diagnostics if d.kind == "corrupt_record"] == [1]


def test_a_segment_opened_on_a_full_disk_still_starts_with_its_header(
    tmp_path: Path, disk: FullDisk
) -> None:
    # GIVEN a writer that starts a new segment at every flush (age limit 0)
    w = writer(tmp_path, flush_interval_s=3600.0, max_segment_age_s=0.0)
    w.append(sample(1))
    # WHEN the new segment's header is torn by a full disk, then space comes back
    disk.partial(5)
    w.flush()
    disk.free()
    w.append(sample(2))
    w.flush()
    w.close()
    # THEN no segment is unreadable and the record after the failure is read
    result = read_capture(tmp_path)
    assert not [d for d in result.diagnostics if d.kind == "skipped_file"]
    assert 2 in result.samples.ts_ns
