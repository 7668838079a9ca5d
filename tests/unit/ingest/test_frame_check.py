"""The check at the boundaries between a parser's modules: it names what differs."""

from __future__ import annotations

import polars as pl
import pytest

from oomtrace.errors import SchemaError
from oomtrace.ingest.frame_check import check_frame

SCHEMA = pl.Schema({"record_seq": pl.Int64(), "line": pl.String()})


def test_a_frame_with_the_declared_columns_passes_in_any_order() -> None:
    frame = pl.DataFrame({"line": ["a"], "record_seq": [256]})
    assert check_frame(frame, SCHEMA, "lines") is frame


def test_missing_unexpected_and_mistyped_columns_are_each_named() -> None:
    frame = pl.DataFrame({"record_seq": [1.5], "other": [1]})
    with pytest.raises(SchemaError) as err:
        check_frame(frame, SCHEMA, "vLLM records")
    message = str(err.value)
    assert message.startswith("vLLM records: ")
    assert "missing line" in message
    assert "record_seq is Float64, not Int64" in message
    assert "unexpected other" in message


def test_at_least_allows_other_columns_but_not_a_wrong_dtype() -> None:
    frame = pl.DataFrame({"record_seq": [1], "line": ["x"], "extra": [True]})
    check_frame(frame, SCHEMA, "header", at_least=True)
    with pytest.raises(SchemaError, match="line is Int32, not String"):
        check_frame(frame.with_columns(line=pl.lit(1)), SCHEMA, "header", at_least=True)
