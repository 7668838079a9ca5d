"""vLLM server logs of every version family, behind every supervisor, become the canonical trace.

The files in ``tests/data/vllm`` are written in the real formats (``docs/formats/vllm.md``), with
their traps: colour codes, CRLF-joined records, glued records, idle DEBUG repeats, records
repeated by tensor-parallel ranks, New Year inside the file, internal request ids, streamed
outputs, start-up refusals, OOM tracebacks.
"""

from __future__ import annotations

import gzip
import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from collectors.redact import redact_line
from oomtrace.cli import cli
from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.ingest import IngestOptions, ingest_paths
from oomtrace.ingest.parser_api import ClockOptions, LineParser, ParseContext, ParseResult
from oomtrace.ingest.parser_registry import registry
from oomtrace.ingest.text.input_file import InputFile
from oomtrace.ingest.vllm.file_tables import RANK_REPEAT, STALE_STATS
from oomtrace.ingest.vllm.log_parser import NO_HEADER, NOT_USED, PARSER, UVICORN_LINE
from oomtrace.schema import conform
from oomtrace.trace import Trace
from oomtrace.units import GiB, parse_bytes

DATA = Path(__file__).resolve().parents[3] / "data" / "vllm"
REQUESTS = {
    "ts": pl.Datetime("ns", "UTC"),
    "request_id": pl.String,
    "event": pl.String,
    "prompt_tokens": pl.Int64,
    "max_tokens": pl.Int64,
    "output_tokens": pl.Int64,
}


def _ingest(name: str, **options: object) -> Trace:
    options.setdefault("year", 2025)
    return ingest_paths([DATA / name], IngestOptions(**options))  # type: ignore[arg-type]


def _at(*fields: int) -> datetime:
    return datetime(*fields, tzinfo=UTC)  # type: ignore[misc]


def _series(trace: Trace, metric: str) -> list[float]:
    return trace.samples.filter(pl.col("metric") == metric).sort("ts")["value"].to_list()


def _requests(trace: Trace) -> pl.DataFrame:
    return trace.requests.select(list(REQUESTS))


