"""``run_replay``: what ``oomtrace replay`` runs, from a trace and typed options, with whatever
the options leave open taken from what the trace recorded."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from oomtrace.errors import UsageError
from oomtrace.replay import ReplayOptions, run_replay
from oomtrace.trace import Trace
from tests.factories import at
from tests.unit.replay.helpers import lifecycle, trace_of

RECORDED = {"num_gpu_blocks": 20, "block_size": 16, "max_num_seqs": 8}


def two_requests(config: dict[str, object] | None = None) -> Trace:
    return trace_of(
        lifecycle("a", 0, prompt=64, output=33, decode_s=32),
        lifecycle("b", 0.5, prompt=64, output=33, decode_s=32),
        samples=[{"ts": at(10), "metric": "kv_blocks_used", "value": 10, "device": None}],
        engine_config=RECORDED if config is None else config,
        model={"kv_bytes_per_token": 131072},
    )


def test_what_the_options_leave_open_comes_from_the_trace() -> None:
    # GIVEN a trace that recorded its pool, block size and max_num_seqs, and observed KV usage
    # WHEN replayed with no options
    run = run_replay(two_requests(), ReplayOptions())
    # THEN the settings are the recorded ones, the bytes per token the trace's model spec,
    # and, with observed usage beside the recorded pool, the replay is calibrated
    settings = run.result.settings
    assert (settings.kv_blocks, settings.block_size, settings.max_num_seqs) == (20, 16, 8)
    assert settings.kv_bytes_per_token == 131072
    assert run.calibration is not None
    assert run.found is None


def test_an_explicit_zero_lifts_a_recorded_limit_and_calibration_can_be_declined() -> None:
    run = run_replay(two_requests(), ReplayOptions(max_num_seqs=0, calibrate=False))
    assert run.result.settings.max_num_seqs is None
    assert run.calibration is None


def test_the_tables_written_are_the_searchs_best(tmp_path: Path) -> None:
    # GIVEN a search for the smallest pool with no preemption
    run = run_replay(two_requests(), ReplayOptions(search="kv-blocks", calibrate=False))
    assert run.found is not None
    assert run.found.best is not None
    # WHEN its tables are written
    run.write_tables(tmp_path / "out")
    # THEN they are the best setting's, and the JSON carries the search beside the replay
    series = pl.read_parquet(tmp_path / "out" / "series.parquet")
    assert series["kv_blocks_peak"].max() == run.found.best.summary.peak_blocks
    assert pl.read_parquet(tmp_path / "out" / "outcomes.parquet").height == 2
    document = run.to_json()
    assert document["best"]["setting"] == {"kv_blocks": run.found.best_value}
    assert document["calibration"] is None


def test_device_memory_without_the_weights_cannot_size_a_pool() -> None:
    options = ReplayOptions(device_bytes=24 << 30)
    with pytest.raises(UsageError, match="--device-memory needs --weights"):
        run_replay(two_requests(), options)
