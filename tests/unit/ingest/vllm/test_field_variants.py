"""Shapes of vLLM's text met in the field beyond the periodic lines: the engine core's dump of
the scheduler at its death, and 0.2.x's engine line without a version. Each file in
``tests/data/vllm`` is a faithful rewrite of the report named beside its test."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest

from oomtrace.ingest import IngestOptions, ingest_paths
from oomtrace.ingest.vllm.log_parser import NOT_USED

DATA = Path(__file__).resolve().parents[3] / "data" / "vllm"


def test_the_scheduler_dump_at_an_engine_cores_death_is_a_stats_sample() -> None:
    # DeepSeek V3.2 on vLLM 0.11.1rc2: https://github.com/vllm-project/vllm/issues/43222
    trace = ingest_paths([DATA / "v1_scheduler_dump.log"], IngestOptions(year=2026))
    values = dict(trace.samples.select("metric", "value").iter_rows())
    assert values["requests_running"] == 809
    assert values["requests_waiting"] == 0
    assert values["kv_usage_ratio"] == pytest.approx(0.47516605700935377)
    assert trace.samples.get_column("ts").unique().len() == 1


def test_the_versionless_engine_line_of_0_2_gives_the_length_and_dtype() -> None:
    # vLLM 0.2.7 loading a LLaMA-2 fine-tune: https://github.com/vllm-project/vllm/issues/2418
    trace = ingest_paths([DATA / "v0_0.2.7_startup.log"], IngestOptions(year=2024))
    config = trace.manifest.engine_config
    assert (config["max_model_len"], config["dtype"], config["num_gpu_blocks"]) == (
        4096,
        "float16",
        229,
    )
    assert config["model"] == "/home/user/models/alpaca-2"
    assert trace.manifest.engine is not None
    assert trace.manifest.engine["version_family"] == "v0"
    assert trace.events.filter(pl.col("kind") == "oom").height == 0


def test_the_memory_fraction_refusal_behind_a_worker_prefix_keeps_its_sizes() -> None:
    # PyTorch's refusal when a memory fraction is set, printed on six lines, here by a V0 worker
    # (the text as ComfyUI's log shows it, tests/data/torch/fraction-refusal-lines.log)
    trace = ingest_paths([DATA / "v0_fraction_refusal.log"], IngestOptions(year=2024))
    (oom,) = trace.events.filter(pl.col("kind") == "oom").to_dicts()
    assert oom["requested_bytes"] == 320 * 2**20
    assert oom["total_bytes"] == round(23.69 * 2**30)
    assert oom["device"] == 0
    source = trace.manifest.sources[0]
    assert source.lines_recognised == 8


def test_an_oom_names_the_engine_core_that_printed_it_by_its_pid() -> None:
    # "this process" of PyTorch's message is the one whose prefix says pid=494
    trace = ingest_paths([DATA / "v1_oom_engine_core_pid.log"], IngestOptions(year=2026))
    (oom,) = trace.events.filter(pl.col("kind") == "oom").to_dicts()
    assert oom["pid"] == 494
    held = trace.samples.filter(pl.col("metric") == "process_used_bytes")
    assert sorted(held.get_column("pid").to_list()) == [494, 9981]


def test_the_early_v1_clients_fatal_signal_line_is_the_engines_death(tmp_path: Path) -> None:
    # V1 on an 8 GiB GPU: https://github.com/vllm-project/vllm/issues/12529 (the core's OOM,
    # then the client's CRITICAL record when the core signals it)
    path = tmp_path / "v1.log"
    path.write_text(
        "ERROR 03-13 09:00:43 [core.py:330] torch.OutOfMemoryError: CUDA out of memory. Tried to "
        "allocate 1.16 GiB. GPU 0 has a total capacity of 7.75 GiB of which 1.17 GiB is free. "
        "Including non-PyTorch memory, this process has 5.02 GiB memory in use. Of the allocated "
        "memory 4.81 GiB is allocated by PyTorch, and 18.97 MiB is reserved by PyTorch but "
        "unallocated.\n"
        "ERROR 03-13 09:00:43 [core.py:330] \n"
        "CRITICAL 03-13 09:00:43 [core_client.py:260] Got fatal signal from worker processes, "
        "shutting down. See stack trace above for root cause issue.\n"
    )
    trace = ingest_paths([path], IngestOptions(year=2025))
    assert sorted(trace.events["kind"].to_list()) == ["engine_dead", "oom"]


def test_an_oom_message_glued_in_front_of_two_records_is_read_as_a_record(tmp_path: Path) -> None:
    # A ROCm vLLM fork on two 16 GiB gfx906 cards: https://github.com/nlzy/vllm-gfx906/issues/14
    # (the paste lost the newlines: HIP's message, then two records of the traceback, one line)
    path = tmp_path / "gfx906.log"
    path.write_text(
        "vllm serve /model/Qwen3-32B-autoround-4bit-gptq --tensor-parallel-size 2\n"
        "\n"
        "HIP out of memory. Tried to allocate 64.00 MiB. GPU 0 has a total capacity of 15.98 GiB "
        "of which 22.00 MiB is free. Of the allocated memory 15.69 GiB is allocated by PyTorch, "
        "and 92.65 MiB is reserved by PyTorch but unallocated. If reserved but unallocated "
        "memory is large try setting PYTORCH_HIP_ALLOC_CONF=expandable_segments:True to avoid "
        "fragmentation.  See documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)        "
        "ERROR 07-04 14:53:23 [engine.py:458] Traceback (most recent call last):        "
        'ERROR 07-04 14:53:23 [engine.py:458]   File "/opt/torchenv/lib/python3.12/site-packages'
        '/vllm/engine/multiprocessing/engine.py", line 446,\n'
    )
    trace = ingest_paths([path], IngestOptions(year=2025))
    (oom,) = trace.events.filter(pl.col("kind") == "oom").to_dicts()
    assert oom["requested_bytes"] == 64 * 2**20
    assert oom["total_bytes"] == round(15.98 * 2**30)
    assert oom["free_bytes"] == 22 * 2**20
    assert oom["allocated_bytes"] == round(15.69 * 2**30)
    assert oom["reserved_unallocated_bytes"] == round(92.65 * 2**20)
    # the message takes the time of the record it was glued to
    assert oom["ts"] == datetime(2025, 7, 4, 14, 53, 23, tzinfo=UTC)
    source = trace.manifest.sources[0]
    assert "2 record(s) were glued onto the end of another line" in " ".join(source.notes)
    # the records after it are still split and counted, each from its own header on
    assert source.skipped[NOT_USED].count == 2
    assert source.skipped[NOT_USED].example.startswith("ERROR 07-04 14:53:23 [engine.py:458] ")


def test_a_prefix_of_no_known_form_before_a_record_is_no_record(tmp_path: Path) -> None:
    # A launcher's own words before vLLM's header hold no record: nothing is read from them
    path = tmp_path / "launcher.log"
    path.write_text(
        "worker-3 stdout | INFO 07-04 14:53:23 [gpu_worker.py:276] Available KV cache memory: "
        "3.17 GiB\n"
    )
    trace = ingest_paths([path], IngestOptions(year=2025))
    assert trace.events.height == 0
    source = trace.manifest.sources[0]
    assert (source.lines_recognised, dict(source.skipped)) == (1, {})
