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


def test_a_run_in_which_every_source_failed_throughout_exits_1(tmp_path: Path) -> None:
    # GIVEN a log path that never exists and a Prometheus endpoint nothing listens on
    missing = tmp_path / "never" / "engine.log"
    out = tmp_path / "capture"
    # WHEN the agent runs for a moment
    result = CliRunner().invoke(
        cli,
        [
            "collect",
            "--log",
            str(missing),
            "--prometheus",
            "http://127.0.0.1:9/metrics",
            "--out",
            str(out),
            "--duration",
            "300ms",
        ],
    )
    # THEN it says nothing was collected, names each source's cause, and exits 1
    assert result.exit_code == 1, result.output
    last = result.stderr.splitlines()[-1]
    assert last.startswith("oomtrace: error: every source failed for the whole run")
    assert f"log {missing}: FileNotFoundError" in last
    assert "prometheus http://127.0.0.1:9/metrics: " in last


def test_one_working_source_is_enough_for_a_clean_exit(tmp_path: Path) -> None:
    # GIVEN a log that exists beside one that does not
    log = tmp_path / "engine.log"
    log.write_text("INFO 01-01 00:00:00 [api_server.py:1] started\n")
    result = CliRunner().invoke(
        cli,
        [
            "collect",
            "--log",
            str(log),
            "--log",
            str(tmp_path / "missing.log"),
            "--out",
            str(tmp_path / "capture"),
            "--duration",
            "300ms",
        ],
    )
    # THEN the run counts as a success (the failing source is a gap in the capture)
    assert result.exit_code == 0, result.output


def test_the_stdlib_entry_point_also_exits_1_when_nothing_was_collected(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing.log"
    code = collectors_main(
        ["--out", str(tmp_path / "capture"), "--log", str(missing), "--duration", "300ms"]
    )
    assert code == 1
    assert (
        capsys.readouterr()
        .err.splitlines()[-1]
        .startswith("collectors: error: every source failed for the whole run")
    )
