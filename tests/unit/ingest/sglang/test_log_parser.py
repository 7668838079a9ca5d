"""SGLang logs of every version family become samples, events, requests and engine config."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from oomtrace.cli import cli
from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.ingest import IngestOptions, ingest_paths, sniff
from oomtrace.ingest.parser_api import ParseContext
from oomtrace.ingest.parser_registry import registry
from oomtrace.ingest.sglang.log_parser import PARSER
from oomtrace.ingest.text.input_file import InputFile
from oomtrace.trace import Trace
from oomtrace.units import GiB

DATA = Path(__file__).resolve().parents[3] / "data" / "sglang"


def _ingest(tmp_path: Path, name: str, *, gz: bool = False, tz: str | None = None) -> Trace:
    target = tmp_path / (name + (".gz" if gz else ""))
    if gz:
        target.write_bytes(gzip.compress((DATA / name).read_bytes()))
    else:
        shutil.copy(DATA / name, target)
    return ingest_paths([target], IngestOptions(tz=tz))


def _utc(*parts: int) -> datetime:
    return datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


def _metric(trace: Trace, metric: str) -> pl.DataFrame:
    return trace.samples.filter(pl.col("metric") == metric).select("ts", "value").sort("ts")


def _series(*rows: tuple[datetime, float]) -> pl.DataFrame:
    return pl.DataFrame(
        {"ts": [r[0] for r in rows], "value": [float(r[1]) for r in rows]},
        schema={"ts": pl.Datetime("ns", "UTC"), "value": pl.Float64},
    )


def test_v04_tp2_batch_lines_become_kv_and_queue_samples_from_tp0_only(tmp_path: Path) -> None:
    trace = _ingest(tmp_path, "v0.4-tp2.log")
    assert_frame_equal(
        _metric(trace, "kv_usage_ratio"),
        _series(
            (_utc(2025, 3, 14, 2, 16, 10), 0.0),
            (_utc(2025, 3, 14, 2, 16, 12), 0.49),
            (_utc(2025, 3, 14, 2, 16, 14), 0.98),
            (_utc(2025, 3, 14, 2, 16, 16), 1.0),
        ),
    )
    assert _metric(trace, "kv_tokens_used")["value"].to_list() == [180776, 360012, 366990]
    assert _metric(trace, "requests_running")["value"].to_list() == [0, 2, 409, 405]
    assert _metric(trace, "requests_waiting")["value"].to_list() == [0, 0, 35, 39]
    assert trace.manifest.engine == {"name": "sglang", "version_family": "0.3-0.4"}


def test_v04_retraction_printed_by_two_ranks_counts_once(tmp_path: Path) -> None:
    trace = _ingest(tmp_path, "v0.4-tp2.log")
    assert_frame_equal(
        _metric(trace, "preemptions_in_interval"), _series((_utc(2025, 3, 14, 2, 16, 15), 4))
    )
    preemptions = trace.events.filter(pl.col("kind") == "preemption")
    assert preemptions["detail"].to_list() == [
        "SGLang retracted 4 request(s): KV cache pool full on TP0"
    ]


def test_v04_kv_pool_oom_torch_oom_and_death_become_events(tmp_path: Path) -> None:
    trace = _ingest(tmp_path, "v0.4-tp2.log")
    events = trace.events.select("ts", "kind", "device", "requested_bytes", "detail")
    ooms = events.filter(pl.col("kind") == "oom").sort("device", nulls_last=True)
    # The KV-pool OOM is printed by both ranks and again in the traceback: one event, with the
    # tokens it asked for and those the pool had from the lines after it (SGLang 0.4's
    # "Avaliable tokens").
    assert ooms.rows() == [
        (
            _utc(2025, 3, 14, 2, 16, 17),
            "oom",
            1,
            round(1.96 * GiB),
            (
                "PyTorch OOM message (sentences layout); failing process: pid 3831601, the only "
                "one listed holding PyTorch's reserved memory"
            ),
        ),
        (
            _utc(2025, 3, 14, 2, 16, 17),
            "oom",
            None,
            None,
            (
                "SGLang could not allocate KV cache slots (Prefill out of memory): 8192 tokens "
                "asked, 412 available"
            ),
        ),
    ]
    dead = events.filter(pl.col("kind") == "engine_dead")["detail"].to_list()
    assert dead == [
        "SGLang scheduler hit an exception",
        "SGLang: a child process failed (SIGQUIT to the launcher)",
    ]
    assert events.filter(pl.col("kind") == "engine_start")["ts"].to_list() == [
        _utc(2025, 3, 14, 2, 10, 1)
    ]


def test_v04_startup_lines_give_engine_config_in_bytes_of_gib(tmp_path: Path) -> None:
    trace = _ingest(tmp_path, "v0.4-tp2.log")
    assert trace.manifest.engine_config == {
        "kv_cache_tokens": 367404,
        "max_num_seqs": 4097,
        "max_model_len": 131072,
        "chunked_prefill_size": 8192,
        "max_prefill_tokens": 16384,
        # TP0's "mem usage=32.90 GB": SGLang's GB are GiB.
        "model_weights_bytes": round(32.90 * GiB),
        "available_kv_cache_bytes": 2 * round(28.03 * GiB),
        "block_size": 1,
        "tensor_parallel_size": 2,
        "data_parallel_size": 1,
        "mem_fraction_static": 0.87,
    }
    assert trace.manifest.model == {
        "architecture": "LlamaForCausalLM",
        "dtype": "torch.bfloat16",
        "name": "meta-llama/Llama-3.1-70B-Instruct",
    }


def test_request_lines_give_ids_and_token_counts_never_text(tmp_path: Path) -> None:
    trace = _ingest(tmp_path, "v0.4-tp2.log")
    # the sampling parameters that size a step are not in these lines: all null
    params = ["n", "best_of", "logprobs", "prompt_logprobs"]
    assert trace.requests.select(pl.all_horizontal(pl.col(params).is_null()).all()).item()
    requests = trace.requests.drop("node", "source", "kv_blocks", "clock", *params)
    expected = pl.DataFrame(
        {
            "ts": [
                _utc(2025, 3, 14, 2, 16, 10),
                _utc(2025, 3, 14, 2, 16, 11),
                _utc(2025, 3, 14, 2, 16, 13),
                _utc(2025, 3, 14, 2, 16, 16),
            ],
            "request_id": ["ced00776101841e180bf04c8dbdc4ec2", "a1b2c3"] * 2,
            "event": ["arrived", "arrived", "finished", "aborted"],
            # the quoted "rid='fake'" and "'max_new_tokens': 1" in a prompt are not taken; a
            # truncated id list ("[1, 2] ... [3, 4]") gives no count, the finish line's does
            "prompt_tokens": [6, None, 6, 4100],
            "max_tokens": [512, None, 512, None],
            "output_tokens": [None, None, 57, 3],
            "cached_tokens": [None, None, 1, 0],
        },
        schema=requests.schema,
    )
    assert_frame_equal(requests, expected)
    stored = str(trace.requests.rows()) + str(trace.manifest.to_json())
    assert "The answer is 42" not in stored
    assert "please say" not in stored


def test_every_line_is_recognised_or_skipped_with_a_reason(tmp_path: Path) -> None:
    trace = _ingest(tmp_path, "v0.4-tp2.log")
    (diag,) = trace.manifest.sources
    assert diag.lines_read == 53
    assert diag.lines_recognised + diag.lines_skipped == diag.lines_read
    assert set(diag.skipped) == {
        "SGLang line not used (not relevant to memory or admission)",
        "line without SGLang's [date time] prefix (traceback, continuation or other output)",
    }
    assert trace.manifest.clock == {"tz": "UTC", "tz_assumed": True}
    assert any("read as UTC (pass --tz" in n for n in diag.notes)


def test_tz_places_sglang_local_times(tmp_path: Path) -> None:
    trace = _ingest(tmp_path, "v0.3.6.log", tz="Asia/Shanghai")
    assert _metric(trace, "preemptions_in_interval")["ts"].to_list() == [
        _utc(2024, 11, 20, 2, 15, 9)
    ]
    assert trace.manifest.clock == {"tz": "Asia/Shanghai", "tz_assumed": False}


def test_v036_cache_hit_rate_and_decode_oom_retraction(tmp_path: Path) -> None:
    trace = _ingest(tmp_path, "v0.3.6.log", gz=True)
    assert trace.manifest.engine["version_family"] == "0.3"
    assert _metric(trace, "prefix_cache_hit_ratio")["value"].to_list() == [pytest.approx(0.0469)]
    assert _metric(trace, "preemptions_in_interval")["value"].to_list() == [12]
    # "Decode out of memory happened" is a retraction, not an allocator OOM
    assert trace.events["kind"].to_list() == ["preemption"]
    assert trace.manifest.engine_config == {
        "kv_cache_tokens": 434212,
        "max_num_seqs": 2049,
        "max_model_len": 8192,
        "max_prefill_tokens": 16384,
    }


def test_v055_hybrid_pools_milliseconds_and_newest_retraction(tmp_path: Path) -> None:
    trace = _ingest(tmp_path, "v0.5.5-hybrid-ms.log")
    assert trace.manifest.engine["version_family"] == "0.5.5+"
    # the fullest attention pool (swa 0.91 over full 0.76); mamba state is not KV cache
    assert_frame_equal(
        _metric(trace, "kv_usage_ratio"),
        _series(
            (datetime(2026, 7, 4, 5, 1, 30, 118000, tzinfo=UTC), 0.74),
            (datetime(2026, 7, 4, 5, 1, 33, 250000, tzinfo=UTC), 0.74),
            (datetime(2026, 7, 4, 5, 1, 36, 250000, tzinfo=UTC), 0.91),
            (datetime(2026, 7, 4, 5, 1, 39, 250000, tzinfo=UTC), 0.70),
        ),
    )
    assert _metric(trace, "kv_tokens_used")["value"].to_list() == [350592, 360000, 330000]
    # the Mamba slots are their own pool: its usage is state_usage_ratio, never KV usage
    assert _metric(trace, "state_usage_ratio").rows() == [
        (datetime(2026, 7, 4, 5, 1, 30, 118000, tzinfo=UTC), 0.80),
        (datetime(2026, 7, 4, 5, 1, 33, 250000, tzinfo=UTC), 0.80),
    ]
    assert _metric(trace, "prompt_throughput_tokens_per_s")["value"].to_list() == [2114.79]
    assert _metric(trace, "preemptions_in_interval")["value"].to_list() == [2]
    config = trace.manifest.engine_config
    assert config["block_size"] == 64
    assert config["cuda_graph_bytes"] == round(1.25 * GiB)
    assert config["free_memory_after_startup_bytes"] == round(11.95 * GiB)
    assert config["model_weights_bytes"] == round(40.01 * GiB)


def test_v053_dp_attention_keeps_dp0_batch_lines_and_every_ranks_retractions(
    tmp_path: Path,
) -> None:
    trace = _ingest(tmp_path, "v0.5.3-dp2-compose.log")
    assert trace.manifest.engine["version_family"] == "0.5.0-0.5.3"
    assert _metric(trace, "requests_running")["value"].to_list() == [40, 40]
    (diag,) = trace.manifest.sources
    assert diag.skipped["batch line of another rank (kept DP0 TP0)"].count == 1
    details = trace.events.filter(pl.col("kind") == "preemption")["detail"].to_list()
    assert details == [
        "SGLang retracted 3 request(s): KV cache pool full, 1 of them aborted on DP0 TP0",
        "SGLang retracted 1 request(s): KV cache pool full on DP1 TP1",
    ]
    # MLA pools print one "KV size"
    assert trace.manifest.engine_config["available_kv_cache_bytes"] == round(33.58 * GiB)
    assert trace.manifest.engine_config["data_parallel_size"] == 2


def test_v054_forward_counter_behind_ray_prefixes(tmp_path: Path) -> None:
    trace = _ingest(tmp_path, "v0.5.4-ray.log")
    assert trace.manifest.engine["version_family"] == "0.5.4"
    assert _metric(trace, "kv_usage_ratio")["value"].to_list() == [0.31, 0.45]
    assert trace.manifest.engine_config == {"model_weights_bytes": round(15.24 * GiB)}


def test_kubectl_timestamps_win_and_their_disagreement_is_noted(tmp_path: Path) -> None:
    trace = _ingest(tmp_path, "v0.5.23-kubectl.log")
    ooms = trace.events.filter(pl.col("kind") == "oom")
    # the OOM line has no SGLang prefix but has kubectl's time
    assert ooms["ts"].to_list() == [datetime(2026, 9, 22, 6, 50, 4, 500100, tzinfo=UTC)]
    assert ooms["free_bytes"].to_list() == [round(8.50 * 2**20)]
    (diag,) = trace.manifest.sources
    assert (
        "SGLang's own times differ from the outer (kubectl/docker) times by +7199 s; used the "
        "outer times, which carry a zone"
    ) in diag.notes
    assert trace.manifest.clock == {}


def test_collector_lines_take_their_arrival_times_and_reveal_the_zone() -> None:
    lines = pl.DataFrame(
        {
            "line": [
                (
                    "[2025-06-01 14:00:00] Decode batch, #running-req: 3, #token: 10, token usage: "
                    "0.01, cuda graph: True, gen throughput (token/s): 1.00, #queue-req: 0"
                ),
                "Traceback (most recent call last):",
                "RuntimeError: CUDA error: out of memory",
            ],
            "arrival_ts": [
                datetime(2025, 6, 1, 12, 0, 0, 300000, tzinfo=UTC),
                datetime(2025, 6, 1, 12, 0, 1, tzinfo=UTC),
                datetime(2025, 6, 1, 12, 0, 1, 100000, tzinfo=UTC),
            ],
        },
        schema={"line": pl.String, "arrival_ts": pl.Datetime("ns", "UTC")},
    )
    diag = SourceDiagnostics("tail", "sglang-log", "n")
    result = PARSER.parse_lines(lines, ParseContext(), diag)
    assert result.samples is not None
    # the arrival time (sub-second) wins over the printed whole second
    assert set(result.samples["ts"].to_list()) == {
        datetime(2025, 6, 1, 12, 0, 0, 300000, tzinfo=UTC)
    }
    assert result.events is not None
    assert result.events["ts"].to_list() == [datetime(2025, 6, 1, 12, 0, 1, 100000, tzinfo=UTC)]
    assert result.clock == {"tz": "UTC+02:00", "tz_assumed": False}
    assert diag.lines_read == 3


def test_a_vllm_log_with_a_pytorch_oom_is_not_taken_for_sglang(tmp_path: Path) -> None:
    path = tmp_path / "vllm.log"
    path.write_text(
        "INFO 09-22 23:46:42 metrics.py:367] Avg prompt throughput: 0.0 tokens/s, Running: 3 "
        "reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 12.1%, CPU KV cache usage: "
        "0.0%.\nERROR 09-22 23:46:50 worker.py:1] torch.OutOfMemoryError: CUDA out of memory. "
        "Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.50 GiB "
        "is free.\n"
    )
    head = InputFile(path, path.name).head()
    assert PARSER.sniff(head, path.name) == 0.0
    assert registry()["pytorch-log"].sniff(head, path.name) < 0.5


def test_an_sglang_log_with_a_pytorch_oom_sniffs_as_sglang(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    shutil.copy(DATA / "v0.5.23-kubectl.log", path)
    chosen = sniff(InputFile(path, path.name), explicit=True)
    assert chosen.parser is not None
    assert chosen.parser.name == "sglang-log"
    assert chosen.confidence == 0.95


def test_a_log_without_any_sglang_line_parses_to_nothing_with_reasons(tmp_path: Path) -> None:
    path = tmp_path / "other.log"
    path.write_text("hello\nworld\n")
    diag = SourceDiagnostics("other.log", "sglang-log", "n")
    result = PARSER.parse(InputFile(path, path.name), ParseContext(), diag)
    assert (result.samples, result.events, result.requests) == (None, None, None)
    assert diag.lines_skipped == 2


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    st.lists(
        st.one_of(st.text(max_size=120), st.sampled_from(["[2025-01-01 00:00:00 TP9] "])),
        max_size=25,
    )
)
def test_arbitrary_text_never_raises(lines: list[str]) -> None:
    frame = pl.DataFrame({"line": lines}, schema={"line": pl.String})
    diag = SourceDiagnostics("x", "sglang-log", "n")
    PARSER.parse_lines(frame, ParseContext(), diag)
    assert diag.lines_read == len(lines)


@settings(
    max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None
)
@given(st.binary(max_size=600))
def test_arbitrary_bytes_never_raise(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "x.log"
    path.write_bytes(data)
    PARSER.parse(InputFile(path, path.name), ParseContext(), SourceDiagnostics("x", "s", "n"))


def test_cli_ingest_writes_the_trace_and_inspect_names_the_parser(tmp_path: Path) -> None:
    log = tmp_path / "server.log.gz"
    log.write_bytes(gzip.compress((DATA / "v0.4-tp2.log").read_bytes()))
    runner = CliRunner()
    result = runner.invoke(cli, ["ingest", str(log), "--out", str(tmp_path / "trace")])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == (
        f"wrote {tmp_path / 'trace'}: 20 samples, 4 request events, 6 events"
    )
    assert pl.read_parquet(tmp_path / "trace" / "samples.parquet").height == 20
    inspected = runner.invoke(cli, ["inspect", str(log), "--json", "--tz", "UTC"])
    assert inspected.exit_code == 0, inspected.output
    doc = json.loads(inspected.output)
    assert (doc["parser"], doc["confidence"]) == ("sglang-log", 0.95)
    assert doc["counts"] == {"events": 6, "requests": 4, "samples": 20}
    assert doc["manifest"]["engine"] == {"name": "sglang", "version_family": "0.3-0.4"}
    assert doc["manifest"]["clock"] == {"tz": "UTC", "tz_assumed": False}


def test_cli_refuses_an_unknown_zone(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["inspect", str(DATA / "v0.3.6.log"), "--tz", "Mars/Base"])
    assert result.exit_code == 2
    assert "--tz 'Mars/Base': unknown time zone" in result.output


def test_a_python_log_in_the_same_date_format_is_not_claimed_by_sglang() -> None:
    generic = "[2025-01-01 10:00:00] step 1 loss 2.0\n[2025-01-01 10:00:01] step 2 loss 1.9\n"
    assert PARSER.sniff(generic, "train.log") < 0.5
    assert (
        PARSER.sniff("[2025-01-01 10:00:00 TP1] Ignore import error when loading x\n", "x") == 0.8
    )


def test_memory_talk_that_is_no_oom_is_skipped_with_its_reason() -> None:
    frame = pl.DataFrame({"line": ["[2025-01-01 00:00:00] Tip: to avoid out of memory, lower it"]})
    diag = SourceDiagnostics("x", "sglang-log", "n")
    result = PARSER.parse_lines(frame, ParseContext(), diag)
    assert result.events is None
    assert diag.lines_recognised == 0
    assert diag.skipped["mentions memory but is no known out-of-memory message"].count == 1


def test_non_ascii_outer_prefixes_keep_line_order_and_times() -> None:
    lines = [
        "[2025-01-01 00:00:00 TP0] Decode batch. #running-req: 1, #queue-req: 0",
        "Mär 01 gpu-knoten [2025-01-01 00:00:05 TP0] Decode batch. #running-req: 5, #queue-req: 2",
        "RuntimeError: CUDA error: out of memory",
        "[2025-01-01 00:00:09 TP0] Decode batch. #running-req: 0, #queue-req: 0",
    ]
    result = PARSER.parse_lines(
        pl.DataFrame({"line": lines}), ParseContext(), SourceDiagnostics("x", "s", "n")
    )
    assert result.samples is not None
    running = result.samples.filter(pl.col("metric") == "requests_running").sort("ts")
    assert running["value"].to_list() == [1, 5, 0]
    assert result.events is not None
    assert result.events["ts"].to_list() == [_utc(2025, 1, 1, 0, 0, 5)]


def test_time_of_day_only_prefix_takes_its_date_from_the_file(tmp_path: Path) -> None:
    target = tmp_path / "v0.3.0-time-only.log"
    shutil.copy(DATA / target.name, target)
    written = datetime(2024, 10, 10, 16, 45, tzinfo=UTC).timestamp()
    os.utime(target, (written, written))
    trace = ingest_paths([target], IngestOptions())
    usage = _metric(trace, "kv_usage_ratio")
    assert usage["ts"][0] == _utc(2024, 10, 10, 16, 43, 29)
    assert usage["value"].to_list() == [0.0, 0.04, 0.18, 0.33, 0.48, 0.62, 0.77]
    assert _metric(trace, "requests_waiting")["value"].to_list()[-1] == 18
    assert _metric(trace, "prefix_cache_hit_ratio")["value"].to_list()[1] == pytest.approx(0.0276)
    (diag,) = trace.manifest.sources
    assert any("prints the time of day only" in n for n in diag.notes)
    assert trace.manifest.engine["version_family"] == "0.3"


def test_time_of_day_only_log_across_midnight_and_written_before_its_last_time(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.log"
    path.write_text(
        "[23:59:58 TP0] Decode batch. #running-req: 2, #token: 4078, token usage: 0.50, gen "
        "throughput (token/s): 447.31, #queue-req: 0\n"
        "[00:00:03 TP0] Decode batch. #running-req: 1, #token: 3902, token usage: 0.60, gen "
        "throughput (token/s): 333.97, #queue-req: 0\n"
    )
    # written at 00:00:05 on 2 March: the last line is that day's, the first the day before
    written = datetime(2025, 3, 2, 0, 0, 5, tzinfo=UTC).timestamp()
    os.utime(path, (written, written))
    trace = ingest_paths([path], IngestOptions())
    assert _metric(trace, "kv_usage_ratio")["ts"].to_list() == [
        _utc(2025, 3, 1, 23, 59, 58),
        _utc(2025, 3, 2, 0, 0, 3),
    ]
    # read in --tz: the file's time is 01:00:05 in Berlin, still 2 March there
    berlin = ingest_paths([path], IngestOptions(tz="Europe/Berlin"))
    assert _metric(berlin, "kv_usage_ratio")["ts"].to_list() == [
        _utc(2025, 3, 1, 22, 59, 58),
        _utc(2025, 3, 1, 23, 0, 3),
    ]


def test_python_logging_lines_of_a_users_configuration(tmp_path: Path) -> None:
    trace = _ingest(tmp_path, "v0.5-python-logging.log")
    assert _metric(trace, "kv_usage_ratio").rows() == [
        (datetime(2026, 6, 7, 10, 59, 32, 625000, tzinfo=UTC), 0.08),
        (datetime(2026, 6, 7, 10, 59, 32, 702000, tzinfo=UTC), 0.08),
    ]
    assert _metric(trace, "requests_running")["value"].to_list() == [32, 31]
    assert _metric(trace, "preemptions_in_interval")["value"].to_list() == [3]
    config = trace.manifest.engine_config
    assert config["kv_cache_tokens"] == 159552
    assert config["available_kv_cache_bytes"] == 2 * round(1.83 * GiB)
    assert config["cache_dtype"] == "bfloat16"
    assert config["model_weights_bytes"] == round(15.27 * GiB)
    (diag,) = trace.manifest.sources
    assert diag.lines_read == 7
    assert diag.skipped["SGLang line not used (not relevant to memory or admission)"].count == 1
    assert trace.manifest.clock["tz_assumed"] is True
    sniffed = sniff(InputFile(tmp_path / "v0.5-python-logging.log", "x.log"), explicit=True)
    assert sniffed.parser is not None
    assert sniffed.parser.name == "sglang-log"


def test_kv_line_with_its_dtype_and_one_kv_size(tmp_path: Path) -> None:
    # Ascend/sglang CI, an EAGLE3 draft model: "dtype:" first, one KV size (MLA-style pool)
    path = tmp_path / "ascend.log"
    path.write_text(
        "[2026-02-25 10:00:01 TP0] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 76416, "
        "KV size: 5.01 GB\n"
    )
    trace = ingest_paths([path], IngestOptions())
    config = trace.manifest.engine_config
    assert config["kv_cache_tokens"] == 76416
    assert config["available_kv_cache_bytes"] == round(5.01 * GiB)
    assert config["cache_dtype"] == "bfloat16"


def test_time_of_day_only_log_takes_the_year_given(tmp_path: Path) -> None:
    target = tmp_path / "v0.3.0-time-only.log"
    shutil.copy(DATA / target.name, target)
    written = datetime(2024, 10, 10, 16, 45, tzinfo=UTC).timestamp()
    os.utime(target, (written, written))
    trace = ingest_paths([target], IngestOptions(year=2025))
    assert _metric(trace, "kv_usage_ratio")["ts"][0] == _utc(2025, 10, 10, 16, 43, 29)
    clock = trace.manifest.sources[0].clock
    assert (clock["year"], clock["year_source"]) == (2025, "option")
