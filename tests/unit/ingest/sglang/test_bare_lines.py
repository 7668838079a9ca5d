"""SGLang's messages pasted without its ``[date time]`` prefix (the way issue threads quote them):
recognised as SGLang, read, and kept in file order without a made-up time."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from oomtrace.ingest import IngestOptions, ingest_paths, sniff
from oomtrace.ingest.text.input_file import InputFile
from oomtrace.units import GiB


def _excerpt(tmp_path: Path, name: str, text: str) -> Path:
    """The excerpt written to a file, after checking that it is taken for SGLang's."""
    path = tmp_path / name
    path.write_text(text)
    parser = sniff(InputFile(path, name), explicit=True).parser
    assert parser is not None
    assert parser.name == "sglang-log"
    return path


def test_a_bare_decode_line_in_an_issue_form_gives_its_counters_without_a_time(
    tmp_path: Path,
) -> None:
    # https://github.com/sgl-project/sglang/issues/938 (the batch line quoted in the issue form)
    path = _excerpt(
        tmp_path,
        "issue.txt",
        "### Describe the bug\n\n"
        "Decode batch. #running-req: 1010, #token: 55006, token usage: 0.93, "
        "gen throughput (token/s): 1397.13, #queue-req: 12279\n"
        "why is throughput so low?\n\n### Reproduction\n\n--schedule-conservativeness 0.3\n",
    )
    trace = ingest_paths([path], IngestOptions())
    got = dict(trace.samples.select("metric", "value").iter_rows())
    assert got["requests_running"] == 1010
    assert got["requests_waiting"] == 12279
    assert got["kv_tokens_used"] == 55006
    assert got["kv_usage_ratio"] == 0.93
    assert trace.samples["ts"].is_null().all()
    assert set(trace.samples["clock"].cast(pl.String)) == {"untimed"}
    assert trace.manifest.sources[0].clock["status"] == "untimed"


def test_a_fenced_kv_allocated_line_gives_the_pool_in_gib(tmp_path: Path) -> None:
    # https://github.com/vllm-project/vllm/issues/21348 (SGLang's line quoted beside vLLM's);
    # SGLang's "GB" is 2**30 bytes
    path = _excerpt(
        tmp_path,
        "compare.md",
        "For SGLang, I saw this:\n```\n"
        "KV Cache is allocated. #tokens: 367404, K size: 8.23 GB, V size: 8.23 GB\n```\n",
    )
    config = ingest_paths([path], IngestOptions()).manifest.engine_config
    assert config["kv_cache_tokens"] == 367404
    assert config["available_kv_cache_bytes"] == 2 * round(8.23 * GiB)


def test_a_scheduler_exception_with_its_rank_tag_only_is_an_untimed_death(
    tmp_path: Path,
) -> None:
    # https://github.com/sgl-project/sglang/issues/26265 (time cut off, rank tag kept)
    path = _excerpt(
        tmp_path,
        "crash.txt",
        "```\n[TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File ".../sglang/srt/managers/scheduler.py", line 4546, in run_scheduler_process\n'
        "    scheduler.run_event_loop()\n"
        '  File ".../sglang/srt/mem_cache/common.py", line 412, in alloc_paged_token_slots_extend\n'
        "    raise RuntimeError(error_m\n```\n",
    )
    trace = ingest_paths([path], IngestOptions())
    dead = trace.events.filter(pl.col("kind") == "engine_dead")
    assert dead.height == 1
    assert dead["detail"][0] == "SGLang scheduler hit an exception"
    assert dead["ts"][0] is None


def test_a_kv_pool_oom_in_inline_code_is_an_oom(tmp_path: Path) -> None:
    # https://github.com/sgl-project/sglang/issues/4602 (the message in backticks, page size 64)
    path = _excerpt(
        tmp_path,
        "page-size.md",
        "The server crashes when --page-size is not 1:\n\n"
        "`RuntimeError: Decode out of memory. Try to lower your batch size.\n"
        "Try to allocate 148 tokens.\nAvaliable tokens: 2048\n"
        "self.token_to_kv_pool_allocator.available_size()=2048\n"
        "self.tree_cache.evictable_size()=0`\n",
    )
    trace = ingest_paths([path], IngestOptions())
    oom = trace.events.filter(pl.col("kind") == "oom")
    assert oom.height == 1
    assert "Decode out of memory" in oom["detail"][0]


def test_lines_before_the_first_time_take_it(tmp_path: Path) -> None:
    path = tmp_path / "late.log"
    path.write_text(
        "Decode batch. #running-req: 3, #token: 900, token usage: 0.10, #queue-req: 0\n"
        "[2025-02-27 04:46:39 TP0] Decode batch. #running-req: 8, #token: 62531, "
        "token usage: 0.12, gen throughput (token/s): 186.64, #queue-req: 0\n"
    )
    trace = ingest_paths([path], IngestOptions())
    running = trace.samples.filter(pl.col("metric") == "requests_running").sort("value")
    assert running["value"].to_list() == [3, 8]
    assert running["ts"].n_unique() == 1
    assert running["ts"][0] is not None


def test_prose_that_names_sglang_messages_is_not_claimed(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("We looked at the Decode batch lines and the KV Cache is allocated line.\n")
    sniffed = sniff(InputFile(path, path.name), explicit=True)
    assert sniffed.parser is None or sniffed.parser.name != "sglang-log"


def test_retract_decodes_assertion_is_the_decodes_kv_pool_oom(tmp_path: Path) -> None:
    # https://github.com/sgl-project/sglang/pull/14948 (the one request left cannot grow)
    path = _excerpt(
        tmp_path,
        "assert.txt",
        "AssertionError: No space left for only one request, "
        "self.token_to_kv_pool_allocator.available_size()=0\n"
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/schedule_batch.py", line 1627, '
        "in retract_decode\n",
    )
    trace = ingest_paths([path], IngestOptions())
    assert trace.manifest.engine.get("name") == "sglang"
    (detail,) = trace.events.filter(pl.col("kind") == "oom")["detail"].to_list()
    assert detail == "SGLang could not allocate KV cache slots (Decode out of memory): 0 available"
