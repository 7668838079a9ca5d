"""glog's year-less time (``E0306 16:40:07.708802``, Triton) and c10's with an unpadded month
(``[W812 16:00:28.643448608``, PyTorch), completed as syslog's: the year given, else the file's
modification time's, a date after it belonging to the year before."""

from __future__ import annotations

from datetime import UTC, datetime

import polars as pl

from oomtrace.ingest.text.timestamps import line_stamps

MTIME = datetime(2025, 3, 10, tzinfo=UTC)


def _stamps(*lines: str, year: int | None = None) -> list[datetime | None]:
    stamps, _ = line_stamps(pl.Series(lines), "UTC", year, MTIME)
    return stamps.to_list()


def test_tritons_glog_line_is_placed_in_the_files_year() -> None:
    # triton-inference-server/tensorrtllm_backend #366
    line = (
        "E0306 16:40:07.708802 117 backend_model.cc:691] ERROR: Failed to create instance: "
        "unexpected error when creating modelInstanceState"
    )
    assert _stamps(line) == [datetime(2025, 3, 6, 16, 40, 7, 708802, tzinfo=UTC)]


def test_c10s_unpadded_month_and_a_date_after_the_file_is_the_year_before() -> None:
    # https://github.com/pytorch/pytorch/issues/193195: August 12, after the file's March 10
    line = (
        "[rank1]:[W812 16:00:28.643448608 CUDACachingAllocator.cpp:3933] memory allocation "
        "failed with OOM on device 1"
    )
    assert _stamps(line) == [datetime(2024, 8, 12, 16, 0, 28, 643448, tzinfo=UTC)]
    assert _stamps(line, year=2026) == [datetime(2026, 8, 12, 16, 0, 28, 643448, tzinfo=UTC)]


def test_words_that_only_look_like_glog_are_no_time() -> None:
    assert _stamps(
        "model XW812 16:00:28 is loaded",  # the level letter starts no word
        "I1301 10:00:00.000 13 is no month",
        "ERROR1212 10:00:00 glued to a word",
    ) == [None, None, None]
