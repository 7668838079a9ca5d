"""Follow an engine's log file across rotation and restarts, stamping each line on arrival.

Every line gets the wall-clock time (UTC ns) of the poll that read it, which fixes the year-less,
second-resolution timestamps of engine logs to within one poll interval. Prompt and output text
is removed by :func:`collectors.redact.redact_line` before the line is buffered: prompts never
reach the disk.

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
from collectors.redact import redact_line
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
            if start and start != st.st_size:
                _skip_partial_line(opened)
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

    # -- reading ----------------------------------------------------------------------------

    def _read(self, f: _File, now_ns: int, *, final: bool) -> None:
        data = os.pread(f.handle.fileno(), self._settings.max_read_bytes, f.pos)
        if not data:
            if f.idle_since_ns is None:
                f.idle_since_ns = now_ns
            return
        f.idle_since_ns = None
        backlog = f.pos < f.backlog_end
        if backlog:
            # Lines already there at open time go in their own records, flagged as backlog.
            cut = data.rfind(b"\n", 0, f.backlog_end - f.pos) + 1
            if cut:
                data = data[:cut]
            else:
                backlog, f.backlog_end = False, f.pos
        end = data.rfind(b"\n") + 1
        if end == 0 and (final or len(data) >= self._settings.max_line_chars):
            end = len(data)  # an unterminated last line, or one too long to wait for
        if end == 0:
            return
        complete = data[:end]
        raw_lines = complete.split(b"\n")
        if raw_lines[-1] == b"":
            raw_lines.pop()
        lines = [self._clean(line) for line in raw_lines]
        if any(_OOM.search(line) for line in lines) and self._keep is not None:
            self._keep.mark(now_ns, f"OOM line in {self.path.name}")
        start = f.pos
        f.pos += len(complete)
        f.mark = (f.mark + complete)[-_MARK_BYTES:]
        for i in range(0, len(lines), _LINES_PER_RECORD):
            record: Record = {
                "k": "log",
                "ts": now_ns,
                "src": self.name,
                "path": self.target,
                "dev": f.ident[0],
                "ino": f.ident[1],
                "gen": f.gen,
                "off": start,
                "end": f.pos,
                "lines": lines[i : i + _LINES_PER_RECORD],
            }
            if backlog:
                record["bl"] = 1
            self._sink.append(record)

    def _clean(self, raw: bytes) -> str:
        text = redact_line(raw.decode("utf-8", "backslashreplace"))
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


def _skip_partial_line(f: _File) -> None:
    """Start reading at a line boundary after a cut backlog."""
    chunk = os.pread(f.handle.fileno(), 1 << 20, f.pos)
    cut = chunk.find(b"\n")
    f.pos += cut + 1 if cut >= 0 else len(chunk)


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