def _expected(rows: list[tuple[object, ...]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=REQUESTS, orient="row")


# --- V0 ---------------------------------------------------------------------------------------


def test_v0_tp2_log_gives_config_stats_requests_preemptions_and_the_oom() -> None:
    trace = _ingest("v0_0.6.6_tp2.log")
    assert trace.manifest.engine == {"name": "vllm", "version_family": "v0", "version": "0.6.6"}
    config = trace.manifest.engine_config
    assert {k: config[k] for k in ("num_gpu_blocks", "block_size", "max_model_len")} == {
        "num_gpu_blocks": 12606, "block_size": 16, "max_model_len": 8192,
    }  # fmt: skip
    # "Loading model weights took 7.4829 GB" is GiB (vLLM divides by 2**30).
    assert config["model_weights_bytes"] == parse_bytes("7.4829 GiB")
    assert config["available_kv_cache_bytes"] == parse_bytes("12.31 GiB")
    assert config["cuda_graph_bytes"] == parse_bytes("0.31 GiB")
    assert (config["max_concurrency"], config["max_concurrency_tokens"]) == (24.62, 8192)
    assert (config["gpu_memory_utilization"], config["max_num_seqs"]) == (0.9, 256)
    assert config["tensor_parallel_size"] == 2
    assert "quantization" not in config  # "None" is not a statement

    assert _series(trace, "requests_waiting") == [1.0, 4.0]  # V0 calls it "Pending"
    assert _series(trace, "requests_swapped") == [0.0, 1.0]
    assert _series(trace, "kv_usage_ratio") == pytest.approx([0.123, 0.994])
    assert _series(trace, "prefix_cache_hit_ratio") == pytest.approx([0.352])
    assert _series(trace, "preemptions_total") == [1.0, 51.0]

    assert_frame_equal(
        _requests(trace),
        _expected([
            (_at(2025, 12, 31, 23, 59, 58), "chat-5b4ae1", "arrived", 7, 1024, None),
            (_at(2026, 1, 1, 0, 0, 1), "chat-77aa02", "arrived", 5, 4096, None),
            (_at(2026, 1, 1, 0, 0, 3), "chat-5b4ae1", "preempted", None, None, None),
            (_at(2026, 1, 1, 0, 0, 9), "chat-77aa02", "preempted", None, None, None),
            (_at(2026, 1, 1, 0, 0, 10), "chat-77aa02", "aborted", None, None, None),
        ]),
    )  # fmt: skip

    events = trace.events.select("ts", "kind", "device", "requested_bytes", "detail")
    assert events["kind"].to_list() == [
        "engine_start", "preemption", "preemption", "oom", "engine_dead",
    ]  # fmt: skip
    assert events.row(2, named=True)["detail"] == (
        "request chat-77aa02 preempted (recompute) for lack of KV cache space; cumulative "
        "preemptions: 51 (vLLM V0 logs only every 50th one)"
    )
    oom = events.row(3, named=True)
    # The OOM line is a raw traceback line: it takes the time of the record before it.
    assert (oom["ts"], oom["device"], oom["requested_bytes"]) == (
        _at(2026, 1, 1, 0, 0, 12), 1, 2 * GiB,
    )  # fmt: skip
    assert events.row(4, named=True)["detail"] == (
        "the V0 engine loop died (and 1 related line(s))"
    )


def test_v0_diagnostics_count_every_line_under_one_reason() -> None:
    source = _ingest("v0_0.6.6_tp2.log").manifest.sources[0]
    assert source.lines_read == 36
    assert source.lines_recognised + source.lines_skipped == source.lines_read
    assert {k: v.count for k, v in source.skipped.items()} == {
        RANK_REPEAT: 3, NOT_USED: 4, UVICORN_LINE: 2, NO_HEADER: 2,
    }  # fmt: skip
    assert source.skipped[UVICORN_LINE].example == (
        'INFO:     10.0.0.5:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK'
    )


def test_v0_async_engine_finished_lines_and_the_oldest_stats_form() -> None:
    trace = _ingest("v0_0.4_async.log")
    assert trace.manifest.engine["version_family"] == "v0"
    assert _requests(trace)["event"].to_list() == ["arrived", "finished", "aborted"]
    assert _series(trace, "requests_waiting") == [115.0]
    assert _series(trace, "kv_usage_ratio") == pytest.approx([0.99])
    assert trace.manifest.engine_config["num_gpu_blocks"] == 27871


# --- V1 ---------------------------------------------------------------------------------------


def test_v1_glued_records_are_split_and_idle_debug_repeats_dropped() -> None:
    trace = _ingest("v1_0.8.5_glued.log")
    running = trace.samples.filter(pl.col("metric") == "requests_running").sort("ts")
    assert running.select("ts", "value").rows() == [
        (_at(2025, 7, 28, 6, 40, 59), 8.0),
        (_at(2025, 7, 28, 6, 41, 9), 9.0),
        (_at(2025, 7, 28, 6, 41, 19), 0.0),
    ]
    source = trace.manifest.sources[0]
    assert source.skipped[STALE_STATS].count == 2
    assert source.skipped[RANK_REPEAT].count == 3  # weights, KV budget, graphs from rank 1
    assert "1 record(s) were glued onto the end of another line" in source.notes[-1]
    config = trace.manifest.engine_config
    assert config["num_gpu_blocks"] == 19592
    assert config["kv_cache_tokens"] == 313472
    assert config["model_weights_bytes"] == parse_bytes("30.7086 GiB")
    assert config["gpu_memory_utilization"] == 0.92
    assert trace.manifest.engine["version_family"] == "v1-0.8.5"


def test_v1_tensor_parallel_oom_counts_each_rank_once_and_each_device_once() -> None:
    trace = _ingest("v1_0.11_tp2_oom.log")
    assert_frame_equal(
        _requests(trace),
        _expected([
            (_at(2025, 11, 6, 10, 55, 1), "chatcmpl-a1", "arrived", 8, 8192, None),
            (_at(2025, 11, 6, 10, 55, 2), "chatcmpl-b2", "arrived", 3, 32000, None),
            (_at(2025, 11, 6, 10, 55, 3), "chatcmpl-c3", "arrived", 1, 100, None),
            (_at(2025, 11, 6, 10, 55, 4), "chatcmpl-c3", "finished", None, None, 8),
            (_at(2025, 11, 6, 10, 55, 20), "chatcmpl-a1", "aborted", None, None, None),
            (_at(2025, 11, 6, 10, 55, 20), "chatcmpl-b2", "aborted", None, None, None),
        ]),
    )  # fmt: skip
    ooms = trace.events.filter(pl.col("kind") == "oom").sort("device")
    assert ooms["device"].to_list() == [0, 1]
    assert ooms["free_bytes"].to_list() == [
        parse_bytes("734.69 MiB"), parse_bytes("730.69 MiB"),
    ]  # fmt: skip
    dead = trace.events.filter(pl.col("kind") == "engine_dead")
    assert dead.height == 1
    assert dead["ts"][0] == _at(2025, 11, 6, 10, 55, 19)
    config = trace.manifest.engine_config
    assert config["available_kv_cache_bytes"] == parse_bytes("2.30 GiB")
    assert (config["kv_cache_tokens"], config["max_concurrency_tokens"]) == (75840, 120000)


def test_v1_internal_ids_details_streams_and_interval_preemptions() -> None:
    trace = _ingest("v1_0.20_stream.log")
    assert_frame_equal(
        _requests(trace),
        _expected([
            # the DEBUG details line gives the prompt count; the prompt text mentions
            # "prompt_token_ids: [9]" itself, which must not be taken for the list
            (_at(2025, 9, 17, 18, 27, 20), "chatcmpl-f00d", "arrived", 11, 512, None),
            (_at(2025, 9, 17, 18, 27, 21), "chatcmpl-f00d", "first_token", None, None, 1),
            (_at(2025, 9, 17, 18, 27, 21), "chatcmpl-f00d", "progress", None, None, 3),
            (_at(2025, 9, 17, 18, 27, 22), "chatcmpl-f00d", "progress", None, None, 4),
            (_at(2025, 9, 17, 18, 27, 22), "chatcmpl-f00d", "finished", None, None, 4),
            (_at(2025, 9, 17, 18, 27, 23), "chatcmpl-beef", "arrived", None, 2048, None),
            (_at(2025, 9, 17, 18, 27, 25), "chatcmpl-beef", "aborted", None, None, None),
            (_at(2025, 9, 17, 18, 27, 26), "chatcmpl-dead", "rejected", None, None, None),
        ]),
    )  # fmt: skip
    assert _series(trace, "preemptions_in_interval") == [5.0]
    assert _series(trace, "requests_deferred") == [2.0]
    assert trace.events.filter(pl.col("kind") == "preemption")["detail"].to_list() == [
        "5 preemption(s) in the stats interval ending here"
    ]
    assert trace.manifest.engine["version_family"] == "v1-0.20"
    assert trace.manifest.engine_config["model_weights_bytes"] == parse_bytes("33.89 GiB")


def test_v1_newest_forms_device_names_aggregates_and_absent_prefix_cache() -> None:
    trace = _ingest("v1_0.31_xpu.log")
    assert _series(trace, "kv_usage_ratio") == pytest.approx([0.006, 0.4])
    assert _series(trace, "prefix_cache_hit_ratio") == pytest.approx([0.1])
    assert _series(trace, "requests_running") == [1.0, 12.0]
    config = trace.manifest.engine_config
    assert (config["kv_cache_tokens"], config["max_concurrency"]) == (425216, 10.38)
    assert trace.manifest.engine == {
        "name": "vllm", "version_family": "v1-0.30", "version": "0.31.0"
    }  # fmt: skip


def test_v1_cpu_build_states_its_pool_dtype_and_suffixed_ids() -> None:
    # vLLM 0.32.0's CPU build (written by the real server, tests/integration/test_vllm_real.py):
    # "CPU KV cache size", the blocks override, request logging with the engine's suffixed ids,
    # stats lines with "CPU KV cache usage" and no preemption figure
    trace = _ingest("v1_0.32_cpu.log", year=2026)
    config = trace.manifest.engine_config
    assert (config["kv_cache_tokens"], config["num_gpu_blocks"]) == (5120, 40)
    assert config["profiled_num_gpu_blocks"] == 128
    assert (config["dtype"], config["kv_cache_dtype"]) == ("float32", "auto")
    assert _series(trace, "kv_usage_ratio") == pytest.approx([0.974, 0.692])
    assert _series(trace, "requests_waiting") == [41.0, 10.0]
    assert not trace.samples.filter(pl.col("metric").str.starts_with("preemptions")).height
    ids = trace.requests.get_column("request_id").unique().sort().to_list()
    assert ids == [
        "cmpl-8b5e01c6d51fdb92-0", "cmpl-a1a92b6a584b59f6-0", "cmpl-bfcb6f2745dbf17c-0"
    ]  # fmt: skip


# --- start-up refusals ------------------------------------------------------------------------


def test_kv_cache_too_small_for_one_request_is_an_event_with_the_sizes() -> None:
    trace = _ingest("startup_kv_insufficient_v1.log")
    refusal = trace.events.filter(pl.col("kind") == "startup_kv_insufficient").row(0, named=True)
    assert refusal["requested_bytes"] == 16 * GiB
    assert refusal["free_bytes"] == parse_bytes("9.38 GiB")
    assert refusal["detail"] == (
        "max seq len 131072 needs 16.00 GiB of KV cache; 9.38 GiB available; estimated maximum "
        "model length 76784"
    )
    assert trace.events.filter(pl.col("kind") == "engine_dead").height == 1


def test_kv_cache_too_small_before_vllm_estimated_a_length_is_an_event_with_the_sizes() -> None:
    # vLLM 0.8.x (issue 16118, Llama 4 Scout at 1M tokens): no estimated length yet
    trace = _ingest("startup_kv_insufficient_v1_0.8.log")
    refusal = trace.events.filter(pl.col("kind") == "startup_kv_insufficient").row(0, named=True)
    assert (refusal["requested_bytes"], refusal["free_bytes"]) == (
        24 * GiB,
        parse_bytes("9.97 GiB"),
    )
    assert (
        refusal["detail"] == "max seq len 1048576 needs 24.00 GiB of KV cache; 9.97 GiB available"
    )


@pytest.mark.parametrize(
    ("name", "free", "total", "utilisation", "requested", "device"),
    [
        # 0.9.1 (issue 20305): a worker's traceback, the engine core's after it
        ("startup_free_memory_v1.log", "31.44 GiB", "47.38 GiB", 0.95, "45.01 GiB", ""),
        # 0.19 with the device named, printed bare by the engine core's multiprocessing
        ("startup_free_memory_cuda.log", "22.76 GiB", "24.0 GiB", 0.97, "23.28 GiB", "cuda:0's "),
    ],
)
def test_less_memory_free_at_start_up_than_asked_for_is_a_refusal_and_the_configuration(
    name: str, free: str, total: str, utilisation: float, requested: str, device: str
) -> None:
    trace = _ingest(name)
    config = trace.manifest.engine_config
    assert config["initial_free_bytes"] == parse_bytes(free)
    assert config["device_total_bytes"] == parse_bytes(total)
    assert config["gpu_memory_utilization"] == utilisation
    assert config["requested_memory_bytes"] == parse_bytes(requested)
    (refusal,) = trace.events.filter(pl.col("kind") == "startup_memory_insufficient").to_dicts()
    assert refusal["free_bytes"] == parse_bytes(free)
    assert refusal["total_bytes"] == parse_bytes(total)
    assert refusal["requested_bytes"] == parse_bytes(requested)
    # another process holds the difference between the device and what was free
    assert refusal["detail"] == (
        f"{free} of {device}{total} free at start-up, less than the {requested} asked for "
        f"(gpu_memory_utilization {utilisation}): other processes hold the rest"
    )
    assert trace.events.filter(pl.col("kind") == "engine_dead").height == 1


def test_negative_kv_budget_is_a_no_kv_memory_event() -> None:
    trace = _ingest("startup_no_kv_memory_v1.log")
    assert trace.manifest.engine_config["available_kv_cache_bytes"] == -parse_bytes("1.46 GiB")
    refusal = trace.events.filter(pl.col("kind") == "startup_no_kv_memory").row(0, named=True)
    assert refusal["free_bytes"] == 0
    assert refusal["detail"] == "vLLM found no memory left for the KV cache at start-up"


def test_v0_max_seq_len_above_the_cache_is_an_event_in_tokens() -> None:
    trace = _ingest("startup_max_seq_len_v0.log")
    refusal = trace.events.filter(pl.col("kind") == "startup_kv_insufficient").row(0, named=True)
    assert refusal["detail"] == "max seq len 32768 is above the 21680 tokens the KV cache can hold"
    assert refusal["requested_bytes"] is None
    assert trace.manifest.engine_config["model_weights_bytes"] == parse_bytes("13.4967 GiB")


# --- outer prefixes -----------------------------------------------------------------------------


def test_a_supervisor_prefix_of_no_known_form_is_read_past() -> None:
    # TorchServe's "<time> [INFO ] W-9000-model_1.0-stdout MODEL_LOG - " (pytorch/serve 3343)
    trace = _ingest("torchserve.log")
    assert trace.manifest.engine == {
        "name": "vllm", "version_family": "v0", "version": "0.6.1.dev238+ge2c6e0a82"
    }  # fmt: skip
    config = trace.manifest.engine_config
    assert (config["model_weights_bytes"], config["num_gpu_blocks"]) == (
        parse_bytes("6.0160 GiB"), 13273
    )  # fmt: skip
    assert _series(trace, "requests_running") == [2.0]
    # its time has no zone: the engine's printed time places the line
    assert trace.samples.get_column("ts").min() == _at(2025, 10, 7, 22, 56, 12)


def test_model_loading_in_gb_behind_a_script_prefix_is_the_weights_in_gib() -> None:
    # vLLM 0.7.x prints "GB" for bytes / 2**30 (v1/worker/gpu_model_runner.py); a launcher's own
    # "[date time]" before each line
    trace = _ingest("script_prefix_v0.7.log")
    config = trace.manifest.engine_config
    assert config["model_weights_bytes"] == parse_bytes("14.9889 GiB")
    assert (config["model_load_seconds"], config["num_gpu_blocks"]) == (5.263157, 27794)
    assert trace.manifest.sources[0].lines_recognised == 3


def test_a_record_printed_after_a_progress_bar_on_its_line_keeps_its_own_time() -> None:
    # a tqdm bar left without its newline, the engine core's fatal error after it (kvcached 191)
    trace = _ingest("progress_bar_glued.log")
    (death,) = trace.events.filter(pl.col("kind") == "engine_dead").to_dicts()
    assert death["ts"] == _at(2025, 10, 25, 11, 17, 27)
    assert death["detail"] == "EngineCore encountered a fatal error"


def test_journald_names_the_node_and_the_unit_lines_are_counted() -> None:
    trace = _ingest("journald.log")
    assert trace.manifest.nodes == ["ml2-1-a100-1"]
    assert _series(trace, "requests_running") == [1.0, 4.0]
    source = trace.manifest.sources[0]
    assert source.skipped[NO_HEADER].example == "Started vllm.service - vLLM server."


def test_journald_hosts_named_equally_often_give_the_same_node_every_time(
    tmp_path: Path,
) -> None:
    # GIVEN a journal merged from two hosts with as many vLLM lines each
    stats = (
        "INFO 09-22 23:46:42 metrics.py:367] Avg prompt throughput: 9.2 tokens/s, Avg generation "
        "throughput: 11.6 tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV "
        "cache usage: 0.1%, CPU KV cache usage: 0.0%."
    )
    path = tmp_path / "journal.log"
    path.write_text(
        "".join(
            f"Sep 22 23:46:4{i} {host} vllm[36199{i}]: {stats}\n"
            for i, host in enumerate(["node-b", "node-a", "node-b", "node-a"])
        )
    )
    # WHEN it is read
    trace = ingest_paths([path], IngestOptions(year=2025))
    # THEN the node is the alphabetically first of them, not whichever hash order gives
    assert trace.manifest.nodes == ["node-a"]


def test_compose_slurm_and_ray_prefixes() -> None:
    compose = _ingest("compose.log")
    assert compose.events["kind"].to_list() == ["engine_dead"]
    slurm = _ingest("slurm.log")
    assert _series(slurm, "requests_running") == [2.0, 3.0]
    assert slurm.manifest.sources[0].skipped[RANK_REPEAT].count == 1
    ray = _ingest("ray.log")
    config = ray.manifest.engine_config
    assert (config["kv_cache_tokens"], config["init_engine_seconds"]) == (120000, 12.5)
    assert ray.manifest.sources[0].notes[-1] == (
        "Ray's log de-duplication left out 5 similar line(s) ('[repeated Nx across cluster]'); "
        "their values are not in this log (capture with RAY_DEDUP_LOGS=0)"
    )


# --- rank repeats and distinct records -----------------------------------------------------------


def _lines(*lines: str) -> tuple[pl.DataFrame | None, pl.DataFrame | None, SourceDiagnostics]:
    diag = SourceDiagnostics("t", "vllm-log", "n")
    ctx = ParseContext(clock=ClockOptions(year=2025))
    result = PARSER.parse_lines(pl.DataFrame({"line": list(lines)}), ctx, diag)
    return result.events, result.requests, diag


def test_distinct_records_at_the_same_second_are_all_kept() -> None:
    warn = (
        "WARNING 01-01 00:00:03 scheduler.py:1560] Sequence group {id} is preempted by "
        "PreemptionMode.SWAP mode because there is not enough KV cache space. This can affect "
        "the end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to "
        "provide more KV cache memory. total_num_cumulative_preemption={n}"
    )
    events, requests, diag = _lines(warn.format(id="a", n=1), warn.format(id="b", n=51))
    assert events is not None
    assert requests is not None
    assert events["kind"].to_list() == ["preemption", "preemption"]
    assert requests["request_id"].to_list() == ["a", "b"]
    assert RANK_REPEAT not in diag.skipped


def test_the_same_record_from_two_ranks_counts_once() -> None:
    line = "INFO 01-01 00:00:03 [gpu_worker.py:232] Available KV cache memory: 2.30 GiB"
    _, _, diag = _lines(f"(Worker_TP0 pid=1) {line}", f"(Worker_TP1 pid=2) {line}")
    assert (diag.lines_recognised, diag.skipped[RANK_REPEAT].count) == (1, 1)


def test_vllms_own_wrapper_of_an_oom_is_the_same_failure_but_a_later_one_is_not() -> None:
    oom = (
        "(EngineCore_DP0 pid=5) ERROR 05-01 10:00:01 [core.py:1] torch.OutOfMemoryError: CUDA out "
        "of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which "
        "2.01 GiB is free. Including non-PyTorch memory, this process has 77.17 GiB memory in use. "
        "Of the allocated memory 70.10 GiB is allocated by PyTorch, and 5.55 GiB is reserved by "
        "PyTorch but unallocated."
    )
    wrapper = (
        "(EngineCore_DP0 pid=5) ERROR 05-01 10:00:01 [core.py:1] RuntimeError: CUDA out of memory "
        "occurred when warming up sampler with 256 dummy requests. Please try lowering "
        "`max_num_seqs` or `gpu_memory_utilization` when initializing the engine."
    )
    later = "(EngineCore_DP0 pid=5) ERROR 05-01 10:00:09 [core.py:1] RuntimeError: CUDA error: "
    later += "out of memory"
    events, _, _ = _lines(oom, wrapper, later)
    assert events is not None
    ooms = events.filter(pl.col("kind") == "oom")
    assert ooms.select("device", "requested_bytes").rows() == [(0, 4 * GiB), (None, None)]
    assert ooms["detail"][1] == "CUDA error: out of memory (no size stated)"


def test_token_lists_cut_by_max_log_len_give_no_count() -> None:
    args = "INFO 01-01 00:00:00 [utils.py:1] non-default args: {'model': 'm', 'max_log_len': 3}"
    received = (
        "INFO 01-01 00:00:01 [logger.py:1] Received request r1: prompt: 'abc', params: "
        "SamplingParams(n=1, max_tokens=9, min_tokens=0), prompt_token_ids: [1, 2, 3], "
        "lora_request: None."
    )
    _, requests, diag = _lines(args, received)
    assert requests is not None
    assert requests.select("prompt_tokens", "max_tokens").row(0) == (None, 9)
    assert any("cut by --max-log-len" in n for n in diag.notes)


def test_lines_redacted_by_the_collector_keep_their_token_counts() -> None:
    received = (
        "INFO 01-01 00:00:01 [logger.py:1] Received request r1: prompt: 'abc', params: "
        "SamplingParams(n=1, max_tokens=9, min_tokens=0), prompt_token_ids: [1, 2, 3, 4], "
        "lora_request: None."
    )
    output = (
        "INFO 01-01 00:00:02 [logger.py:1] Generated response r1: output: 'xy', "
        "output_token_ids: [7, 8], finish_reason: stop"
    )
    _, requests, _ = _lines(redact_line(received), redact_line(output))
    assert requests is not None
    assert "<4 token ids>" in redact_line(received)
    rows = requests.select("event", "prompt_tokens", "max_tokens", "output_tokens").rows()
    assert rows == [("arrived", 4, 9, None), ("finished", None, None, 2)]


def test_lines_the_collector_redacted_still_give_their_token_counts() -> None:
    # GIVEN request lines as the collector's log tail stores them: text and id lists replaced
    # by their sizes (vLLM 0.11 received/generated lines, a 0.12+ DEBUG details line)
    received = (
        "INFO 03-21 16:40:01 [logger.py:41] Received request cmpl-a-0: prompt: 'the model and "
        "the cache', params: SamplingParams(n=1, temperature=0.2, max_tokens=1024, min_tokens=0, "
        "prompt_logprobs=None), prompt_token_ids: [151643, 279, 1614, 323, 6500], prompt_embeds "
        "shape: None, lora_request: None."
    )
    generated = (
        "INFO 03-21 16:40:03 [logger.py:71] Generated response cmpl-a-0: output: 'a table of "
        "totals', output_token_ids: [64, 1965, 315], finish_reason: stop"
    )
    details = (
        "DEBUG 03-21 16:40:04 [logger.py:52] Request cmpl-b-0 details: prompt: None, "
        "prompt_token_ids: [1, 2, 3, 4, 5, 6, 7], prompt_embeds shape: None."
    )
    raw = (received, generated, details)
    redacted = [redact_line(line) for line in raw]
    assert all("[" not in line.split("ids: ", 1)[1][:2] for line in redacted)
    # WHEN the parser reads them
    _, requests, _ = _lines(*redacted)
    # THEN the counts are the lengths of the lists the collector removed
    assert requests is not None
    rows = requests.select("request_id", "event", "prompt_tokens", "output_tokens").rows()
    assert rows == [
        ("cmpl-a-0", "arrived", 5, None),
        ("cmpl-a-0", "finished", None, 3),
        ("cmpl-b-0", "arrived", 7, None),
    ]


# --- the file as a whole: gzip, sniffing, privacy, the CLI -------------------------------------


def test_a_gzipped_log_gives_the_same_trace(tmp_path: Path) -> None:
    plain = tmp_path / "server.log"
    shutil.copy(DATA / "v1_0.11_tp2_oom.log", plain)
    packed = tmp_path / "server.log.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    a = ingest_paths([plain], IngestOptions(year=2025))
    b = ingest_paths([packed], IngestOptions(year=2025))
    for table in ("samples", "requests", "events"):
        assert_frame_equal(a.table(table).drop("source"), b.table(table).drop("source"))
    assert a.manifest.engine_config == b.manifest.engine_config


@pytest.mark.parametrize("path", sorted(DATA.glob("*.log")), ids=lambda p: p.name)
def test_every_sample_file_is_sniffed_as_vllm(path: Path) -> None:
    source = InputFile(path, path.name)
    scores = {name: p.sniff(source.head(), path.name) for name, p in registry().items()}
    assert max(scores, key=lambda n: scores[n]) == "vllm-log"
    assert scores["vllm-log"] >= 0.7


def test_the_parser_is_registered_and_takes_tailed_lines_too() -> None:
    assert registry()["vllm-log"] is PARSER
    assert isinstance(PARSER, LineParser)


def test_other_text_is_not_sniffed_as_vllm() -> None:
    assert PARSER.sniff("[2025-02-27 04:46:39 TP0] Decode batch. #running-req: 1\n", "x.log") == 0
    assert PARSER.sniff("hello\nworld\n", "notes.txt") == 0


def test_prompt_and_output_text_never_reach_the_trace(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "trace"
    result = runner.invoke(
        cli, ["ingest", str(DATA / "v1_0.11_tp2_oom.log"), "--out", str(out), "--year", "2025"]
    )
    assert result.exit_code == 0, result.output
    stored = b"".join(p.read_bytes() for p in out.iterdir())
    for text in (b"Summarise this", b"Write a story", b"How can I help"):
        assert text not in stored


def test_cli_ingest_and_inspect_a_vllm_log(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "trace"
    result = runner.invoke(
        cli, ["ingest", str(DATA / "v0_0.6.6_tp2.log"), "--out", str(out), "--year", "2025"]
    )
    assert result.exit_code == 0, result.output
    # 16 samples: the OOM's worker (pid 507 in its prefix) holds its "this process" bytes
    assert result.output.startswith(f"wrote {out}: 16 samples, 5 request events, 5 events\n")
    result = runner.invoke(cli, ["inspect", str(DATA / "v1_0.20_stream.log"), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert (doc["parser"], doc["counts"]["requests"]) == ("vllm-log", 8)
    assert doc["manifest"]["engine"]["version_family"] == "v1-0.20"


def test_cli_forcing_vllm_on_a_binary_file_reads_nothing_and_says_so(tmp_path: Path) -> None:
    junk = tmp_path / "junk.bin"
    junk.write_bytes(bytes(range(256)) * 40)
    result = CliRunner().invoke(cli, ["inspect", str(junk), "--format", "vllm-log", "--json"])
    assert result.exit_code == 0, result.output
    source = json.loads(result.output)["manifest"]["sources"][0]
    assert source["lines_recognised"] == 0
    assert source["lines_skipped"] == source["lines_read"] > 0


# --- robustness ----------------------------------------------------------------------------------


def _check(result: ParseResult, diag: SourceDiagnostics) -> None:
    """Every line is counted once (glued records add to the count); every table conforms."""
    assert diag.lines_recognised >= 0
    assert diag.lines_recognised + diag.lines_skipped >= diag.lines_read
    for table in ("samples", "requests", "events"):
        frame = getattr(result, table)
        if frame is not None:
            conform(table, frame.with_columns(node=pl.lit("n"), source=pl.lit("s")))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.text(max_size=300), min_size=1, max_size=30))
# a lone traceback frame is read for an OOM's phase, not as a record: untimed, it is no record lost
@example(["in warmup"])
def test_parse_lines_never_raises_on_arbitrary_text(lines: list[str]) -> None:
    frame = pl.DataFrame({"line": [line.replace("\n", " ") for line in lines]})
    diag = SourceDiagnostics("t", "vllm-log", "n")
    _check(PARSER.parse_lines(frame, ParseContext(clock=ClockOptions(year=2025)), diag), diag)


_VLLMISH = st.sampled_from([
    "INFO 12-31 23:59:59 [x.py:1] ", "WARNING 01-01 00:00:00 y.py:2] ", "(Worker pid=1) ",
    "Avg prompt throughput: ", "Running: 1 reqs, ", "Received request ", "max_tokens=",
    "prompt_token_ids: [1, ", "]", "out of memory. Tried to allocate ", "GiB", "\x1b[0;0m", "\r",
    "Aborted request(s) ", ", ", "Generated response x (streaming delta): ",
    "2025-01-01T00:00:00Z ",
    "Available KV cache memory: ", "# GPU blocks: ", "Engine 000: ", "Waiting: 2 reqs, ",
])  # fmt: skip


@pytest.mark.slow
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(st.one_of(_VLLMISH, st.text(max_size=8)), max_size=12), max_size=25))
def test_parse_never_raises_on_vllm_like_fragments(pieces: list[list[str]]) -> None:
    lines = ["".join(p).replace("\n", " ") for p in pieces] or [""]
    diag = SourceDiagnostics("t", "vllm-log", "n")
    _check(PARSER.parse_lines(pl.DataFrame({"line": lines}), ParseContext(), diag), diag)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.binary(min_size=1, max_size=4000))
