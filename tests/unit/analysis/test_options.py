"""The --window syntax."""

from __future__ import annotations

import pytest

from oomtrace.analysis.options import AnalyzeOptions, parse_duration
from oomtrace.errors import UsageError


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("60s", 60.0), ("2m", 120.0), ("1.5h", 5400.0), ("500ms", 0.5), (" 90 s ", 90.0)],
)
def test_durations_carry_their_unit(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["60", "-5s", "0s", "1 fortnight"])
def test_a_duration_without_a_valid_unit_is_refused(text: str) -> None:
    with pytest.raises(UsageError, match="--window"):
        parse_duration(text, what="--window")


def test_a_bare_number_is_refused_with_an_example() -> None:
    with pytest.raises(UsageError) as err:
        parse_duration("60", what="--window")
    assert str(err.value) == "--window '60' is not a duration; write e.g. '60s', '2m' or '500ms'"


def test_options_refuse_a_window_of_zero() -> None:
    with pytest.raises(UsageError):
        AnalyzeOptions(window_s=0)
