"""The analysis benchmark at smoke size: its generator works and the three implementations of the
pool computation (oomtrace, DuckDB SQL, pandas) agree. Timing is the benchmark's job, not this."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.analyze_bench import (
    _command,
    _whole_report,
    run_duckdb,
    run_oomtrace,
    run_pandas,
    run_read,
    run_read_all,
    run_single_pass,
)
from benchmarks.analyze_data import generate


@pytest.fixture(scope="module")
def day(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate(tmp_path_factory.mktemp("bench") / "day", requests=3000, hours=0.1, hz=10)


def test_the_peers_compute_the_same_pool_as_oomtrace(day: Path) -> None:
    ours = run_oomtrace(day)
    assert ours["rows"] == 3600
    assert ours["resident_sum"] > 0
    for peer in (run_duckdb(day), run_pandas(day)):
        for key in ("rows", "resident_sum", "tokens_sum", "kv_sum"):
            assert peer[key] == pytest.approx(ours[key], rel=1e-9), (peer["name"], key)


def test_the_floor_reads_the_same_inputs(day: Path) -> None:
    floor = run_read(day)
    assert floor["rows"] > 3600


def test_the_whole_command_and_its_floor_run_on_the_same_directory(day: Path) -> None:
    floor = run_read_all(day)
    command = _command(day)
    assert floor["rows"] > 3600
    assert command["incidents"] >= 1
    assert command["cpu_s"] > 0
    assert command["peak_rss_mib"] > 0


def test_the_cross_check_compares_the_incidents_of_the_command_and_the_single_pass(
    day: Path,
) -> None:
    single = run_single_pass(day)
    command = _command(day)
    assert single["facts"] == command["facts"]
    (cls, anchor, peak_ts, _, _) = command["facts"][0]
    assert (cls, anchor) == ("kv_exhaustion", "oom")
    assert peak_ts.endswith("Z")


def test_the_whole_only_report_gives_the_command_as_a_ratio_to_its_floor() -> None:
    # GIVEN the floor and the command as the benchmark measures them
    whole = [
        {"name": "read all", "process_s": 2.0, "cpu_s": 2.5, "peak_rss_mib": 2000.0},
        {"name": "oomtrace analyze", "process_s": 10.0, "cpu_s": 12.5, "peak_rss_mib": 1800.0},
    ]
    # WHEN reported without the pool contenders
    text = _whole_report(whole, "data from day")
    # THEN the command's line carries its wall and CPU as multiples of the floor's
    line = next(x for x in text.splitlines() if x.startswith("oomtrace analyze"))
    assert line.split()[-2:] == ["5.00", "5.00"]
    assert "pool floor" not in text
