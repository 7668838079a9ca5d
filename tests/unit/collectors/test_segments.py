"""The segment format and its reader: round trips, torn tails, damaged lines, skipped files."""

from __future__ import annotations

import json
import tempfile
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collectors.format import FORMAT_VERSION, DecodeError, Header, decode, encode, segment_name
from collectors.segments import read_capture

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=10,
)
records = st.builds(
    lambda kind, extra: {"k": kind, **extra},
    st.text(min_size=1, max_size=8),
    st.dictionaries(st.text(max_size=8).filter(lambda k: k != "k"), json_values, max_size=5),
)


def header(**overrides: object) -> bytes:
    base = Header(FORMAT_VERSION, "node-a", "agent-1", "agent", 1, 1_700_000_000_000_000_000, 1)
    return encode({**base.to_record(), **overrides})


def sample(ts: int, value: int = 1) -> dict[str, object]:
    return {
        "k": "s",
        "ts": ts,
        "src": "collector.nvml",
        "dev": 0,
        "m": {"device_used_bytes": value},
    }


def write_segment(directory: Path, *lines: bytes, name: str = "") -> Path:
    path = directory / (name or segment_name(1_700_000_000_000_000_000, "agent-1", 1))
    path.write_bytes(b"".join(lines))
    return path


@given(records)
def test_any_record_round_trips_through_one_line(record: dict[str, object]) -> None:
    line = encode(record)
    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1
    assert decode(line[:-1]) == record


def test_a_flipped_byte_is_caught_by_the_checksum() -> None:
    line = bytearray(encode(sample(5)))
    line[20] ^= 0x01
    with pytest.raises(DecodeError, match="checksum"):
        decode(bytes(line[:-1]))


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.integers(min_value=1, max_value=10**18), min_size=1, max_size=8), st.data())
def test_a_segment_cut_at_any_byte_yields_every_complete_record_and_reports_the_torn_tail(
    tmp_path: Path, stamps: list[int], data: st.DataObject
) -> None:
    # GIVEN a segment of records, cut at an arbitrary byte (a kill in the middle of a write)
    body = header() + b"".join(encode(sample(ts)) for ts in stamps)
    cut = data.draw(st.integers(min_value=len(header()), max_value=len(body)))
    directory = Path(tempfile.mkdtemp(dir=tmp_path))
    write_segment(directory, body[:cut])
    # WHEN it is read
    result = read_capture(directory)
    # THEN every record that ended before the cut is there, in order, and nothing else
    complete = body[:cut].count(b"\n") - 1
    assert result.samples.ts_ns == sorted(stamps[:complete])
    torn = [d for d in result.diagnostics if d.kind == "torn_tail"]
    assert len(torn) == (0 if body[:cut].endswith(b"\n") else 1)
    assert [d.kind for d in result.diagnostics if d.kind != "torn_tail"] == []


def test_a_damaged_line_in_the_middle_is_skipped_and_reading_continues(tmp_path: Path) -> None:
    damaged = bytearray(encode(sample(2)))
    damaged[15] ^= 0x04
    write_segment(tmp_path, header(), encode(sample(1)), bytes(damaged), encode(sample(3)))
    result = read_capture(tmp_path)
    assert result.samples.ts_ns == [1, 3]
    (diagnostic,) = result.diagnostics
    assert diagnostic.kind == "corrupt_record"
    assert diagnostic.detail == "line 3: checksum mismatch"


def test_files_that_are_not_readable_segments_are_skipped_with_a_reason(tmp_path: Path) -> None:
    write_segment(tmp_path, b"", name="seg-20240101T000000.000000Z-agent-1-000001.oseg")
    write_segment(tmp_path, b"hello\n", name="seg-20240101T000001.000000Z-agent-1-000002.oseg")
    write_segment(
        tmp_path,
        header(version=FORMAT_VERSION + 1),
        encode(sample(1)),
        name="seg-20240101T000002.000000Z-agent-1-000003.oseg",
    )
    result = read_capture(tmp_path)
    reasons = sorted(d.detail for d in result.diagnostics if d.kind == "skipped_file")
    assert reasons == [
        "empty file",
        (
            f"format version {FORMAT_VERSION + 1} is newer than this reader ({FORMAT_VERSION}); "
            "upgrade oomtrace"
        ),
        "no valid header (line is not '<crc32> <json>')",
    ]
    assert len(result.samples) == 0


