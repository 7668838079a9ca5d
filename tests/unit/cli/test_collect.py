"""`oomtrace collect` and `python -m collectors`: one clear line and exit 2 for bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from collectors.cli import main as collectors_main
from oomtrace.cli import cli


def collect(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["collect", *args])
    return result.exit_code, result.stderr


def test_no_source_is_one_line_and_exit_2(tmp_path: Path) -> None:
    code, err = collect("--out", str(tmp_path))
    assert code == 2
    assert err == (
        "oomtrace: error: give at least one source: --prometheus URL, --nvml or --log PATH\n"
    )


def test_a_bad_interval_is_one_line_and_exit_2(tmp_path: Path) -> None:
    code, err = collect("--out", str(tmp_path), "--log", "x.log", "--log-interval", "10x")
    assert code == 2
    assert err == (
        "oomtrace: error: --log-interval '10x' is not a duration; write e.g. '100ms', '1s', "
        "'6h' or '10Hz'\n"
    )


def test_an_unreachable_directory_is_one_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    code, err = collect("--out", str(tmp_path / "f" / "d"), "--log", "x.log")
    assert code == 2
    assert err == (
        f"oomtrace: error: --out '{tmp_path / 'f' / 'd'}': cannot write the capture directory "
        "(Not a directory); give a writable directory\n"
    )


def test_an_ambiguous_disk_cap_is_refused(tmp_path: Path) -> None:
    code, err = collect("--out", str(tmp_path), "--log", "x.log", "--max-disk", "2G")
    assert code == 2
    assert err.startswith("oomtrace: error: --max-disk '2G' is not a size; write e.g. '2GiB'")


def test_the_stdlib_entry_point_reports_the_same_way(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert collectors_main(["--out", str(tmp_path), "--nvml", "--retain", "forever"]) == 2
    assert capsys.readouterr().err == (
        "collectors: error: --retain 'forever' is not a duration; write e.g. '100ms', '1s', "
        "'6h' or '10Hz'\n"
    )


def test_a_short_run_writes_a_closed_capture(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    log.write_text("INFO 01-01 00:00:00 [api_server.py:1] started\n")
    out = tmp_path / "capture"
    result = CliRunner().invoke(
        cli, ["collect", "--log", str(log), "--out", str(out), "--duration", "300ms"]
    )
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith("oomtrace: wrote ")
    assert "stopped by duration" in result.stderr
    from collectors.segments import read_capture

    capture = read_capture(out)
    assert capture.logs[str(log)].text == ["INFO 01-01 00:00:00 [api_server.py:1] started"]
    assert all(s.closed_cleanly for s in capture.segments)