def test_parse_never_raises_on_arbitrary_bytes(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "bytes.log"
    path.write_bytes(data)
    diag = SourceDiagnostics("bytes.log", "vllm-log", "n")
    _check(PARSER.parse(InputFile(path, "bytes.log"), ParseContext(), diag), diag)


# GKE's Logs Explorer copy of vLLM 0.11.1's engine core (https://github.com/vllm-project/vllm/
# issues/29049): Cloud Logging's severity, UTC time and summary field before vLLM's prefixes;
# vLLM's own header is in the pod's local time (-8 h).
GKE = (
    "INFO 2025-11-19T20:16:36.{ns}Z [resource.labels.containerName: vllm] (EngineCore_DP0 pid=270) "
)
GKE_OOM = (
    "ERROR 11-19 12:16:36 [v1/engine/core.py:842] torch.OutOfMemoryError: CUDA out of memory. "
    "Tried to allocate 1.47 GiB. GPU 0 has a total capacity of 79.11 GiB of which 1.25 GiB is "
    "free. Including non-PyTorch memory, this process has 0 bytes memory in use. Of the allocated "
    "memory 70.03 GiB is allocated by PyTorch, and 22.16 MiB is reserved by PyTorch but "
    "unallocated."
)
GKE_TRACEBACK = (
    (
        'ERROR 11-19 12:16:36 [v1/engine/core.py:842] File "/usr/local/lib/python3.12/'
        'dist-packages/vllm/v1/worker/gpu_model_runner.py", line 3934, in _dummy_sampler_run'
    ),
    "ERROR 11-19 12:16:36 [v1/engine/core.py:842] sampler_output = self.sampler(",
)


def test_gke_cloud_logging_oom_takes_the_entrys_utc_time(tmp_path: Path) -> None:
    path = tmp_path / "gke.log"
    path.write_text(
        GKE.format(ns="096627277")
        + "ERROR 11-19 12:16:36 [v1/engine/core.py:842] ^^^^^\n"
        + GKE.format(ns="096638074")
        + GKE_OOM
        + "\n"
    )
    trace = ingest_paths([path], IngestOptions(year=2025))
    (oom,) = trace.events.filter(pl.col("kind") == "oom").iter_rows(named=True)
    # THEN the time is the entry's own (UTC), not vLLM's local one, and the figures are read
    assert oom["ts"] == datetime(2025, 11, 19, 20, 16, 36, 96638, tzinfo=UTC)
    assert oom["requested_bytes"] == parse_bytes("1.47 GiB")
    assert oom["total_bytes"] == parse_bytes("79.11 GiB")
    (source,) = trace.manifest.sources
    assert not any("unknown" in reason for reason in source.skipped)


def test_gke_cloud_logging_traceback_lines_are_read_after_the_prefix(tmp_path: Path) -> None:
    path = tmp_path / "gke.log"
    path.write_text(
        "".join(GKE.format(ns=f"09650{i}") + line + "\n" for i, line in enumerate(GKE_TRACEBACK))
    )
    trace = ingest_paths([path], IngestOptions(year=2025))
    (source,) = trace.manifest.sources
    # THEN vLLM's records are found behind the prefix, and its time told apart from the entry's
    (reason,) = source.skipped
    assert source.skipped[reason].example.startswith("ERROR 11-19 12:16:36 [v1/engine/core.py")
    assert any("-28,800 s" in note for note in source.notes)


# The same vLLM 0.10 stats line, printed in the pod's local time (UTC-8), behind each supervisor
# prefix that states a full time (journald's short-iso form as `journalctl -o short-iso` prints
# it; kubectl logs --timestamps).
_STATS = (
    "INFO 11-19 12:16:{s} [loggers.py:123] Engine 000: Avg prompt throughput: 5.0 tokens/s, "
    "Avg generation throughput: 7.0 tokens/s, Running: 2 reqs, Waiting: 0 reqs, GPU KV cache "
    "usage: 3.1%, Prefix cache hit rate: 0.0%"
)


@pytest.mark.parametrize(
    ("prefix", "named"),
    [
        (GKE.format(ns="096627277").replace("36.", "{s}."), "Cloud Logging timestamps"),
        ("2025-11-19T20:16:{s}+0000 gke-node-7 vllm[270]: ", "journald timestamps"),
        ("2025-11-19T20:16:{s}.500000000Z ", "kubectl/docker timestamps"),
    ],
    ids=["cloud logging", "journald", "kubectl"],
)
def test_the_time_mismatch_note_names_the_prefix_the_times_came_from(
    tmp_path: Path, prefix: str, named: str
) -> None:
    # GIVEN a log whose own times run 8 h behind the full times of its outer prefix
    path = tmp_path / "vllm.log"
    path.write_text("".join(prefix.format(s=s) + _STATS.format(s=s) + "\n" for s in (36, 46)))
    # WHEN ingested
    (source,) = ingest_paths([path], IngestOptions()).manifest.sources
    # THEN the note and the clock name where the full times came from
    (note,) = [n for n in source.notes if "-28,800 s" in n]
    assert f"the printed time differs from the {named} by more than" in note
    assert source.clock["tz_source"] == named
    assert (named == "kubectl/docker timestamps") == ("kubectl/docker" in note)
