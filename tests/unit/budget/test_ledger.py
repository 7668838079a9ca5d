"""The admission ledger: reservations per request, running total in file order, what remains,
requests that never fit alone, and rows left out with their reason."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from oomtrace.budget import KVSpec
from oomtrace.budget.ledger import LEDGER_SCHEMA, LedgerGap, build_ledger
from oomtrace.errors import InputError

SEED = KVSpec.from_explicit(layers=32, kv_heads=8, head_dim=128, dtype_bytes=2)  # 131,072 B/token
AVAILABLE = 8_548_578_304  # the worked example: 24 GiB - 3 GiB - 14e9 B


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


CSV = """request_id,input_tokens,max_new_tokens
r1,4000,96
r2,4096,1024
r3,100000,31072
r4,1,0
r5,12,
r6,abc,5
r7,-3,5
"""


def test_each_request_reserves_its_contract_and_the_total_runs_in_file_order(
    tmp_path: Path,
) -> None:
    ledger = build_ledger(write(tmp_path, "requests.csv", CSV), SEED, AVAILABLE)
    cumulative = [536_870_912, 1_207_959_552, 18_387_828_736, 18_389_925_888]
    expected = pl.DataFrame(
        {
            "request_id": ["r1", "r2", "r3", "r4"],
            "input_tokens": [4000, 4096, 100_000, 1],
            "max_new_tokens": [96, 1024, 31_072, 0],
            "stored_tokens": [4096, 5120, 131_072, 1],
            "reserved_tokens": [4096, 5120, 131_072, 16],  # whole blocks of 16
            # 131,072 B x 4,096 / 5,120 / 131,072 / 16 tokens
            "reserved_bytes": [536_870_912, 671_088_640, 17_179_869_184, 2_097_152],
            "cumulative_bytes": cumulative,
            "fits_alone": [True, True, False, True],
            # first come, first served: r4 waits behind r3, which can never be admitted
            "admitted": [True, True, False, False],
        },
        schema=LEDGER_SCHEMA,
    )
    assert_frame_equal(ledger.rows, expected)
    assert ledger.total_bytes == 18_389_925_888
    assert ledger.remaining_bytes == AVAILABLE - 18_389_925_888
    assert ledger.admitted == 2
    assert ledger.never_fit["request_id"].to_list() == ["r3"]


def test_rows_that_cannot_be_used_are_counted_by_reason_not_dropped_silently(
    tmp_path: Path,
) -> None:
    ledger = build_ledger(write(tmp_path, "requests.csv", CSV), SEED, AVAILABLE)
    assert ledger.gaps == (
        LedgerGap("missing input or max new tokens", 1, "r5"),
        LedgerGap("token count is not a whole number", 1, "r6"),
        LedgerGap("negative token count", 1, "r7"),
    )


def test_json_list_json_object_and_json_lines_with_canonical_column_names(
    tmp_path: Path,
) -> None:
    rows = [
        {"request_id": "a", "prompt_tokens": 10, "max_tokens": 6},
        {"request_id": "b", "prompt_tokens": 20, "max_tokens": 12},
    ]
    files = [
        write(tmp_path, "list.json", json.dumps(rows)),
        write(tmp_path, "object.json", json.dumps({"requests": rows})),
        write(tmp_path, "lines.jsonl", "\n".join(json.dumps(r) for r in rows)),
    ]
    for path in files:
        ledger = build_ledger(path, SEED, AVAILABLE, block_size=1)
        assert ledger.rows["reserved_bytes"].to_list() == [16 * 131_072, 32 * 131_072], path


def test_requests_without_an_id_are_named_by_row_and_reported(tmp_path: Path) -> None:
    path = write(tmp_path, "r.csv", "input_tokens,max_new_tokens\n1,1\n2,2\n")
    ledger = build_ledger(path, SEED, AVAILABLE)
    assert ledger.rows["request_id"].to_list() == ["row 1", "row 2"]
    assert ledger.gaps == (LedgerGap("no request id (named by row number)", 2, "row"),)


def test_a_ledger_without_token_columns_is_refused_naming_them(tmp_path: Path) -> None:
    path = write(tmp_path, "r.csv", "request_id,tokens\nx,5\n")
    with pytest.raises(InputError) as raised:
        build_ledger(path, SEED, AVAILABLE)
    assert str(raised.value) == (
        f"--ledger {path}: no column 'input_tokens' or 'prompt_tokens' "
        "(columns: request_id, tokens)"
    )


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("r.txt", "x", "unknown file type .txt; use .csv, .json or .jsonl"),
        ("r.json", '{"rows": 1}', "expected a JSON list of request objects"),
        ("r.json", "{oops", "cannot be read"),
    ],
)
def test_unusable_ledger_files_are_refused(
    tmp_path: Path, name: str, text: str, message: str
) -> None:
    with pytest.raises(InputError, match=message):
        build_ledger(write(tmp_path, name, text), SEED, AVAILABLE)


def test_a_missing_ledger_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        build_ledger(tmp_path / "absent.csv", SEED, AVAILABLE)
