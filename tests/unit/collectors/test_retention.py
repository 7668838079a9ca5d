"""Retention: age and size bound the directory; OOM evidence outlives --retain; open files stay."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from collectors.format import segment_name
from collectors.retention import KeepMarker, RetentionPolicy, enforce

S = 1_000_000_000
NOW = 1_800_000_000 * S


def segment(
    directory: Path, start_s: float, end_s: float, size: int = 100, stream: str = "a"
) -> Path:
    """A segment created ``start_s`` and last written ``end_s`` seconds before NOW."""
    path = directory / segment_name(NOW - int(start_s * S), f"agent-{stream}", 1)
    path.write_bytes(b"x" * size)
    os.utime(path, ns=(NOW - int(end_s * S), NOW - int(end_s * S)))
    return path


def names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.glob("seg-*"))


def test_segments_older_than_retain_are_deleted(tmp_path: Path) -> None:
    old = segment(tmp_path, 8 * 3600, 7 * 3600, stream="old")
    new = segment(tmp_path, 3600, 600, stream="new")
    deleted = enforce(tmp_path, RetentionPolicy(retain_s=6 * 3600), now_ns=NOW)
    assert deleted == [old]
    assert names(tmp_path) == [new.name]


def test_segments_around_an_oom_outlive_retention(tmp_path: Path) -> None:
    # GIVEN an OOM 7 h ago and segments before, around and long before it
    around = segment(tmp_path, 7 * 3600 + 60, 7 * 3600 - 60, stream="around")
    before = segment(tmp_path, 9 * 3600, 8 * 3600, stream="before")
    (tmp_path / "keep-1-1.json").write_text(f'{{"ts_ns": {NOW - 7 * 3600 * S}}}')
    # WHEN retention (6 h) runs THEN the segment overlapping the OOM window stays
    enforce(tmp_path, RetentionPolicy(retain_s=6 * 3600), now_ns=NOW)
    assert names(tmp_path) == [around.name]
    assert not before.exists()


def test_an_expired_keep_marker_protects_nothing_and_is_removed(tmp_path: Path) -> None:
    segment(tmp_path, 9 * 86400, 9 * 86400 - 60)
    marker = tmp_path / "keep-1-1.json"
    marker.write_text(f'{{"ts_ns": {NOW - 9 * 86400 * S}}}')
    enforce(tmp_path, RetentionPolicy(keep_for_s=7 * 86400), now_ns=NOW)
    assert names(tmp_path) == []
    assert not marker.exists()


def test_the_size_cap_deletes_oldest_first_and_oom_evidence_last(tmp_path: Path) -> None:
    # GIVEN four 100-byte segments, the oldest protected by an OOM, and a 250-byte cap
    protected = segment(tmp_path, 400, 390, stream="p")
    second = segment(tmp_path, 300, 290, stream="b")
    third = segment(tmp_path, 200, 190, stream="c")
    newest = segment(tmp_path, 100, 90, stream="d")
    (tmp_path / "keep-1-1.json").write_text(f'{{"ts_ns": {NOW - 395 * S}}}')
    # WHEN retention runs
    deleted = enforce(
        tmp_path, RetentionPolicy(max_bytes=250, keep_after_s=1, keep_before_s=1), now_ns=NOW
    )
    # THEN unprotected ones go first, oldest first, until the directory fits
    assert deleted == [second, third]
    assert names(tmp_path) == sorted([protected.name, newest.name])


def test_the_size_cap_is_hard_even_for_oom_evidence(tmp_path: Path) -> None:
    protected = segment(tmp_path, 400, 390, size=300, stream="p")
    (tmp_path / "keep-1-1.json").write_text(f'{{"ts_ns": {NOW - 395 * S}}}')
    assert enforce(tmp_path, RetentionPolicy(max_bytes=200), now_ns=NOW) == [protected]


def test_a_segment_locked_by_a_writer_is_never_deleted(tmp_path: Path) -> None:
    path = segment(tmp_path, 8 * 3600, 7 * 3600)
    fd = os.open(path, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        assert enforce(tmp_path, RetentionPolicy(retain_s=60), now_ns=NOW) == []
    finally:
        os.close(fd)
    assert path.exists()


def test_keep_markers_are_written_once_per_burst_of_ooms(tmp_path: Path) -> None:
    marker = KeepMarker(tmp_path, min_gap_s=60)
    assert marker.mark(NOW, "first")
    assert not marker.mark(NOW + 5 * S, "cuDNN retry")
    assert marker.mark(NOW + 120 * S, "later")
    assert len(list(tmp_path.glob("keep-*.json"))) == 2
