"""SGLang batch lines in shapes met in the field (public issue threads): read like the others."""

from __future__ import annotations

from datetime import UTC, datetime
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


def test_a_format_with_the_rank_tag_beside_the_source_file_is_read(tmp_path: Path) -> None:
    # https://github.com/sgl-project/sglang/pull/11854 (a PD decode deployment's own logging
    # format: date, level, pid, then "[DPn TPn EPn file.py:line]"; the ranks out of order)
    path = tmp_path / "decode.log"
    path.write_text(
        "Example output (batch size 32):\n"
        + "".join(
            f"2025-10-20 03:02:22 INFO {pid} [DP{r} TP{r} EP{r} scheduler_metrics_mixin.py:222] "
            f"Decode batch. #running-req: 32, #token: {tokens}, token usage: {usage}, accept len: "
            f"1.93, pre-allocated usage: 0.00, #retracted-req: 0, cuda graph: True, gen "
            f"throughput (token/s): 693.45, #queue-req: {queue}\n"
            for pid, r, tokens, usage, queue in (
                (31223, 3, 157952, "0.21", 0),
                (31222, 2, 162112, "0.22", 1),
                (31224, 4, 168768, "0.22", 2),
            )
        )
    )
    trace = ingest_paths([path], IngestOptions())
    assert trace.manifest.sources[0].parser == "sglang-log"
    got = dict(trace.samples.select("metric", "value").iter_rows())
    # one series per metric: the lowest rank tag present (DP2) is it
    assert got["kv_tokens_used"] == 162112
    assert got["kv_usage_ratio"] == 0.22
    assert got["requests_waiting"] == 1
    assert got["requests_running"] == 32
    assert trace.samples["ts"].unique().to_list() == [datetime(2025, 10, 20, 3, 2, 22, tzinfo=UTC)]


def test_a_batch_line_that_lost_its_opening_bracket_is_read(tmp_path: Path) -> None:
    # https://github.com/sgl-project/sglang/issues/10408 (the paste lost the "[" of the only
    # batch line, above the request-slot refusal)
    path = tmp_path / "paste.md"
    path.write_text(
        "The error message when it crashes\n"
        "`RuntimeError: alloc_req_slots runs out of memory. Please set a smaller number for "
        "`--max-running-requests`. self.req_to_token_pool.available_size()=1, num_reqs=2,\n"
        "```\n"
        "2025-09-13 09:09:15 TP0] Decode batch. #running-req: 4, #token: 9071, token usage: "
        "0.01, cuda graph: True, gen throughput (to\n"
    )
    assert _metric(path, "requests_running") == [4]
    assert _metric(path, "kv_tokens_used") == [9071]
    assert _metric(path, "kv_usage_ratio") == [0.01]


def test_a_lost_bracket_with_milliseconds_is_not_taken_for_python_logging(tmp_path: Path) -> None:
    # the line of issue 10408 as SGLANG_LOG_MS=1 prints it: the ".mmm" must not make it a
    # Python-logging line whose message would start with "TP0]"
    path = tmp_path / "paste.log"
    path.write_text(
        "2025-09-13 09:09:15.250 TP0] Decode batch. #running-req: 4, #token: 9071, token usage: "
        "0.01, cuda graph: True, gen throughput (token/s): 41.10, #queue-req: 0\n"
    )
    assert _metric(path, "kv_tokens_used") == [9071]


def test_the_same_format_on_one_gpu_has_no_rank_tag_and_is_read(tmp_path: Path) -> None:
    # the format of sglang PR 11854 where no rank tag is printed (a single scheduler)
    path = tmp_path / "one.log"
    path.write_text(
        "2025-10-20 03:02:22 INFO 31223 [scheduler_metrics_mixin.py:222] Decode batch. "
        "#running-req: 5, #token: 1000, token usage: 0.21, cuda graph: True, gen throughput "
        "(token/s): 693.45, #queue-req: 0\n"
    )
    assert _metric(path, "requests_running") == [5]


def test_a_debug_log_whose_only_sglang_statement_is_a_retraction_is_read(
    tmp_path: Path,
) -> None:
    # https://github.com/sgl-project/sglang/pull/6731 (one GPU so no rank tag; a developer's
    # debug prints and "#" comments around SGLang's own retraction line)
    path = tmp_path / "retract.log"
    path.write_text(
        "debug logs\n\n```\n"
        "[2025-05-28 08:25:50] ========== update_running_batch ==========\n"
        "[2025-05-28 08:25:50] check_decode_mem self.new_page_count_next_decode()=6\n"
        "[163, 157, 157, 157, 131, 131, 131, 129, 131, 129, 285, 129, 129, 129, 129]\n\n"
        "# Log format: (node.id, node.lock_ref, node.loading)\n"
        "[2025-05-28 08:25:50] self.tree_cache.evictable_size()=0\n"
        "[2025-05-28 08:25:50] Decode out of memory happened. #retracted_reqs: 1, "
        "#new_token_ratio: 0.8024 -> 0.9085\n"
        "[2025-05-28 08:25:50] alloc_decode len(self.free_pages)=5\n"
    )
    trace = ingest_paths([path], IngestOptions())
    assert trace.manifest.sources[0].parser == "sglang-log"
    assert trace.events.filter(pl.col("kind") == "preemption").height == 1
    assert _metric(path, "preemptions_in_interval") == [1.0]


def test_a_format_with_each_field_in_brackets_gives_the_batch_figures(tmp_path: Path) -> None:
    # https://github.com/sgl-project/sglang/issues/22877 (a large PD deployment's own logging
    # format, "[date time][file.py:N][LEVEL]: msg"; prefill lines with #prealloc-req)
    path = tmp_path / "bracketed.log"
    path.write_text(
        "".join(
            f"[2026-04-15 17:13:1{s}][scheduler_metrics_mixin.py:424][INFO]: Prefill batch, "
            f"#new-seq: 1, #new-token: 1, #cached-token: 0, token usage: {usage}, #running-req: "
            f"{running}, #queue-req: 0, #prealloc-req: {prealloc}, #inflight-req: 1, cuda graph: "
            "False, input throughput (token/s): 2.49\n"
            for s, usage, running, prealloc in ((0, "0.00", 0, 18), (1, "0.01", 2, 22))
        )
    )
    assert _metric(path, "requests_running") == [0, 2]
    assert _metric(path, "kv_usage_ratio") == [0.0, 0.01]
    trace = ingest_paths([path], IngestOptions())
    assert trace.samples["ts"].min() == datetime(2026, 4, 15, 17, 13, 10, tzinfo=UTC)
