"""A journal whose lines carry no zone beside lines that state the host's offset (journald's
``Jan 10 16:30:58`` over Ollama's ``time=...+01:00``): the zone-less times are read at that
offset; where no line states one, the note says which ``--tz`` to pass."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.ingest import IngestOptions, ingest_paths
from oomtrace.ingest.text.input_file import InputFile
from oomtrace.ingest.text.timestamps import tz_hint
from tests.factories import file_at

MTIME = datetime(2025, 1, 11, tzinfo=UTC)
# https://github.com/ollama/ollama/issues/8377 (Ollama 0.5 under systemd): journald's prefix,
# Ollama's own time with the host's offset inside
_OLLAMA = (
    "Jan 10 16:30:57 node1 ollama[119046]: releasing cuda driver library\n"
    "Jan 10 16:30:58 node1 ollama[119046]: time=2025-01-10T16:30:58.528+01:00 level=INFO "
    'source=server.go:104 msg="system memory" total="46.8 GiB" free="40.2 GiB" '
    'free_swap="62.0 GiB"\n'
)
# https://github.com/tinygrad/tinygrad/issues/6947's fault, as the same journal would hold it
# (the host and date of the lines above)
_XID = (
    "Jan 10 16:31:40 node1 kernel: NVRM: Xid (PCI:0000:01:00): 31, pid=14292, name=python, "
    "Ch 00000030, intr 00000000. MMU Fault: ENGINE HOST0 HUBCLIENT_ESC faulted @ "
    "0x10_00200000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ\n"
)


def _ingest(tmp_path: Path, text: str, tz: str | None = None) -> tuple[pl.Series, list[str]]:
    path = file_at(tmp_path / "journal.log", MTIME, text=text)
    trace = ingest_paths([path], IngestOptions(tz=tz))
    (diag,) = trace.manifest.sources
    return trace.events["ts"], list(diag.notes)


def test_the_kernels_line_takes_the_offset_ollamas_lines_state(tmp_path: Path) -> None:
    ts, notes = _ingest(tmp_path, _OLLAMA + _XID)
    # 16:31:40 at UTC+01:00 is 15:31:40 UTC
    assert ts.to_list() == [datetime(2025, 1, 10, 15, 31, 40, tzinfo=UTC)]
    assert any("read at UTC+01:00, the offset this log's zoned lines state" in n for n in notes)


def test_tz_given_wins_over_the_stated_offset(tmp_path: Path) -> None:
    ts, _ = _ingest(tmp_path, _OLLAMA + _XID, tz="UTC")
    assert ts.to_list() == [datetime(2025, 1, 10, 16, 31, 40, tzinfo=UTC)]


def test_without_a_stated_offset_the_note_asks_for_the_hosts_zone(tmp_path: Path) -> None:
    ts, notes = _ingest(tmp_path, _XID)
    assert ts.to_list() == [datetime(2025, 1, 10, 16, 31, 40, tzinfo=UTC)]
    assert "timestamps without a zone are read as UTC (pass --tz with the host's zone)" in notes


def test_the_zone_to_pass_for_an_offset() -> None:
    assert tz_hint("+01:00").endswith(": --tz Etc/GMT-1 where the host kept that offset")
    assert tz_hint("-05:00").endswith(": --tz Etc/GMT+5 where the host kept that offset")
    assert tz_hint("+05:30").endswith("pass the IANA zone the host ran in")
    assert tz_hint(None) == ""


def _small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The file read in chunks of a few lines, as a large journal is."""
    read = InputFile.line_chunks

    def chunks(self: InputFile, diag: SourceDiagnostics, chunk_bytes: int = 0) -> Iterator[object]:
        return read(self, diag, 200)

    monkeypatch.setattr(InputFile, "line_chunks", chunks)


def test_the_offset_stated_past_the_first_chunk_still_places_the_kernels_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the kernel's line first, then many chunks later the first line that states the offset
    _small_chunks(monkeypatch)
    filler = "Jan 10 16:30:50 node1 ollama[119046]: llm_load_tensors: ggml ctx size = 1.10 MiB\n"
    ts, notes = _ingest(tmp_path, _XID + filler * 20 + _OLLAMA)
    assert ts.to_list() == [datetime(2025, 1, 10, 15, 31, 40, tzinfo=UTC)]
    assert any("read at UTC+01:00, the offset this log's zoned lines state" in n for n in notes)


def test_the_year_a_dated_line_states_wins_over_the_files_time(tmp_path: Path) -> None:
    # the journal copied off the host in December 2026: Ollama's own lines say 2025, so the
    # kernel's "Jan 10" is 2025's, not 2026's as the file's time alone would make it
    path = file_at(tmp_path / "journal.log", datetime(2026, 12, 1, tzinfo=UTC), text=_OLLAMA + _XID)
    trace = ingest_paths([path], IngestOptions())
    assert trace.events["ts"].to_list() == [datetime(2025, 1, 10, 15, 31, 40, tzinfo=UTC)]
    (diag,) = trace.manifest.sources
    assert any("the year this log's dated lines state (2025-01-10" in n for n in diag.notes)


def test_a_new_year_either_side_of_the_dated_line(tmp_path: Path) -> None:
    # the dated line on December 31st, the kernel's two days later: the next year's January
    dated = _OLLAMA.replace("Jan 10", "Dec 31").replace("2025-01-10", "2024-12-31")
    xid = _XID.replace("Jan 10", "Jan  2")
    path = file_at(tmp_path / "journal.log", datetime(2026, 12, 1, tzinfo=UTC), text=dated + xid)
    trace = ingest_paths([path], IngestOptions())
    assert trace.events["ts"].to_list() == [datetime(2025, 1, 2, 15, 31, 40, tzinfo=UTC)]


def test_a_year_given_wins_over_the_dated_lines(tmp_path: Path) -> None:
    path = file_at(tmp_path / "journal.log", datetime(2026, 12, 1, tzinfo=UTC), text=_OLLAMA + _XID)
    trace = ingest_paths([path], IngestOptions(year=2023))
    assert trace.events["ts"][0].year == 2023
