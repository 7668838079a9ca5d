"""Every sample in SGLang's pattern tables goes through the parser and gives what it stands for."""

from __future__ import annotations

from collections.abc import Callable

import polars as pl
import pytest

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.ingest.parser_api import ParseContext, ParseResult
from oomtrace.ingest.sglang import line_patterns as pat
from oomtrace.ingest.sglang.log_parser import PARSER
from oomtrace.units import GiB

KINDS = {k.name: k for k in pat.KINDS}
# What a kind that continues or precedes a failure is read with.
_TORCH_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 79.11 GiB of which 1.50 GiB is free."
)
CONTEXT: dict[str, tuple[list[str], list[str]]] = {
    "kv_pool_figures": ([KINDS["kv_pool_oom"].sample], []),
    "oom_phase": ([KINDS["kv_pool_oom"].sample], [_TORCH_OOM]),
    # a traceback's last line: it takes the time of the line before it
    "no_kv_memory": ([KINDS["load_weight_end"].sample], []),
}


def _parse(*lines: str) -> tuple[ParseResult, SourceDiagnostics]:
    diag = SourceDiagnostics("sample", "sglang-log", "n")
    frame = pl.DataFrame({"line": list(lines)}, schema={"line": pl.String})
    return PARSER.parse_lines(frame, ParseContext(), diag), diag


def _metrics(result: ParseResult) -> dict[str, float]:
    assert result.samples is not None
    return dict(result.samples.select("metric", "value").iter_rows())


def _event_kinds(result: ParseResult) -> list[str]:
    return [] if result.events is None else result.events["kind"].to_list()


@pytest.mark.parametrize("family", pat.FAMILIES, ids=lambda f: f.name)
def test_each_family_sample_names_its_family(family: pat.Family) -> None:
    # 0.1.x printed no time at all: its lines are read where nothing has a time (untimed), and
    # its sample is given the prefix of a later release here to be read on its own
    prefix = "" if family.sample.startswith("[") else "[2024-04-25 10:00:00] "
    result, diag = _parse(prefix + family.sample)
    assert result.engine["version_family"] == family.name
    assert diag.lines_recognised == 1


CHECKS: dict[str, Callable[[ParseResult], bool]] = {
    "batch": lambda r: _metrics(r)["kv_usage_ratio"] == 0.08,
    "retract": lambda r: (
        _event_kinds(r) == ["preemption"] and _metrics(r) == {"preemptions_in_interval": 3}
    ),
    "kv_pool_oom": lambda r: _event_kinds(r) == ["oom"],
    # read with the failure it stands before: its phase joins that failure's event
    "oom_phase": lambda r: r.events is not None and "graph_capture" in r.events["phase"].to_list(),
    # read with the failure it follows: its figures join that failure's event
    "kv_pool_figures": lambda r: (
        r.events is not None
        and r.events["detail"].to_list()
        == ["SGLang could not allocate KV cache slots (Prefill out of memory): 148 tokens asked"]
    ),
    "no_kv_memory": lambda r: _event_kinds(r) == ["startup_no_kv_memory"],
    "engine_dead": lambda r: _event_kinds(r) == ["engine_dead"],
    "server_args": lambda r: (
        _event_kinds(r) == ["engine_start"]
        and r.engine_config
        == {
            "block_size": 1,
            "tensor_parallel_size": 2,
            "data_parallel_size": 1,
            "mem_fraction_static": 0.88,
        }
        and r.model == {"name": "Qwen/Qwen2.5-7B-Instruct"}
    ),
    "load_weight_end": lambda r: r.engine_config == {"model_weights_bytes": round(1.52 * GiB)},
    "kv_cache_allocated": lambda r: (
        r.engine_config
        == {"kv_cache_tokens": 473854, "available_kv_cache_bytes": 2 * round(2.71 * GiB)}
    ),
    "graph_end": lambda r: (
        r.engine_config
        == {
            "cuda_graph_bytes": round(0.03 * GiB),
            "free_memory_after_startup_bytes": round(2.39 * GiB),
        }
    ),
    "memory_summary": lambda r: (
        r.engine_config
        == {
            "kv_cache_tokens": 473854,
            "max_num_seqs": 3730,
            "max_model_len": 40960,
            "chunked_prefill_size": 2048,
            "max_prefill_tokens": 16384,
            "free_memory_after_startup_bytes": round(2.39 * GiB),
        }
    ),
    "receive": lambda r: (
        r.requests is not None
        and r.requests.select("request_id", "event", "prompt_tokens", "max_tokens").rows()
        == [("ced00776", "arrived", 3, 256)]
    ),
    "finish": lambda r: (
        r.requests is not None
        and r.requests.select("request_id", "event", "prompt_tokens", "output_tokens").rows()
        == [("ced00776", "finished", 3, 256)]
    ),
}


@pytest.mark.parametrize("kind", pat.KINDS, ids=lambda k: k.name)
def test_each_message_sample_gives_its_rows(kind: pat.Kind) -> None:
    # a line read only with a failure is read with one (after a line that gives the time)
    before, after = CONTEXT.get(kind.name, ([], []))
    result, diag = _parse(*before, kind.sample, *after)
    assert CHECKS[kind.name](result)
    assert diag.lines_recognised == 1 + len(before) + len(after)
    assert diag.lines_skipped == 0


FIELD_METRIC = {
    "usage": "kv_usage_ratio",
    "full_usage": "kv_usage_ratio",
    "swa_usage": "kv_usage_ratio",
    "tokens": "kv_tokens_used",
    "full_tokens": "kv_tokens_used",
    "gpu_usage": "kv_usage_ratio",
    "gpu_tokens": "kv_tokens_used",
    "running_v01": "requests_running",
    "queued_v01": "requests_waiting",
}


@pytest.mark.parametrize("field", pat.FIELDS, ids=lambda f: f.name)
def test_each_batch_field_sample_is_read(field: pat.Field) -> None:
    line = "[2025-01-01 00:00:00] Decode batch, " + field.sample.removeprefix(", ")
    if field.sample.startswith(", "):
        line = "[2025-01-01 00:00:00] Decode batch, #running-req: 7" + field.sample
    result, _ = _parse(line)
    metric = field.metric or FIELD_METRIC[field.name]
    assert _metrics(result)[metric] == pytest.approx(field.value)


def test_every_kind_has_a_check() -> None:
    assert set(CHECKS) == {k.name for k in pat.KINDS}


@pytest.mark.parametrize("field", pat.FIELDS, ids=lambda f: f.name)
def test_each_field_key_is_literal_text_of_its_sample(field: pat.Field) -> None:
    assert field.key in field.sample
    assert "\\" not in field.key


@pytest.mark.parametrize("kind", [k for k in pat.KINDS if k.starts], ids=lambda k: k.name)
def test_each_kind_sample_starts_with_one_of_its_literal_first_words(kind: pat.Kind) -> None:
    message = kind.sample.split("] ", 1)[1]
    assert message.startswith(kind.starts)
