"""SGLang batch lines in shapes met in the field (public issue threads): read like the others."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from oomtrace.ingest import IngestOptions, ingest_paths


def _metric(path: Path, metric: str) -> list[float]:
    trace = ingest_paths([path], IngestOptions())
    assert trace.manifest.sources[0].parser == "sglang-log"
    return trace.samples.filter(pl.col("metric") == metric).sort("ts")["value"].to_list()


def test_hisparse_lines_read_the_device_pool_not_the_host_pool(tmp_path: Path) -> None:
    # https://github.com/sgl-project/sglang/pull/22331 (HiSparse decode lines): the device pool
    # stays at 20800 tokens while the host pool grows
    path = tmp_path / "hisparse.log"
    path.write_text(
        "".join(
            f"[2026-04-08 14:10:0{s} TP0] Decode batch, #running-req: 5, #gpu-token: 20800, "
            f"gpu token usage: 0.29, #cpu-token: {cpu}, cpu token usage: {usage}, cuda graph: "
            f"True, gen throughput (token/s): 153.62, #queue-req: 0\n"
            for s, cpu, usage in ((0, 42022, "0.29"), (2, 42222, "0.30"), (3, 42422, "0.30"))
        )
    )
    assert _metric(path, "kv_tokens_used") == [20800, 20800, 20800]
    assert _metric(path, "kv_usage_ratio") == [0.29, 0.29, 0.29]
    assert _metric(path, "requests_running") == [5, 5, 5]


def test_a_0_1_log_without_times_gives_its_decode_counters(tmp_path: Path) -> None:
    # https://github.com/sgl-project/sglang/issues/393 (SGLang 0.1.x, April 2024: "new fill
    # batch." prefill lines, a decode line without "Decode batch", uvicorn's access lines)
    path = tmp_path / "v01.log"
    path.write_text(
        'INFO:     127.0.0.1:40192 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
        "new fill batch. #seq: 1. #cached_token: 17. #new_token: 353. #remaining_req: 1. "
        "#running_req: 3. tree_cache_hit_rate: 80.82%.\n"
        "new fill batch. #seq: 1. #cached_token: 17. #new_token: 106. #remaining_req: 0. "
        "#running_req: 4. tree_cache_hit_rate: 80.82%.\n"
        "#running-req: 5, #token: 1938, token usage: 0.24, #queue-req: 0\n"
        'INFO:     127.0.0.1:32878 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
    )
    trace = ingest_paths([path], IngestOptions())
    assert trace.manifest.engine is not None
    assert trace.manifest.engine["version_family"] == "0.1"
    got = trace.samples.select("metric", "value").rows()
    assert ("kv_tokens_used", 1938) in got
    assert ("kv_usage_ratio", 0.24) in got
    running = [v for m, v in got if m == "requests_running"]
    assert running == [3, 4, 5]
    assert [v for m, v in got if m == "requests_waiting"] == [1, 0, 0]
    assert trace.samples["ts"].is_null().all()
