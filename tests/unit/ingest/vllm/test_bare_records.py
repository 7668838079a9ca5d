"""vLLM records pasted without their logger prefix (an issue, a wrapper's error message, a
Markdown code block) are recognised as a vLLM log and read: their figures into the engine
configuration, the refusals and preemptions as events that keep their order but get no time
(nothing in the file places them; the clock says ``untimed``).

Each file in ``tests/data/vllm/bare_*`` is a faithful rewrite of a real report (the URL is beside
each case); the facts asserted are the ones a person reads off it.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.ingest import IngestOptions, ingest_paths
from oomtrace.ingest.alignment.anchoring import ORDER
from oomtrace.ingest.parser_api import ParseContext
from oomtrace.ingest.sniffing import sniff
from oomtrace.ingest.text.input_file import InputFile
from oomtrace.ingest.vllm.log_parser import PARSER, REJOINED
from oomtrace.trace import Trace
from oomtrace.units import parse_bytes

DATA = Path(__file__).resolve().parents[3] / "data" / "vllm"


def _ingest(name: str) -> Trace:
    return ingest_paths([DATA / name], IngestOptions())


@pytest.mark.parametrize(
    "name",
    [
        "bare_kv_insufficient_v0.md",
        "bare_startups_v0.6.md",
        "bare_preemption_v0.txt",
        "bare_kv_needed_xinference.txt",
        "bare_kv_sizes_v1.txt",
        "bare_free_memory_info.md",
        "bare_kv_needed_folded_120.txt",
        "bare_preemption_bold.md",
    ],
)
def test_records_without_their_prefix_are_sniffed_as_a_vllm_log(name: str) -> None:
    found = sniff(InputFile(DATA / name, name), explicit=True)
    assert found.parser is not None
    assert found.parser.name == "vllm-log"


def test_a_v0_refusal_pasted_alone_is_an_untimed_event_with_the_length_and_the_tokens() -> None:
    # vLLM 0.2.7 in Colab: https://github.com/basalam/product-catalog-generator/issues/10
    trace = _ingest("bare_kv_insufficient_v0.md")
    config = trace.manifest.engine_config
    assert (config["max_model_len"], config["kv_cache_tokens"]) == (4096, 3664)
    (refusal,) = trace.events.filter(pl.col("kind") == "startup_kv_insufficient").to_dicts()
    assert refusal["ts"] is None
    assert refusal["clock"] == "untimed"
    assert refusal["detail"] == "max seq len 4096 is above the 3664 tokens the KV cache can hold"
    assert any("carries a time" in note for note in trace.manifest.sources[0].notes)


def test_three_start_ups_pasted_bare_give_the_refused_ones_figures() -> None:
    # https://github.com/vllm-project/vllm/issues/10517 (RTX 3090, Llama 3.1 8B): the first
    # start-up's blocks line lost its "# ", so the refused start-up's blocks are the first read
    trace = _ingest("bare_startups_v0.6.md")
    config = trace.manifest.engine_config
    assert config["model_weights_bytes"] == parse_bytes("14.9888 GiB")
    assert config["device_total_bytes"] == parse_bytes("23.58 GiB")
    assert config["gpu_memory_utilization"] == 0.90
    assert config["num_gpu_blocks"] == 1478
    (refusal,) = trace.events.filter(pl.col("kind") == "startup_kv_insufficient").to_dicts()
    assert refusal["detail"] == "max seq len 29000 is above the 23648 tokens the KV cache can hold"


def test_an_indented_preemption_warning_is_a_preemption_and_the_cumulative_count() -> None:
    # https://github.com/GAIR-NLP/LIMO/issues/29: the warning pasted with a leading space
    trace = _ingest("bare_preemption_v0.txt")
    (preemption,) = trace.events.filter(pl.col("kind") == "preemption").to_dicts()
    assert preemption["detail"].startswith("request 221 preempted (recompute)")
    totals = trace.samples.filter(pl.col("metric") == "preemptions_total")
    assert totals.get_column("value").to_list() == [101.0]
    assert totals.get_column("clock").to_list() == ["untimed"]
    # the preempted request too has no time (not the stand-in instant of its line, 1970)
    (request,) = trace.requests.filter(pl.col("event") == "preempted").to_dicts()
    assert (request["ts"], request["clock"]) == (None, "untimed")


def test_a_preemption_warning_pasted_in_bold_is_read_without_its_markup() -> None:
    # https://github.com/vllm-project/vllm/issues/8219 (0.6.0 under load): the warning the
    # engine died after, pasted in Markdown bold ("**Sequence group ... preemption=1**")
    trace = _ingest("bare_preemption_bold.md")
    (preemption,) = trace.events.filter(pl.col("kind") == "preemption").to_dicts()
    assert preemption["detail"].startswith(
        "request chat-be1eb78b9aa6437ea54a4490617b7286 preempted (recompute)"
    )
    totals = trace.samples.filter(pl.col("metric") == "preemptions_total")
    assert totals.get_column("value").to_list() == [1.0]


def test_the_engine_cores_refusal_printed_by_a_wrapper_gives_its_sizes() -> None:
    # Xinference loading Qwen3-VL with vLLM V1: https://github.com/xorbitsai/inference/issues/4926
    trace = _ingest("bare_kv_needed_xinference.txt")
    (refusal,) = trace.events.filter(pl.col("kind") == "startup_kv_insufficient").to_dicts()
    assert refusal["requested_bytes"] == parse_bytes("36.0 GiB")
    assert refusal["free_bytes"] == parse_bytes("6.94 GiB")
    assert trace.manifest.engine_config["max_model_len"] == 262144


def test_kv_figures_pasted_bare_and_a_header_cut_to_its_file_and_line() -> None:
    # https://github.com/vllm-project/vllm/issues/25350: two start-ups with fp8 KV cache
    trace = _ingest("bare_kv_sizes_v1.txt")
    config = trace.manifest.engine_config
    assert config["available_kv_cache_bytes"] == parse_bytes("10.55 GiB")
    assert config["kv_cache_tokens"] == 230528
    # "[kv_cache_utils.py:868] " is what is left of its header
    assert (config["max_concurrency_tokens"], config["max_concurrency"]) == (100000, 2.31)
    (refusal,) = trace.events.filter(pl.col("kind") == "startup_kv_insufficient").to_dicts()
    assert (refusal["requested_bytes"], refusal["free_bytes"]) == (
        parse_bytes("10.12 GiB"),
        parse_bytes("5.59 GiB"),
    )


def test_the_free_memory_info_pair_of_a_start_up_that_passed() -> None:
    # https://github.com/MiaAI-Lab/GLM-5.3-Flash-EXL3-2x-DGX-Sparks/issues/47 (GB10)
    trace = _ingest("bare_free_memory_info.md")
    config = trace.manifest.engine_config
    assert config["initial_free_bytes"] == parse_bytes("110.37 GiB")
    assert config["device_total_bytes"] == parse_bytes("121.69 GiB")
    assert config["gpu_memory_utilization"] == 0.87
    assert config["requested_memory_bytes"] == parse_bytes("105.87 GiB")
    assert trace.events.height == 0


def test_untimed_rows_keep_the_order_of_their_lines() -> None:
    path = DATA / "bare_startups_v0.6.md"
    diag = SourceDiagnostics(path.name, "vllm-log", "n")
    result = PARSER.parse(InputFile(path, path.name), ParseContext(), diag)
    assert result.events is not None
    # the refusal is the file's 17th line
    assert result.events.get_column(ORDER).to_list() == [17]


def test_stats_lines_folded_at_a_fixed_width_are_read_whole() -> None:
    # docker logs folded at 159 columns, stats broken in "throughpu" / "t: 569.6":
    # https://github.com/vllm-project/vllm/issues/27073
    trace = ingest_paths(
        [DATA / "docker_folded_v0.11.log"], IngestOptions(tz="America/Los_Angeles")
    )
    samples = trace.samples.sort("ts")

    def series(metric: str) -> list[float]:
        return samples.filter(pl.col("metric") == metric).get_column("value").to_list()

    assert series("requests_running") == [27.0, 26.0, 26.0]
    assert series("requests_waiting") == [62.0, 63.0, 63.0]
    assert series("kv_usage_ratio") == pytest.approx([0.997, 0.979, 0.986])
    assert series("generation_throughput_tokens_per_s") == [569.6, 605.4, 543.4]
    source = trace.manifest.sources[0]
    assert source.skipped[REJOINED].count == 3
    assert source.lines_recognised + source.lines_skipped == source.lines_read == 10


def test_a_traceback_folded_by_the_terminal_is_joined_and_recognised() -> None:
    # A terminal 120 columns wide folded the engine core's traceback mid-word, the pieces without
    # the "(EngineCore pid=316)" prefix, the refusal's figures across the fold ("KV cach" / "e is
    # needed"): https://github.com/SergiioB/intel-arc-pro-b70-inference-cookbook/issues/4
    trace = _ingest("bare_kv_needed_folded_120.txt")
    events = trace.events.filter(pl.col("kind") == "startup_kv_insufficient")
    assert events.height == 1
    assert events.item(0, "requested_bytes") == parse_bytes("4.26 GiB")
    assert events.item(0, "free_bytes") == parse_bytes("4.25 GiB")
    source_facts = trace.manifest.sources[0]
    assert source_facts.skipped[REJOINED].count == 3


def test_a_bare_oom_above_timed_lines_of_kinds_not_used_is_kept_untimed(tmp_path: Path) -> None:
    # GIVEN an issue's paste: the worker's OOM without its logger prefix, then the only timed
    # lines, the executor's worker-death lines (a kind this reader does not keep). Composite of
    # https://github.com/rhymes-ai/Aria/issues/24 (the OOM, its prefix lost in the paste) and
    # https://github.com/vllm-project/vllm/issues/15295 (the death lines)
    path = tmp_path / "paste.log"
    path.write_text(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.88 GiB. GPU 3 has a "
        "total capacity of 21.96 GiB of which 1.29 GiB is free. Including non-PyTorch memory, "
        "this process has 0 bytes memory in use. Of the allocated memory 19.02 GiB is allocated "
        "by PyTorch, and 1.32 GiB is reserved by PyTorch but unallocated.\n"
        "ERROR 03-21 10:02:11 multiproc_worker_utils.py:120] Worker VllmWorkerProcess pid 2421 "
        "died, exit code: -15\n"
        "INFO 03-21 10:02:11 multiproc_worker_utils.py:123] Killing local vLLM worker processes\n"
    )
    # WHEN it is ingested
    trace = ingest_paths([path], IngestOptions(format="vllm-log"))
    # THEN the OOM is kept, with its sizes, in the file's order and without a time (no record it
    # keeps has a time to lend), and the note says why; before, it was dropped as unplaceable
    (oom,) = trace.events.filter(pl.col("kind") == "oom").to_dicts()
    assert oom["clock"] == "untimed"
    assert oom["requested_bytes"] == parse_bytes("1.88 GiB")
    source = trace.manifest.sources[0]
    assert any("its timed lines are of kinds not used" in note for note in source.notes)
    assert "no timestamp could be placed" not in source.skipped
