"""Keep the capture directory bounded by age and size, and keep the evidence around an OOM.

A segment's time range is its creation time (in its file name) to its last modification. Age
retention deletes segments that ended more than ``retain_s`` ago; the size cap then deletes the
oldest segments until the directory fits ``max_bytes``. A *keep marker* (written the moment an
OOM is seen, by the log tail or the PyTorch hook) protects every segment that overlaps
``[oom - keep_before_s, oom + keep_after_s]`` from age retention for ``keep_for_s``. The size cap
is a hard limit that protects the server's disk: it deletes unprotected segments first and
protected ones only as a last resort, with a warning.

Never deleted: a segment another writer holds (``flock``), or one modified in the last few
seconds (a writer may have created it and not yet locked it).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from collectors.format import KEEP_PREFIX, SUFFIX

logger = logging.getLogger(__name__)

GiB = 1 << 30
_RECENT_S = 5.0


@dataclass(frozen=True)
class RetentionPolicy:
    retain_s: float = 6 * 3600.0
    max_bytes: int = 2 * GiB
    keep_before_s: float = 600.0
    keep_after_s: float = 300.0
    keep_for_s: float = 7 * 86400.0


@dataclass(frozen=True)
class _Segment:
    path: Path
    start_ns: int
    end_ns: int
    size: int


def segment_start_ns(path: Path) -> int | None:
    """Creation time from a segment file name, or None for a name this module did not write."""
    parts = path.name.split("-", 2)
    if len(parts) < 3 or parts[0] != "seg":
        return None
    try:
        stamp = datetime.strptime(parts[1], "%Y%m%dT%H%M%S.%fZ").replace(tzinfo=UTC)
    except ValueError:
        return None
    return int(stamp.timestamp()) * 1_000_000_000 + stamp.microsecond * 1000


class KeepMarker:
    """Writes keep markers for OOMs, at most one per ``min_gap_s`` (an OOM fires repeatedly)."""

    def __init__(self, directory: Path, *, min_gap_s: float = 60.0) -> None:
        self.directory = directory
        self._min_gap_ns = int(min_gap_s * 1e9)
        self._last_ns: int | None = None
        self._lock = threading.Lock()

    def mark(self, ts_ns: int, why: str) -> bool:
        """Protect the segments around ``ts_ns``; False when a recent marker already does."""
        with self._lock:
            if self._last_ns is not None and abs(ts_ns - self._last_ns) < self._min_gap_ns:
                return False
            self._last_ns = ts_ns
        name = f"{KEEP_PREFIX}{ts_ns}-{os.getpid()}.json"
        tmp = self.directory / f".{name}.tmp"
        try:
            tmp.write_text(json.dumps({"ts_ns": ts_ns, "why": why}), encoding="utf-8")
            tmp.replace(self.directory / name)
        except OSError as err:
            logger.warning("cannot write keep marker in %s: %s", self.directory, err)
            return False
        return True


def _markers(directory: Path, now_ns: int, keep_for_ns: int) -> list[int]:
    times: list[int] = []
    for path in directory.glob(f"{KEEP_PREFIX}*.json"):
        try:
            ts = int(json.loads(path.read_text(encoding="utf-8"))["ts_ns"])
        except (OSError, ValueError, KeyError, TypeError) as err:
            logger.warning("ignoring unreadable keep marker %s: %s", path.name, err)
            continue
        if ts + keep_for_ns < now_ns:
            _unlink(path)
        else:
            times.append(ts)
    return times


def _segments(directory: Path) -> list[_Segment]:
    found: list[_Segment] = []
    for path in directory.glob(f"seg-*{SUFFIX}"):
        start = segment_start_ns(path)
        try:
            st = path.stat()
        except FileNotFoundError:
            continue
        if start is not None:
            found.append(_Segment(path, start, st.st_mtime_ns, st.st_size))
    found.sort(key=lambda s: (s.start_ns, s.path.name))
    return found


def enforce(directory: Path, policy: RetentionPolicy, *, now_ns: int | None = None) -> list[Path]:
    """Delete what the policy no longer keeps; return the deleted segment paths."""
    now = time.time_ns() if now_ns is None else now_ns
    markers = _markers(directory, now, int(policy.keep_for_s * 1e9))
    before, after = int(policy.keep_before_s * 1e9), int(policy.keep_after_s * 1e9)

    def protected(seg: _Segment) -> bool:
        return any(seg.start_ns <= t + after and seg.end_ns >= t - before for t in markers)

    segments = _segments(directory)
    recent = now - int(_RECENT_S * 1e9)
    cutoff = now - int(policy.retain_s * 1e9)
    deleted = [
        seg.path
        for seg in segments
        if seg.end_ns < cutoff and not protected(seg) and _delete_if_idle(seg.path)
    ]
    remaining = [s for s in segments if s.path not in deleted]
    total = sum(s.size for s in remaining)
    for last_resort in (False, True):
        for seg in remaining:
            if total <= policy.max_bytes:
                return deleted
            if seg.path in deleted or seg.end_ns > recent or protected(seg) != last_resort:
                continue
            if _delete_if_idle(seg.path):
                if last_resort:
                    logger.warning("disk cap reached: deleting OOM-protected %s", seg.path.name)
                deleted.append(seg.path)
                total -= seg.size
    return deleted


def _delete_if_idle(path: Path) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    try:
        return _unlink(path)
    finally:
        os.close(fd)


def _unlink(path: Path) -> bool:
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True
