"""How the vLLM parser reads a file chunk by chunk: what it keeps, and what it lets go."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from oomtrace.ingest.vllm.extract import _REQUEST_KIND, Extracted, _route
from oomtrace.ingest.vllm.log_header import (
    HEADER_AT,
    HEADER_FIELDS,
    HEADER_SLICE,
    captured_fields,
    read_header,
)
from oomtrace.ingest.vllm.request_lines import ID_HEAD, PARAMS_FIRST, _match_received, _with_id
from oomtrace.ingest.vllm.request_patterns import RECEIVED, REQUEST_LINES


def _buffer_bytes(column: pl.Series) -> int:
    """Bytes of the text buffers ``column`` holds on to (views into shared buffers count whole)."""
    array = column.to_arrow(compat_level=pl.CompatLevel.newest())
    return sum(buffer.size for buffer in array.buffers()[2:] if buffer is not None)


def test_rows_kept_from_a_chunk_do_not_hold_on_to_the_chunks_text() -> None:
    # GIVEN a chunk of long lines, of which a few rows are kept as slices of the line
    lines = pl.Series("line", [f"{i:08d} x " + "x" * 400 for i in range(20_000)])
    kept = lines.head(3).str.slice(0, 10).to_frame("body")
    assert _buffer_bytes(kept["body"]) > 1_000_000
    short = lines.head(3).str.slice(0, 8).to_frame("request_id")
    chunk = Extracted(ooms=[kept], requests=[short])
    # WHEN its reader hands them to what the file keeps
    chunk.own()
    out = Extracted()
    out.merge(chunk)
    # THEN they hold their own text only, and it is unchanged
    assert _buffer_bytes(out.ooms[0]["body"]) < 1_000
    assert _buffer_bytes(out.requests[0]["request_id"]) < 1_000
    assert out.ooms[0]["body"].to_list() == ["00000000 x", "00000001 x", "00000002 x"]
    assert out.requests[0]["request_id"].to_list() == ["00000000", "00000001", "00000002"]


# --- fast paths read exactly what the table's patterns capture --------------------------------

_PREFIXES = [
    "",
    "(APIServer pid=1) ",
    "\x1b[1;36m(Worker pid=2)\x1b[0;0m ",
    "2025-06-02T08:00:00Z ",
    "é ",
]
_FILE = st.one_of(
    st.sampled_from(["api_server.py", "loggers.py", "x-1.py"]),
    st.text(alphabet="ab_.-:[]é1 \t", max_size=14),
)
_TEXT = st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=40)


@st.composite
def _headers(draw: st.DrawFn) -> str:
    digits = st.text(alphabet="0123456789", min_size=2, max_size=2)
    return (
        draw(st.sampled_from(_PREFIXES))
        + draw(st.sampled_from(["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]))
        + f" {draw(digits)}-{draw(digits)} {draw(digits)}:{draw(digits)}:{draw(digits)}"
        + draw(st.sampled_from(["", ".123", ",5"]))
        + " "
        + draw(st.sampled_from(["", "["]))
        + draw(st.one_of(_FILE, st.just("x" * 90)))
        + ":"
        + draw(st.text(alphabet="0123456789", min_size=1, max_size=4) | st.just(""))
        + draw(st.sampled_from(["] ", "] ", "]", " "]))
        + draw(_TEXT)
    )


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.lists(_headers(), min_size=1, max_size=12))
def test_headers_read_at_fixed_offsets_equal_the_captured_header(lines: list[str]) -> None:
    # GIVEN lines with engine headers of every shape: standard ones, odd file names, fractions
    # of a second, no bracket, impossible dates, headers too long for the window
    line = pl.col("line")
    frame = (
        pl.DataFrame({"line": lines})
        .with_row_index("record_seq")
        .with_columns(header_at=line.str.find(HEADER_AT))
        .with_columns(
            prefix_text=line.cast(pl.Binary)
            .bin.head(pl.col("header_at").fill_null(0))
            .cast(pl.String)
        )
    )
    # WHEN the header is read (standard headers at fixed byte offsets)
    fast = read_header(frame).select("record_seq", *HEADER_FIELDS)
    # THEN every field equals what capturing the HEADER pattern gives
    window = line.str.slice(pl.col("prefix_text").str.len_chars(), HEADER_SLICE)
    captured = captured_fields(
        frame.with_columns(header_window=window, simple_header=pl.lit(value=False))
    )
    assert_frame_equal(fast, captured.select("record_seq", *HEADER_FIELDS))


_ID = st.one_of(
    st.text(alphabet="abc-09.:é \t\u00a0", min_size=0, max_size=12),
    st.text(alphabet="ab", min_size=280, max_size=320),
)


@st.composite
def _received_bodies(draw: st.DrawFn) -> str:
    return (
        draw(
            st.sampled_from(
                ["Received request ", "Received request ", "Engine 0: Received request "]
            )
        )
        + draw(_ID)
        + draw(st.sampled_from([": params: ", ": prompt: ", ": params:", ":: params: "]))
        + draw(st.sampled_from(["", "'max_tokens=5', ", "SamplingParams(max_tokens=7), "]))
        + draw(_TEXT)
        + draw(st.sampled_from(["", ", max_tokens=None", " prompt_token_ids: [1, 2]"]))
    )


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.lists(_received_bodies(), min_size=1, max_size=12))
def test_received_lines_read_at_the_colon_equal_the_pattern_and_its_capture(
    bodies: list[str],
) -> None:
    # GIVEN "Received request" lines, some matching the table's pattern and some not (odd ids,
    # long ids, spaces, missing words, prompt or params first)
    body = pl.col("body")
    rows = pl.DataFrame({"body": bodies}).with_row_index("record_seq")
    # WHEN they are read without the pattern
    fast = _match_received(rows).select("record_seq", "captured_id", "params_first")
    # THEN the same rows match, with the id the capture gives over the head of the line, and
    # the same "params first"
    captured = rows.filter(body.str.contains(RECEIVED)).select(
        "record_seq",
        captured_id=body.str.head(ID_HEAD).str.extract(RECEIVED, 1),
        params_first=body.str.contains(PARAMS_FIRST),
    )
    assert_frame_equal(fast, captured)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.text(alphabet="ab.é", min_size=300, max_size=400)
        | st.text(alphabet="ab.\t é", max_size=40),
        min_size=1,
        max_size=8,
    )
)
def test_ids_to_the_end_of_the_line_equal_the_captured_id(ids: list[str]) -> None:
    # GIVEN "Added request <id>" lines, short and longer than the id window
    pattern = next(e.pattern for e in REQUEST_LINES if e.lead == "Added request")
    body = pl.col("body")
    hit = pl.DataFrame({"body": [f"Added request {i}" for i in ids]}).filter(
        body.str.contains(pattern)
    )
    # WHEN the id is sliced off the line THEN it is what the capture gives
    fast = _with_id(hit, pattern).select("captured_id")
    captured = hit.select(captured_id=body.str.head(ID_HEAD).str.extract(pattern, 1))
    assert_frame_equal(fast, captured)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(
                [
                    "",
                    "Received request ",
                    "Added request ",
                    "Engine 000: ",
                    "Engine 000: Received request ",
                    "Avg prompt throughput: ",
                    "Request ",
                    "Aborted request",
                    "2 Engines Aggregated: Avg prompt throughput: ",
                ]
            ),
            _TEXT,
        ).map("".join),
        min_size=1,
        max_size=12,
    )
)
def test_request_leads_told_by_literal_prefix_equal_the_classifier_pattern(
    bodies: list[str],
) -> None:
    # GIVEN candidate records of every kind
    cand = pl.DataFrame({"body": bodies}).with_row_index("record_seq")
    # WHEN they are routed
    stats, by_req, others = _route(cand)
    # THEN each lands where the classifier pattern puts it: stats, request (by lead), other
    routed = pl.concat(
        [
            stats.select("record_seq", _where=pl.lit("stats")),
            *(part.select("record_seq", _where=pl.lit(req)) for req, part in by_req.items()),
            others.select("record_seq", _where=pl.lit("other")),
        ]
    )
    kind = pl.col("_g").struct.field
    read = cand.with_columns(
        _g=pl.col("body").str.head(48).str.extract_groups(_REQUEST_KIND)
    ).with_columns(is_stats=kind("stats").is_not_null(), request_lead=kind("req"))
    expected = pl.concat(
        [
            read.filter("is_stats").select("record_seq", _where=pl.lit("stats")),
            read.filter(pl.col("request_lead").is_not_null()).select(
                "record_seq", _where=pl.col("request_lead")
            ),
            read.filter(~pl.col("is_stats") & pl.col("request_lead").is_null()).select(
                "record_seq", _where=pl.lit("other")
            ),
        ]
    )
    assert_frame_equal(routed.sort("record_seq", "_where"), expected.sort("record_seq", "_where"))