def test_unknown_record_kinds_from_a_newer_writer_are_counted_not_fatal(tmp_path: Path) -> None:
    write_segment(tmp_path, header(), encode({"k": "future", "ts": 1}), encode(sample(2)))
    result = read_capture(tmp_path)
    assert result.samples.ts_ns == [2]
    (diagnostic,) = result.diagnostics
    assert (diagnostic.kind, diagnostic.count) == ("unknown_record", 1)


def test_a_repeated_scrape_is_expanded_to_the_text_it_repeats(tmp_path: Path) -> None:
    url = "http://127.0.0.1:1/metrics"
    base = {"k": "prom", "src": "collector.prometheus", "url": url, "dur": 5}
    write_segment(
        tmp_path,
        header(),
        encode({**base, "ts": 10, "text": "a 1\n"}),
        encode({**base, "ts": 20, "same": 1}),
        encode({**base, "ts": 30, "text": "a 2\n"}),
    )
    scrapes = read_capture(tmp_path).prometheus[url]
    assert scrapes.ts_ns == [10, 20, 30]
    assert scrapes.text == ["a 1\n", "a 1\n", "a 2\n"]


def test_gap_records_merge_into_one_gap_with_its_end_and_a_source_gap_event(
    tmp_path: Path,
) -> None:
    gap = {
        "k": "gap",
        "ts": 100,
        "src": "collector.prometheus",
        "target": "u",
        "reason": "HTTP 500",
    }
    write_segment(
        tmp_path,
        header(),
        encode({**gap, "end": None, "attempts": 1}),
        encode({**gap, "end": 2_500_000_100, "attempts": 4}),
    )
    result = read_capture(tmp_path)
    (merged,) = result.gaps
    assert (merged.start_ns, merged.end_ns, merged.attempts) == (100, 2_500_000_100, 4)
    assert result.events.kind == ["source_gap"]
    assert result.events.detail == ["collector.prometheus (u): no data for 2.500 s: HTTP 500"]


def test_time_between_two_agent_runs_is_a_gap_that_says_how_the_first_ended(
    tmp_path: Path,
) -> None:
    # GIVEN a run killed at t=2 s (no close record) and a run starting at t=5 s
    second = 1_000_000_000
    write_segment(
        tmp_path,
        header(stream="agent-1"),
        encode(sample(1 * second)),
        encode(sample(2 * second)),
        name="seg-20240101T000000.000000Z-agent-1-000001.oseg",
    )
    write_segment(
        tmp_path,
        header(stream="agent-2", pid=2),
        encode(sample(5 * second)),
        name="seg-20240101T000005.000000Z-agent-2-000001.oseg",
    )
    # WHEN read THEN the three seconds in between are a gap of the collector itself
    (gap,) = read_capture(tmp_path).gaps
    assert (gap.source, gap.start_ns, gap.end_ns) == ("collector", 2 * second, 5 * second)
    assert (
        gap.reason
        == "collector not running: previous run ended without closing (killed or crashed)"
    )


def test_health_records_become_canonical_collector_samples(tmp_path: Path) -> None:
    health = {
        "k": "health",
        "ts": 7,
        "src": "collector.log",
        "target": "/x",
        "up": 0,
        "samples": 10,
        "errors": 3,
        "misses": 1,
    }
    write_segment(tmp_path, header(), encode(health))
    samples = read_capture(tmp_path).samples
    assert dict(zip(samples.metric, samples.value, strict=True)) == {
        "collector_up": 0.0,
        "collector_samples_total": 10.0,
        "collector_errors_total": 3.0,
        "collector_deadline_misses_total": 1.0,
    }
    assert set(samples.source) == {"collector.log"}


def test_segment_lines_are_plain_crc_and_json(tmp_path: Path) -> None:
    # The format is meant to be readable with standard tools: check the layout FORMAT.md states.
    line = encode(sample(9))
    crc, payload = line[:-1].split(b" ", 1)
    assert int(crc, 16) == zlib.crc32(payload)
    assert json.loads(payload)["ts"] == 9
