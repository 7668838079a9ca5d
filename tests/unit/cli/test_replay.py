"""``oomtrace replay``: exit codes, exact error lines, JSON keys."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import click
import polars as pl
import pytest
from click.testing import CliRunner, Result

import oomtrace.cli.replay
from oomtrace.cli import cli
from tests.factories import at
from tests.unit.replay.helpers import lifecycle, trace_dir, trace_of

DATA = Path(__file__).resolve().parents[2] / "data"
CONFIG = {"num_gpu_blocks": 20, "block_size": 16, "max_num_seqs": 8}
MODEL = {"kv_bytes_per_token": 131072}


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, ["replay", *args])


def three_long_requests(tmp_path: Path, config: dict[str, Any] | None = None) -> Path:
    # each: a 64-token prompt (4 blocks), a token a second from 1 s after admission: 5 blocks
    # at its first token, 6 blocks at its 17th (16 s later), finished after 33 tokens. In the
    # recorded 20-block pool all three run: 8 blocks at 0.75 s, 15 at 10 s, 18 at 30 s.
    trace = trace_of(
        *(
            lifecycle(r, t, prompt=64, output=33, decode_s=32)
            for r, t in (("a", 0), ("b", 0.5), ("c", 1))
        ),
        samples=[
            {"ts": at(t), "metric": "kv_blocks_used", "value": v, "device": None}
            for t, v in ((0.75, 8), (10, 15), (30, 18))
        ],
        engine_config=CONFIG if config is None else config,
        model=MODEL,
    )
    return trace_dir(tmp_path, trace)


def test_json_has_the_headline_keys_and_the_calibration(tmp_path: Path) -> None:
    # GIVEN a trace whose recorded pool of 20 blocks holds all three (18 at most)
    path = three_long_requests(tmp_path)
    # WHEN replayed with an 11-block pool: c waits (2 blocks free at 1 s), a takes its 6th
    # block at 17 s (11 held) and b finds none for its 6th at 17.5 s
    result = run(str(path), "--kv-blocks", "11", "--json")
    # THEN it succeeds and the JSON carries the headline numbers
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert {
        "overflow", "overflow_ts", "peak_blocks", "preemptions", "rejections",
        "queue_delay_p50_s", "queue_delay_p99_s", "settings", "time_model", "calibration",
    } <= set(doc)  # fmt: skip
    assert doc["overflow"] is True
    assert doc["overflow_ts"] == "2025-03-14T09:00:17.500000Z"
    assert doc["peak_blocks"] == 11
    assert doc["peak_bytes"] == 11 * 16 * 131072
    assert doc["settings"]["max_num_seqs"] == 8
    assert doc["calibration"]["samples"] == 3
    assert doc["calibration"]["kv_usage_mae"] == 0.0


def test_search_reports_the_best_setting_and_its_outcome(tmp_path: Path) -> None:
    # GIVEN the same trace in an 11-block pool, where a and b run together and run it dry
    path = three_long_requests(tmp_path)
    # WHEN searching max-num-seqs
    result = run(str(path), "--kv-blocks", "11", "--search", "max-num-seqs", "--json")
    # THEN the best is 1 sequence, without overflow, at the cost of c waiting for a and b
    # (from 1 s to 66 s)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["best"]["setting"] == {"max_num_seqs": 1}
    assert doc["best"]["overflow"] is False
    assert doc["best"]["preemptions"] == 0
    assert doc["best"]["queue_delay_max_s"] == 65.0
    assert doc["search"]["goal"] == "largest"
    assert [(t["value"], t["passes"]) for t in doc["search"]["tried"]] == [(1, True), (2, False)]


def test_text_output_states_overflow_peak_and_time_model(tmp_path: Path) -> None:
    path = three_long_requests(tmp_path)
    result = run(str(path), "--kv-blocks", "11", "--no-calibrate")
    assert result.exit_code == 0, result.output
    assert "overflow: the pool ran dry at 2025-03-14 09:00:17.500Z" in result.output
    assert "peak: 11 blocks (100.0 % of the pool) = 22.00 MiB" in result.output
    assert "decode speeds: 3 recorded" in result.output
    assert "calibration" not in result.output


def test_device_memory_sizes_the_pool_from_the_budget(tmp_path: Path) -> None:
    # GIVEN 1 GiB of device, 512 MiB of weights, 256 MiB reserve, 128 KiB per token
    path = three_long_requests(tmp_path)
    result = run(
        str(path), "--device-memory", "1GiB", "--weights", "512MiB", "--reserve", "256MiB",
        "--json", "--no-calibrate",
    )  # fmt: skip
    # THEN the pool is 256 MiB / (16 x 128 KiB) = 128 blocks
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["settings"]["kv_blocks"] == 128


def test_out_writes_per_request_outcomes_and_the_series(tmp_path: Path) -> None:
    path = three_long_requests(tmp_path)
    result = run(str(path), "--out", str(tmp_path / "out"), "--no-calibrate")
    assert result.exit_code == 0, result.output
    outcomes = pl.read_parquet(tmp_path / "out" / "outcomes.parquet")
    assert outcomes["request_id"].to_list() == ["a", "b", "c"]
    assert pl.read_parquet(tmp_path / "out" / "series.parquet").height > 0


def test_a_directory_with_nothing_readable_is_refused(tmp_path: Path) -> None:
    result = run(str(tmp_path))
    assert result.exit_code == 2
    assert result.output == (
        f"oomtrace: error: {tmp_path}: no file that oomtrace can read; pass the engine log, "
        "nvidia-smi CSV or metrics export, or --format\n"
    )


def test_a_raw_engine_log_is_replayed_through_ingest() -> None:
    # GIVEN a vLLM 0.8.5 log whose one request has a 5-token prompt, max_tokens 64 and no
    # stated output (it was aborted)
    log = DATA / "vllm" / "v1_0.8.5_glued.log"
    # WHEN replayed straight from the log, at 30 tokens/s
    result = run(str(log), "--kv-blocks", "500", "--decode-tokens-per-s", "30", "--json")
    # THEN it is replayed at its bound, 5 + 63 stored tokens = 5 blocks, and says so
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["peak_blocks"] == 5
    assert doc["time_model"]["output_tokens"] == {"max_tokens_bound": 1}
    assert doc["settings"]["block_size"] == 16


def test_config_gives_the_kv_bytes_per_token(tmp_path: Path) -> None:
    # GIVEN Llama-3.1-8B: 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 bytes = 128 KiB per token
    path = three_long_requests(tmp_path)
    config = DATA / "configs" / "llama-3.1-8b"
    # WHEN replayed with --config, and with fp8 on two GPUs
    plain = run(str(path), "--config", str(config), "--json", "--no-calibrate")
    fp8 = run(str(path), "--config", str(config), "--kv-cache-dtype", "fp8",
              "--tensor-parallel", "2", "--json", "--no-calibrate")  # fmt: skip
    # THEN the bytes follow the architecture
    assert json.loads(plain.output)["settings"]["kv_bytes_per_token"] == 131072
    assert json.loads(fp8.output)["settings"]["kv_bytes_per_token"] == 131072 // 4


def test_config_takes_the_tensor_parallel_size_the_trace_states(tmp_path: Path) -> None:
    # GIVEN a trace of a server that stated two tensor-parallel GPUs
    path = three_long_requests(tmp_path, {**CONFIG, "tensor_parallel_size": 2})
    config = DATA / "configs" / "llama-3.1-8b"
    # WHEN replayed with --config and no --tensor-parallel, and with --tensor-parallel 1
    stated = run(str(path), "--config", str(config), "--json", "--no-calibrate")
    given = run(str(path), "--config", str(config), "--tensor-parallel", "1", "--json",
                "--no-calibrate")  # fmt: skip
    # THEN each GPU holds half the KV heads, as analyze counts them; the option still wins
    assert stated.exit_code == 0, stated.output
    assert json.loads(stated.output)["settings"]["kv_bytes_per_token"] == 131072 // 2
    assert json.loads(given.output)["settings"]["kv_bytes_per_token"] == 131072


def test_a_pool_size_is_required_when_the_trace_does_not_state_one(tmp_path: Path) -> None:
    path = three_long_requests(tmp_path, config={})
    result = run(str(path))
    assert result.exit_code == 2
    assert result.output == (
        "oomtrace: error: the trace's manifest states neither num_gpu_blocks nor the KV cache "
        "size; pass --kv-blocks N, or --device-memory with --weights, --reserve and "
        "--kv-bytes-per-token\n"
    )


def test_the_recorded_kv_cache_size_in_tokens_gives_the_pool(tmp_path: Path) -> None:
    # GIVEN an engine that printed "GPU KV cache size: 320 tokens" but no block count
    path = three_long_requests(tmp_path, config={"kv_cache_tokens": 320, "block_size": 16})
    # WHEN replayed with the recorded pool, and with 32-token blocks
    recorded = json.loads(run(str(path), "--json").output)
    larger = json.loads(run(str(path), "--json", "--block-size", "32").output)
    # THEN the pool is 320 / 16 = 20 blocks, or 10 blocks of 32 tokens; calibration runs
    assert recorded["settings"]["kv_blocks"] == 20
    assert larger["settings"]["kv_blocks"] == 10
    assert recorded["calibration"]["kv_usage_mae"] == 0.0


def test_kv_blocks_and_device_memory_exclude_each_other(tmp_path: Path) -> None:
    path = three_long_requests(tmp_path)
    result = run(str(path), "--kv-blocks", "10", "--device-memory", "1GiB")
    assert result.exit_code == 2
    assert result.output == "oomtrace: error: give --kv-blocks or --device-memory, not both\n"


def test_device_memory_without_a_unit_is_refused(tmp_path: Path) -> None:
    path = three_long_requests(tmp_path)
    result = run(str(path), "--device-memory", "24", "--weights", "1GiB")
    assert result.exit_code == 2
    assert result.output == (
        "oomtrace: error: --device-memory '24' has no unit; write it with one, e.g. '24GiB' "
        "(binary, 2**30) or '24GB' (decimal, 10**9) or '24B'\n"
    )


def test_device_memory_too_small_for_one_block_is_refused(tmp_path: Path) -> None:
    path = three_long_requests(tmp_path)
    result = run(str(path), "--device-memory", "1GiB", "--weights", "1GiB")
    assert result.exit_code == 2
    assert result.output == (
        "oomtrace: error: --device-memory leaves 0 B after --weights and --reserve, less than "
        "one KV block (2,097,152 B); give more device memory or less weights/reserve\n"
    )


def test_the_commands_choices_are_the_librarys() -> None:
    from oomtrace.cli.replay import POLICY_CHOICES, TARGET_CHOICES
    from oomtrace.replay import POLICIES, SEARCH_TARGETS

    assert POLICY_CHOICES == POLICIES
    assert TARGET_CHOICES == SEARCH_TARGETS


def test_polars_allocator_is_asked_for_huge_pages_for_large_inputs_only(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # GIVEN a trace directory whose tables hold 3,000 bytes, and no allocator setting
    (tmp_path / "requests.parquet").write_bytes(b"x" * 2000)
    (tmp_path / "samples.parquet").write_bytes(b"x" * 1000)
    monkeypatch.delenv("POLARS_THP", raising=False)
    huge_pages = oomtrace.cli.replay.huge_pages_for_large_inputs
    # WHEN the command reads its inputs: THEN below the size the allocator is left as it is
    monkeypatch.setattr(oomtrace.cli.replay, "HUGE_PAGES_FROM", 3001)
    assert huge_pages(click.Context(cli), cli, (tmp_path,)) == (tmp_path,)
    assert "POLARS_THP" not in os.environ
    # and from the size on, Polars is asked to back its buffers with transparent huge pages
    monkeypatch.setattr(oomtrace.cli.replay, "HUGE_PAGES_FROM", 3000)
    huge_pages(click.Context(cli), cli, (tmp_path, tmp_path / "missing.log"))
    assert os.environ["POLARS_THP"] == "1"
    # GIVEN a user's own setting: THEN it is left as it is
    monkeypatch.setenv("POLARS_THP", "0")
    huge_pages(click.Context(cli), cli, (tmp_path,))
    assert os.environ["POLARS_THP"] == "0"
