"""The crash-safe segment writer: append-only files, flushed by a background thread.

Sources append records to an in-memory buffer (cheap, never touches the disk); a flusher thread
writes the buffer with ``write(2)`` at least every ``flush_interval_s`` (so a SIGKILL loses at
most that interval: what ``write`` returned for is in the page cache and survives the process),
``fdatasync``s every ``fsync_interval_s`` (power loss), rotates segments by size and age and runs
retention. A slow or full disk therefore never delays sampling; if the buffer outgrows
``max_buffer_bytes`` new records are dropped and counted, and a ``drop`` record says how many.

Each open segment holds an exclusive ``flock`` so that retention, in this or another process,
never deletes a file that is still being written.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from collectors.format import FORMAT_VERSION, Header, Record, encode, segment_name
from collectors.retention import RetentionPolicy, enforce

logger = logging.getLogger(__name__)

MiB = 1 << 20


@dataclass(frozen=True)
class WriterSettings:
    flush_interval_s: float = 0.5
    fsync_interval_s: float = 10.0
    max_segment_bytes: int = 64 * MiB
    max_segment_age_s: float = 600.0
    max_buffer_bytes: int = 32 * MiB
    retention_interval_s: float = 10.0


@dataclass(frozen=True)
class WriterStats:
    records: int
    bytes_written: int
    dropped: int
    write_errors: int
    segments_opened: int
    segments_deleted: int


class SegmentWriter:
    """Appends records for one process (one *stream*) into rotating segment files."""

    def __init__(
        self,
        directory: Path,
        *,
        node: str,
        stream: str,
        writer: str,
        settings: WriterSettings | None = None,
        retention: RetentionPolicy | None = None,
        clock_ns: Callable[[], int] = time.time_ns,
        pid: int | None = None,
    ) -> None:
        self.directory = directory
        # the writing process, as the header states it (injectable for generated captures)
        self._pid = os.getpid() if pid is None else pid
        self._node, self._stream, self._writer = node, stream, writer
        self._settings = settings or WriterSettings()
        self._retention = retention
        self._clock_ns = clock_ns
        self._buf_lock = threading.Lock()
        self._io_lock = threading.Lock()
        self._buffer: list[bytes] = []
        self._buffer_bytes = 0
        self._generation = 0
        self._key_generation: dict[str, int] = {}
        self._sticky: dict[str, bytes] = {}
        self._rotate_pending = False
        self._fd: int | None = None
        self._file_bytes = 0
        self._file_opened = 0.0
        self._seq = 0
        self._header = b""  # the open segment's first line
        self._need_newline = False
        self._closed = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._records = self._bytes = self._dropped = self._dropped_reported = 0
        self._write_errors = self._segments_deleted = 0
        self._last_fsync = self._last_retention = time.monotonic()

    # -- appending (any thread) ---------------------------------------------------------------

    def append(self, record: Record) -> bool:
        """Buffer one record; False when it was dropped (buffer full or writer closed)."""
        line = encode(record)
        with self._buf_lock:
            return self._push(line)

    def append_keyed(self, key: str, full: Record, repeat: Record | None = None) -> None:
        """Append ``repeat`` when given and the previous record under ``key`` went to the current
        segment, else ``full``: a segment never depends on another file to be read."""
        # Only the line that is written is encoded (a full scrape's text is most of the cost).
        with self._buf_lock:
            if repeat is not None and self._key_generation.get(key) == self._generation:
                self._push(encode(repeat))
            elif self._push(encode(full)):
                self._key_generation[key] = self._generation
            else:
                self._key_generation.pop(key, None)

    def set_sticky(self, key: str, record: Record) -> None:
        """Append ``record`` now and again at the start of every later segment (device inventory,
        engine cache configuration): retention may delete the segment that first held it."""
        line = encode(record)
        with self._buf_lock:
            self._sticky[key] = line
            self._push(line)

    def _push(self, line: bytes) -> bool:
        if self._closed or self._buffer_bytes + len(line) > self._settings.max_buffer_bytes:
            self._dropped += 1
            return False
        self._buffer.append(line)
        self._buffer_bytes += len(line)
        self._records += 1
        return True

    @property
    def generation(self) -> int:
        """Counts segments opened by this writer; changes when a new segment begins."""
        return self._generation

    def stats(self) -> WriterStats:
        return WriterStats(
            self._records,
            self._bytes,
            self._dropped,
            self._write_errors,
            self._seq,
            self._segments_deleted,
        )

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> SegmentWriter:
        """Open the first segment and start the flusher thread."""
        self.directory.mkdir(parents=True, exist_ok=True)
        with self._io_lock:
            self._open_segment()
        self._thread = threading.Thread(target=self._run, name=f"oomtrace-flush-{self._stream}")
        self._thread.daemon = True
        self._thread.start()
        return self

    def close(self, why: str = "stop") -> None:
        """Flush everything, mark the segment closed cleanly, fsync and close (once)."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        self.flush()  # make room: the close record must not be the one a full buffer drops
        self.append({"k": "close", "ts": self._clock_ns(), "why": why})
        with self._buf_lock:
            self._closed = True
        self.flush()
        with self._io_lock:
            if self._fd is not None:
                self._sync()
                os.close(self._fd)
                self._fd = None

    def abandon_after_fork(self) -> None:
        """In a forked child: forget the parent's buffer and file without writing anything."""
        self._closed = True
        self._buffer, self._buffer_bytes = [], 0
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _run(self) -> None:
        settings = self._settings
        while not self._stop.wait(settings.flush_interval_s):
            self.flush()
            now = time.monotonic()
            if now - self._last_fsync >= settings.fsync_interval_s:
                with self._io_lock:
                    self._sync()
                self._last_fsync = now
            if self._retention is not None and now - self._last_retention >= (
                settings.retention_interval_s
            ):
                self.run_retention()
                self._last_retention = now

    def run_retention(self) -> None:
        """Apply the retention policy to the whole directory now."""
        if self._retention is None:
            return
        deleted = enforce(self.directory, self._retention, now_ns=self._clock_ns())
        self._segments_deleted += len(deleted)

    # -- writing (flusher thread, or a caller that needs the data on disk now) -----------------

    def flush(self) -> None:
        """Write everything buffered so far; rotate the segment when it is due."""
        with self._io_lock:
            if self._fd is None:
                return
            with self._buf_lock:
                pending, self._buffer, self._buffer_bytes = self._buffer, [], 0
                drops = self._dropped - self._dropped_reported
                if drops:
                    pending.append(encode({"k": "drop", "ts": self._clock_ns(), "n": drops}))
                rotate = not self._closed and self._rotation_due(sum(map(len, pending)))
                if rotate:
                    # Later appends belong to the next segment: decide it under the buffer lock
                    # so that append_keyed's "same segment" test stays exact.
                    self._generation += 1
                    self._buffer = list(self._sticky.values())
                    self._buffer_bytes = sum(map(len, self._buffer))
            # A drop record that did not reach the disk is not a record lost: its count is
            # still to be reported, by the next flush.
            if self._write(b"".join(pending), bookkeeping=1 if drops else 0):
                self._dropped_reported += drops
            if rotate:
                self._write(encode({"k": "close", "ts": self._clock_ns(), "why": "rotate"}), 1)
                self._sync()
                os.close(self._fd)
                self._fd = None
                self._open_segment()

    def _rotation_due(self, pending_bytes: int) -> bool:
        settings = self._settings
        return self._file_bytes + pending_bytes >= settings.max_segment_bytes or (
            time.monotonic() - self._file_opened >= settings.max_segment_age_s
        )

    def _write(self, data: bytes, bookkeeping: int = 0) -> bool:
        """Write whole record lines; True when all of them reached the file. ``bookkeeping``:
        how many of the last lines are the writer's own (a drop or close record, the header),
        not records lost when they fail."""
        if not data or self._fd is None:
            return True
        prefix = b""
        if self._file_bytes == 0 and not data.startswith(self._header):
            prefix = self._header  # a full disk kept the header out: a segment starts with it
        elif self._need_newline:
            # A previous write failed part-way: end its torn line so the reader resynchronises.
            prefix = b"\n"
        data = prefix + data
        view = memoryview(data)
        try:
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
                self._file_bytes += written
                self._bytes += written
        except OSError as err:
            self._write_failed(data, len(data) - len(view), len(prefix), bookkeeping, err)
            return False
        self._need_newline = False
        return True

    def _write_failed(
        self, data: bytes, written: int, prefix: int, bookkeeping: int, err: OSError
    ) -> None:
        self._write_errors += 1
        if 0 < self._file_bytes < len(self._header) and self._fd is not None:
            # Only part of the header is in the file: it would make the whole segment
            # unreadable, so the file is emptied and the header written again next time.
            os.ftruncate(self._fd, 0)
            self._file_bytes, self._need_newline = 0, False
        elif written:
            self._need_newline = data[written - 1 : written] != b"\n"
        # Each line whose newline was not written is lost (the prefix is not a line of its own).
        unwritten = data[max(written, prefix) :].count(b"\n")
        lost = unwritten - min(bookkeeping, unwritten)
        self._dropped += lost
        logger.warning("cannot write to %s: %s (%d records lost)", self.directory, err, lost)

    def _sync(self) -> None:
        if self._fd is None:
            return
        try:
            os.fdatasync(self._fd)
        except OSError as err:
            self._write_errors += 1
            logger.warning("cannot fsync a segment in %s: %s", self.directory, err)

    def _open_segment(self) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC
        while True:
            self._seq += 1
            created = self._clock_ns()
            path = self.directory / segment_name(created, self._stream, self._seq)
            try:
                fd = os.open(path, flags, 0o640)
                break
            except FileExistsError:
                continue
        fcntl.flock(fd, fcntl.LOCK_EX)
        self._fd, self._file_bytes, self._file_opened = fd, 0, time.monotonic()
        self._need_newline = False
        header = Header(
            FORMAT_VERSION, self._node, self._stream, self._writer, self._pid, created, self._seq
        )
        self._header = encode(header.to_record())
        self._write(self._header, bookkeeping=1)
