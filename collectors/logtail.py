"""Follow an engine's log file across rotation and restarts, stamping each line on arrival.

Every line gets the wall-clock time (UTC ns) of the poll that read it, which fixes the year-less,
second-resolution timestamps of engine logs to within one poll interval. Prompt and output text
is removed by :class:`collectors.redact.LineRedactor` before the line is buffered: prompts never
reach the disk.

A line is only ever redacted whole. An engine writes a long line in several ``write`` calls, so a
poll can see part of it: the tail waits for its newline, re-reading from the line's start (up to
``max_read_bytes``, 8 MiB, per poll). A line longer than that can never be seen whole: it is
skipped to its newline, never stored, and counted in a ``log`` record's ``cut`` field.

Rotation, both ways:

* rename-and-create (logrotate's default): the path names a new inode. The old file is read to
  its end first, then kept open and drained for ``linger_s`` more, because an engine keeps
  writing to it until it reopens its log;
* copy-truncate: the same inode shrinks below the read position, or the bytes just before the
  read position changed (truncated and refilled between two polls). Lines written between the
  last poll and the truncation are in the copy, not in this file: a ``rot`` record says so.

Restarts: an agent that starts again resumes each file where the capture's last flushed ``log``
record ended (:func:`resume_points`), also when the file was renamed meanwhile (it is found by
inode beside the path), so a SIGKILL loses no line and duplicates none. Lines that were already
in the file when it was opened are flagged ``bl`` (backlog): their time is when they were read.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from collectors.format import SUFFIX, DecodeError, Header, Record, decode
from collectors.redact import LineRedactor
from collectors.retention import KeepMarker
from collectors.schedule import SegmentSink

_OOM = re.compile(
    r"out of memory|OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_ALLOC_FAILED",
    re.IGNORECASE,
)
_MARK_BYTES = 64
_LINES_PER_RECORD = 1000


@dataclass(frozen=True)
class ResumePoint:
    dev: int
    ino: int
    offset: int
    generation: int


@dataclass(frozen=True)
class TailSettings:
    from_start: bool = True
    backlog_bytes: int = 64 << 20
    max_read_bytes: int = 8 << 20
    max_line_chars: int = 64 << 10
    linger_s: float = 5.0


class _File:
    def __init__(self, handle: BinaryIO, ident: tuple[int, int], pos: int, gen: int) -> None:
        self.handle, self.ident, self.pos, self.gen = handle, ident, pos, gen
        self.backlog_end = 0
        self.mark = b""
        self.size_seen = -1
        self.idle_since_ns: int | None = None
        self.redactor = LineRedactor()
        # Inside a line that cannot be read whole (from ``skip_from``): read on to its newline.
        # ``skip_counts`` is False for the line a backlog cut starts in (reported as the cut).
        self.skipping = False
        self.skip_counts = True
        self.skip_from = 0

    def skip_line(self, *, counts: bool) -> None:
        self.skipping, self.skip_counts, self.skip_from = True, counts, self.pos

    def advance(self, data: bytes) -> None:
        """``data``, read at the position, is consumed."""
        self.pos += len(data)
        self.mark = (self.mark + data[-_MARK_BYTES:])[-_MARK_BYTES:]


class LogTailSource:
    def __init__(
        self,
        path: Path,
        sink: SegmentSink,
        *,
        settings: TailSettings | None = None,
        resume: ResumePoint | None = None,
        keep: KeepMarker | None = None,
        name: str = "collector.log",
    ) -> None:
        self.path = Path(path).absolute()  # not resolve(): a symlinked log path stays a name
        self.name, self.target = name, str(self.path)
        self._sink, self._keep = sink, keep
        self._settings = settings or TailSettings()
        self._resume = resume
        self._cur: _File | None = None
        self._old: _File | None = None
        self._gen = resume.generation if resume else 0
        self._vanished = False

    def poll(self, now_ns: int) -> None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            st = None
        if self._old is not None:
            self._read(self._old, now_ns, final=False)
            self._drop_old_when_idle(now_ns)
        cur = self._cur
        if cur is None:
            if st is None:
                raise FileNotFoundError(f"{self.path} does not exist (yet)")
            self._cur = self._open_first(st, now_ns)
        elif st is None:
            if not self._vanished:
                self._vanished = True
                self._rotation(now_ns, "vanished", "path removed or renamed; reading the old file")
        elif (st.st_dev, st.st_ino) != cur.ident:
            self._switch(st, now_ns)
        else:
            self._vanished = False
            self._check_truncation(cur, st.st_size, now_ns)
        if self._cur is not None:
            self._read(self._cur, now_ns, final=False)

    # -- opening and switching files ------------------------------------------------------------

    def _open(self, st: os.stat_result, pos: int, gen: int, path: Path | None = None) -> _File:
        handle = (path or self.path).open("rb", buffering=0)
        return _File(handle, (st.st_dev, st.st_ino), pos, gen)

    def _open_first(self, st: os.stat_result, now_ns: int) -> _File:
        resume, ident = self._resume, (st.st_dev, st.st_ino)
        self._resume = None
        if resume is not None and (resume.dev, resume.ino) == ident and st.st_size >= resume.offset:
            opened = self._open(st, resume.offset, resume.generation)
        else:
            if resume is not None:
                self._drain_renamed(resume, now_ns)
                self._gen = resume.generation + 1
            start = 0
            if self._settings.from_start is False and resume is None:
                start = st.st_size
            elif st.st_size > self._settings.backlog_bytes:
                start = st.st_size - self._settings.backlog_bytes
                self._rotation(now_ns, "backlog_cut", f"first {start} bytes not read")
            opened = self._open(st, start, self._gen)
            if start and os.pread(opened.handle.fileno(), 1, start - 1) != b"\n":
                opened.skip_line(counts=False)  # begin at the next line, not inside this one
        opened.backlog_end = st.st_size
        return opened

    def _drain_renamed(self, resume: ResumePoint, now_ns: int) -> None:
        """The file we were reading was renamed while the agent was down: finish it first."""
        for sibling in self.path.parent.glob(self.path.name + "*"):
            try:
                st = sibling.stat()
            except FileNotFoundError:
                continue
            if (st.st_dev, st.st_ino) == (resume.dev, resume.ino) and st.st_size >= resume.offset:
                old = self._open(st, resume.offset, resume.generation, sibling)
                old.backlog_end = st.st_size
                self._read(old, now_ns, final=True)
                old.handle.close()
                self._rotation(now_ns, "rename", f"renamed to {sibling.name} while not running")
                return
        self._rotation(
            now_ns,
            "rename",
            f"rotated while not running; lines after byte {resume.offset} of the old file lost",
        )

    def _switch(self, st: os.stat_result, now_ns: int) -> None:
        cur = self._cur
        if cur is None:
            return
        self._read(cur, now_ns, final=False)
        if self._old is not None:
            self._read(self._old, now_ns, final=True)
            self._old.handle.close()
        self._old, cur.idle_since_ns = cur, None
        self._gen += 1
        self._vanished = False
        self._rotation(now_ns, "rename", "a new file appeared at the path")
        self._cur = self._open(st, 0, self._gen)

    def _drop_old_when_idle(self, now_ns: int) -> None:
        old = self._old
        if old is None or old.idle_since_ns is None:
            return
        if now_ns - old.idle_since_ns >= int(self._settings.linger_s * 1e9):
            self._read(old, now_ns, final=True)
            old.handle.close()
            self._old = None

    def _check_truncation(self, cur: _File, size: int, now_ns: int) -> None:
        truncated = size < cur.pos
        if not truncated and size != cur.size_seen and cur.mark:
            start = cur.pos - len(cur.mark)
            truncated = os.pread(cur.handle.fileno(), len(cur.mark), start) != cur.mark
        cur.size_seen = size
        if truncated:
            self._gen += 1
            self._rotation(
                now_ns, "truncate", f"truncated at byte {cur.pos}; lines since the last read lost"
            )
            cur.pos, cur.mark, cur.gen, cur.backlog_end = 0, b"", self._gen, 0
            cur.skipping = False
            cur.redactor.reset()

    # -- reading ----------------------------------------------------------------------------

    def _read(self, f: _File, now_ns: int, *, final: bool) -> None:
        data = os.pread(f.handle.fileno(), self._settings.max_read_bytes, f.pos)
        if not data:
            if f.idle_since_ns is None:
                f.idle_since_ns = now_ns
            return
        f.idle_since_ns = None
        if f.skipping:
            data = self._skip(f, data, now_ns, final=final)
        backlog = f.pos < f.backlog_end
        if backlog and data:
            # Lines already there at open time go in their own records, flagged as backlog.
            cut = data.rfind(b"\n", 0, f.backlog_end - f.pos) + 1
            if cut:
                data = data[:cut]
            else:
                backlog, f.backlog_end = False, f.pos
        end = data.rfind(b"\n") + 1
        if end == 0 and data:
            if len(data) >= self._settings.max_read_bytes:
                # Longer than one read: never seen whole, so never stored (not even in part).
                f.skip_line(counts=True)
                self._skip(f, data, now_ns, final=final)
                return
            if final:
                end = len(data)  # the last line of a file no longer written: whole as it is
        if end == 0:
            return  # the rest of the line is still to come: read it again, whole, next time
        complete = data[:end]
        raw_lines = complete.split(b"\n")
        if raw_lines[-1] == b"":
            raw_lines.pop()
        lines = [self._clean(f, line) for line in raw_lines]
        if any(_OOM.search(line) for line in lines) and self._keep is not None:
            self._keep.mark(now_ns, f"OOM line in {self.path.name}")
        start = f.pos
        f.advance(complete)
        for i in range(0, len(lines), _LINES_PER_RECORD):
            record = self._log_record(f, now_ns, start, lines[i : i + _LINES_PER_RECORD])
            if backlog:
                record["bl"] = 1
            self._sink.append(record)

    def _skip(self, f: _File, data: bytes, now_ns: int, *, final: bool) -> bytes:
        """Consume ``data`` up to the end of the line being skipped; what follows it."""
        newline = data.find(b"\n")
        if newline < 0 and not final:
            f.advance(data)
            return b""
        end = len(data) if newline < 0 else newline + 1
        f.advance(data[:end])
        f.skipping = False
        # Nothing of the skipped line is known, not even whether its text runs on: lines after
        # it are taken as its continuation until one starts like a log record.
        f.redactor.continue_unseen_line()
        if f.skip_counts:
            # The range moves a restarted agent's resume point past the line.
            self._sink.append({**self._log_record(f, now_ns, f.skip_from, []), "cut": 1})
        return data[end:]

    def _log_record(self, f: _File, now_ns: int, start: int, lines: list[str]) -> Record:
        return {
            "k": "log",
            "ts": now_ns,
            "src": self.name,
            "path": self.target,
            "dev": f.ident[0],
            "ino": f.ident[1],
            "gen": f.gen,
            "off": start,
            "end": f.pos,
            "lines": lines,
        }

    def _clean(self, f: _File, raw: bytes) -> str:
        text = f.redactor.redact(raw.decode("utf-8", "backslashreplace"))
        cap = self._settings.max_line_chars
        if len(text) > cap:
            text = f"{text[:cap]}…[{len(text) - cap} chars cut]"
        return text

    def _rotation(self, now_ns: int, how: str, detail: str) -> None:
        record = {"k": "rot", "ts": now_ns, "src": self.name, "path": self.target, "how": how}
        self._sink.append({**record, "detail": detail})

    def close(self) -> None:
        for f in (self._old, self._cur):
            if f is not None:
                # An unfinished last line stays unread: a restart resumes before it.
                f.handle.close()
        self._cur = self._old = None


def resume_points(directory: Path, paths: list[Path]) -> dict[str, ResumePoint]:
    """Where each followed path stopped in the capture already in ``directory`` (newest agent
    segment first): what was flushed is exactly what is not read again."""
    wanted = {str(Path(p).absolute()) for p in paths}
    found: dict[str, ResumePoint] = {}
    for segment in sorted(directory.glob(f"seg-*-agent-*{SUFFIX}"), reverse=True):
        if not wanted - found.keys():
            break
        last = _last_log_records(segment, wanted - found.keys())
        for path, rec in last.items():
            found[path] = ResumePoint(rec["dev"], rec["ino"], rec["end"], rec.get("gen", 0))
    return found


def _last_log_records(segment: Path, paths: set[str]) -> dict[str, Record]:
    try:
        lines = segment.read_bytes().split(b"\n")
    except OSError:
        return {}
    last: dict[str, Record] = {}
    try:
        Header.from_record(decode(lines[0]))
    except DecodeError:
        return {}
    for line in lines[1:]:
        if b'"k":"log"' not in line:
            continue
        try:
            record = decode(line)
        except DecodeError:
            continue
        if record.get("path") in paths and isinstance(record.get("end"), int):
            last[record["path"]] = record
    return last
