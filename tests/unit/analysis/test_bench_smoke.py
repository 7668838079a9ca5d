"""The analysis benchmark at smoke size: its generator works and the three implementations of the
pool computation (oomtrace, DuckDB SQL, pandas) agree. Timing is the benchmark's job, not this."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.analyze_bench import (
    _command,
    run_duckdb,
    run_oomtrace,
    run_pandas,
    run_read,
    run_read_all,
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
