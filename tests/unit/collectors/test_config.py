"""Agent settings: durations, rates, sizes, and one clear message per mistake."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collectors.config import ConfigError, build_config, parse_duration, parse_size
from oomtrace.units import parse_bytes


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("100ms", 0.1),
        ("1s", 1.0),
        ("1.5s", 1.5),
        ("6h", 21600.0),
        ("7d", 604800.0),
        ("10Hz", 0.1),
        ("50 hz", 0.02),
        (" 2m ", 120.0),
    ],
)
def test_durations_and_rates_are_read_in_seconds(text: str, seconds: float) -> None:
    assert parse_duration(text, what="--x") == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["10x", "10", "fast", "-1s", "1e3ms", ""])
def test_a_bad_duration_names_the_option_and_shows_the_spelling(text: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_duration(text, what="--log-interval")
    assert str(err.value) == (
        f"--log-interval {text!r} is not a duration; write e.g. '100ms', '1s', '6h' or '10Hz'"
    )


def test_a_zero_duration_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^--timeout '0s' must be more than zero$"):
        parse_duration("0s", what="--timeout")


@pytest.mark.parametrize("text", ["2G", "2", "2 gigs", "GiB"])
def test_a_size_without_an_unambiguous_unit_is_refused(text: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_size(text, what="--max-disk")
    assert str(err.value) == (
        f"--max-disk {text!r} is not a size; write e.g. '2GiB' (binary, 2**30) or '2GB' "
        "(decimal, 10**9)"
    )


@given(
    st.decimals(min_value=0, max_value=10**6, places=3, allow_nan=False),
    st.sampled_from(["B", "KiB", "MiB", "GiB", "TiB", "KB", "MB", "GB", "TB", "gib", "mb"]),
)
def test_sizes_are_read_exactly_as_the_analyzer_reads_them(number: object, unit: str) -> None:
    text = f"{number}{unit}"
    assert parse_size(text, what="--max-disk") == parse_bytes(text)


def test_no_source_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        build_config(out=str(tmp_path))
    assert str(err.value) == "give at least one source: --prometheus URL, --nvml or --log PATH"


def test_an_unwritable_out_directory_is_refused_before_anything_runs(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ConfigError) as err:
        build_config(out=str(blocker / "capture"), logs=["x.log"])
    assert str(err.value) == (
        f"--out '{blocker / 'capture'}': cannot write the capture directory (Not a directory); "
        "give a writable directory"
    )


def test_only_http_urls_are_scraped(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^--prometheus 'file:///etc/passwd': only http"):
        build_config(out=str(tmp_path), prometheus=["file:///etc/passwd"])


def test_a_flush_interval_over_a_second_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is over 1s; segments are flushed at least once"):
        build_config(out=str(tmp_path), logs=["x"], flush_interval="2s")


def test_defaults_match_the_issue(tmp_path: Path) -> None:
    config = build_config(out=str(tmp_path), prometheus=["http://127.0.0.1:8000/metrics"])
    assert config.prometheus_interval_s == pytest.approx(0.1)  # 10 Hz
    assert config.nvml_interval_s == pytest.approx(0.02)  # 50 Hz
    assert config.retention.retain_s == 6 * 3600
    assert config.retention.max_bytes == 2 * 2**30
    assert config.writer.flush_interval_s <= 1.0
    assert config.writer.max_segment_bytes * 16 <= config.retention.max_bytes


def test_a_bad_setting_leaves_no_directory_behind(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        build_config(out=str(tmp_path / "new"), logs=["x"], log_interval="10x")
    assert not (tmp_path / "new").exists()
