"""Records split across lines by whoever showed them are joined back (the shared step of
``oomtrace/ingest/text/split_records.py``): folded at a fixed width mid-word, or re-flowed at
spaces after a line that opens a record; aligned tables and ordinary lines are left alone."""

from __future__ import annotations

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from oomtrace.ingest.text.split_records import LOG_RECORD_START, find_split_records

STATS = (
    "2025-10-15T00:07:{s:02d}.764529167Z (APIServer pid=1) INFO 10-14 17:07:{s:02d} "
    "[loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation "
    "throughput: 569.6 tokens/s, Running: 27 reqs, Waiting: 62 reqs, GPU KV cache usage: 99.7%"
)
ACCESS = '2025-10-15T00:07:43.162981484Z (APIServer pid=1) INFO:     10.0.0.1:1 - "GET /metrics"'


def _fold(line: str, width: int) -> list[str]:
    return [line[i : i + width] for i in range(0, len(line), width)]


def test_lines_folded_at_a_fixed_width_are_joined_without_a_space() -> None:
    # GIVEN docker logs folded at 159 columns (vllm issue 27073): stats lines broken mid-word
    whole = [STATS.format(s=38), ACCESS, STATS.format(s=48)]
    folded = [piece for line in whole for piece in _fold(line, 159)]
    # WHEN the split records are looked for
    split = find_split_records(pl.Series("line", folded), starts=LOG_RECORD_START)
    # THEN each stats line is whole again on its first line, its piece left empty
    assert (split.joined, split.width) == (2, 159)
    assert [line for line in split.lines.to_list() if line] == whole
    assert split.continued.to_list() == [False, True, False, False, True]


def test_a_message_re_flowed_at_spaces_is_joined_with_a_space() -> None:
    # verl's notes quote a PyTorch OOM re-flowed at 78 columns or less (see the torch parser test)
    lines = [
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 74.00 MiB. GPU 0",
        "has a total capacity of 79.25 GiB of which 38.06 MiB is free. Process 1016459",
        "has 9.92 GiB memory in use.",
        "",
        "INFO something else",
    ]
    split = find_split_records(
        pl.Series("line", lines), starts=LOG_RECORD_START, opens="OutOfMemoryError"
    )
    assert split.joined == 2
    assert split.lines[0] == " ".join(lines[:3])
    assert split.lines.to_list()[1:] == ["", "", "", "INFO something else"]


def test_an_aligned_table_after_an_oom_is_not_re_flowed() -> None:
    lines = [
        "torch.cuda.OutOfMemoryError: Allocation on device 0 would exceed allowed memory. (oom)",
        "Currently allocated     : 6.89 GiB",
        "Requested               : 320.00 MiB",
    ]
    split = find_split_records(
        pl.Series("line", lines), starts=LOG_RECORD_START, opens="OutOfMemoryError"
    )
    assert split.joined == 0
    assert split.lines.to_list() == lines


def test_one_long_line_followed_by_a_traceback_is_no_fold() -> None:
    lines = [STATS.format(s=1), "Traceback (most recent call last):", "  File 'x.py', line 1"]
    split = find_split_records(pl.Series("line", lines), starts=LOG_RECORD_START)
    assert split.joined == 0


def test_a_fold_just_after_a_space_before_a_bracket_is_joined() -> None:
    # GIVEN a stats line folded at 69 columns: the second piece starts at vLLM's "[loggers.py"
    folded = _fold(STATS.format(s=0), 69)
    assert folded[0].endswith(" ")
    assert folded[1].startswith("[loggers.py")
    # WHEN split records are joined THEN the line is whole again
    split = find_split_records(pl.Series("line", folded), starts=LOG_RECORD_START)
    assert [line for line in split.lines.to_list() if line] == [STATS.format(s=0)]


def test_a_record_that_starts_with_a_prefix_after_a_line_of_the_folds_width_stays_apart() -> None:
    # GIVEN a folded log where a record without a trailing space is exactly the fold's width,
    # and the next record starts with a process prefix
    width = 69
    exact = ("2025-10-15T00:07:00Z (APIServer pid=1) INFO 10-14 17:07:00 [x.py:1] ok " + "y" * 99)[
        :width
    ]
    nxt = "(APIServer pid=1) INFO 10-14 17:07:01 [x.py:1] next"
    folded = [*_fold(STATS.format(s=0), width), exact, nxt]
    # WHEN split records are joined THEN the prefixed record is a record of its own
    split = find_split_records(pl.Series("line", folded), starts=LOG_RECORD_START)
    assert [line for line in split.lines.to_list() if line] == [STATS.format(s=0), exact, nxt]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=2), min_size=1, max_size=12),
       st.integers(min_value=60, max_value=140))  # fmt: skip
def test_any_log_folded_at_any_width_reads_back_whole(kinds: list[int], width: int) -> None:
    # GIVEN lines of a timestamped log, some longer than the fold, folded at `width` columns
    whole = [
        [STATS.format(s=i % 60), ACCESS, f"2025-10-15T00:00:00Z INFO short {i}"][kind]
        for i, kind in enumerate(kinds)
    ]
    folded = [piece for line in whole for piece in _fold(line, width)]
    # WHEN split records are joined
    split = find_split_records(pl.Series("line", folded), starts=LOG_RECORD_START)
    # THEN either nothing was folded often enough to tell, or every line is whole again
    if split.joined:
        assert [line for line in split.lines.to_list() if line] == whole
    else:
        assert len(folded) - len(whole) < 2


def test_an_oom_message_folded_once_by_a_terminal_is_joined_mid_word() -> None:
    # vllm issue 26863: a PyTorch OOM pasted from a terminal 180 columns wide, "this proce" /
    # "ss has 23.40 GiB memory in use"
    head = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 232.00 MiB. GPU 0 has a "
        "total capacity of 23.57 GiB of which 154.25 MiB is free. Including non-PyTorch memory, "
        "this proce"
    )
    lines = [head, "ss has 23.40 GiB memory in use.", "", "I am using an RTX 3090"]
    split = find_split_records(
        pl.Series("line", lines), starts=LOG_RECORD_START, opens="OutOfMemoryError"
    )
    assert split.joined == 1
    assert split.lines[0].endswith("this process has 23.40 GiB memory in use.")
