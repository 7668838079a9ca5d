"""How something was read (assumptions) told apart from what could not be seen (gaps), and the
clock stated as one sentence per source."""

from __future__ import annotations

import pytest

from oomtrace.diagnostics import (
    WITHHELD,
    SourceDiagnostics,
    clock_sentence,
    kind_category,
    source_clock_sentence,
)

ASSUMED = "read as UTC because the log states no zone (pass --tz ZONE)"


@pytest.mark.parametrize(
    ("clock", "sentence"),
    [
        (
            {"tz": "Europe/Berlin", "tz_source": "option", "year": 2025, "year_source": "option"},
            "local times read in Europe/Berlin (--tz); year 2025 from --year",
        ),
        (
            {
                "tz": "UTC",
                "tz_assumed": False,
                "tz_source": "kubectl/docker timestamps",
                "year_source": "kubectl/docker timestamps",
            },
            (
                "times from the kubectl/docker timestamps, which state their zone; "
                "year from the same timestamps"
            ),
        ),
        ({"tz": "UTC", "tz_assumed": True, "tz_source": "default"}, ASSUMED),
        (
            {"tz": "UTC", "tz_source": "default", "year": 2025, "year_source": "mtime"},
            f"{ASSUMED}; year 2025 from the file's modification time (pass --year if wrong)",
        ),
        (
            {"tz": "UTC", "tz_source": "default", "year": 2024, "year_source": "option"},
            f"{ASSUMED}; year 2024 from --year",
        ),
        (
            {
                "tz": "UTC",
                "tz_source": "default",
                "year": 2024,
                "year_last": 2025,
                "year_source": "collector arrival times",
            },
            f"{ASSUMED}; year 2024 (to 2025) from the collector arrival times",
        ),
        (
            {"tz": "UTC+02:00", "tz_assumed": False, "tz_source": "the log"},
            "times read in UTC+02:00",
        ),
        ({"tz": "UTC", "tz_assumed": True}, ASSUMED),  # written before tz_source
        ({}, ""),
    ],
)
def test_each_clock_record_reads_as_one_sentence(clock: dict[str, object], sentence: str) -> None:
    assert clock_sentence(clock) == sentence


def test_a_source_sentence_leaves_out_what_its_parser_already_noted() -> None:
    # GIVEN a log whose parser assumed the zone and guessed the year, and said so in its notes
    diag = SourceDiagnostics("vllm.log", "vllm-log", "n")
    diag.clock = {
        "tz": "UTC",
        "tz_assumed": True,
        "tz_source": "default",
        "year": 2025,
        "year_source": "mtime",
    }
    diag.note("vLLM prints local time without a zone: read as UTC; pass --tz if wrong")
    # WHEN its clock sentence is made THEN only the year remains
    assert source_clock_sentence(diag) == (
        "year 2025 from the file's modification time (pass --year if wrong)"
    )
    diag.note("vLLM prints no year: placed the last line in 2025; pass --year if that is wrong")
    assert source_clock_sentence(diag) == ""


def test_a_stated_zone_is_told_even_when_a_note_mentions_the_tz_option() -> None:
    diag = SourceDiagnostics("vllm.log", "vllm-log", "n")
    diag.clock = {"tz": "UTC", "tz_assumed": False, "tz_source": "kubectl/docker timestamps"}
    diag.note("12 of 90 line(s): the printed time differs ...: pass --tz")
    assert source_clock_sentence(diag) == (
        "times from the kubectl/docker timestamps, which state their zone"
    )


def test_a_note_is_a_gap_only_when_the_parser_says_data_was_lost() -> None:
    # GIVEN a source with a note on how it was read and one on data left out
    diag = SourceDiagnostics("gpu.csv", "nvidia-smi-csv", "n")
    read_as = "nvidia-smi timestamps are local time without a zone; read as UTC"
    left_out = "3 row(s) under a header without `timestamp` cannot be placed in time; left out"
    diag.note(read_as)
    diag.note(left_out, lost=True)
    # THEN each keeps its category, also through the manifest's JSON
    assert (diag.category(read_as), diag.category(left_out)) == ("assumption", "gap")
    again = SourceDiagnostics.from_json(diag.to_json())
    assert (again.category(read_as), again.category(left_out)) == ("assumption", "gap")
    assert again.notes == [read_as, left_out]


def test_analysis_kinds_split_into_inferred_bases_and_missing_data() -> None:
    assert kind_category("no_admission") == "assumption"
    assert kind_category("no_end") == "assumption"
    assert kind_category("clock") == "assumption"
    assert kind_category("hole") == "gap"
    assert kind_category("skipped_lines") == "gap"
    assert kind_category("no_allocator") == "gap"
    assert kind_category("note") == "assumption"
    assert kind_category("left_out") == "gap"


@pytest.mark.parametrize(
    "line",
    [
        "INFO 03-11 06:18:50 [logger.py:39] Received request r: prompt: 'S3CR3T', params: x",
        "2024-11-03T14:51:23Z DEBUG generate{}: router/src/server.rs:295: Input: S3CR3T",
        '2024-11-03T14:51:22Z  INFO generate{inputs="S3CR3T" total_time="4s"}: Success',
        "[2025-06-10 15:00:00] Receive: obj=GenerateReqInput(text='S3CR3T', rid='a')",
        "prompt 'S3CR3T' ignored",
    ],
)
def test_a_skipped_line_that_names_a_text_key_is_never_quoted(line: str) -> None:
    # even redacted: the example would show where a prompt was, and redaction can be fooled
    diag = SourceDiagnostics(name="x.log", parser="p", node="n")
    diag.skip("not used", 2, line)
    assert diag.skipped["not used"].example == WITHHELD
    assert diag.skipped["not used"].count == 2


def test_a_skipped_line_without_a_text_key_is_kept_as_the_example() -> None:
    diag = SourceDiagnostics(name="x.log", parser="p", node="n")
    line = 'INFO:     127.0.0.1:46928 - "POST /v1/completions HTTP/1.1" 200 OK'
    diag.skip("uvicorn access line", 1, line)
    diag.skip("uvicorn access line", 1, "a later line is not kept")
    assert diag.skipped["uvicorn access line"].example == line
    assert diag.skipped["uvicorn access line"].count == 2
