"""Any text log with PyTorch/CUDA OOM messages: each line's time in the common forms; a log
with none keeps its order and gets no made-up time (the file's modification time is not one)."""

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

from oomtrace.cli import cli
from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.errors import InputError
from oomtrace.ingest import IngestOptions, ingest_paths, sniff
from oomtrace.ingest.parser_api import ClockOptions, ParseContext
from oomtrace.ingest.text.input_file import InputFile
from oomtrace.ingest.text.timestamps import line_stamps
from oomtrace.ingest.torch.log_parser import PARSER
from oomtrace.trace import Trace
from oomtrace.units import GiB, MiB

DATA = Path(__file__).resolve().parents[3] / "data" / "torch"
MTIME = datetime(2025, 1, 2, 8, 30, tzinfo=UTC)


def _copy(tmp_path: Path, name: str, *, gz: bool = False) -> Path:
    target = tmp_path / (name + (".gz" if gz else ""))
    if gz:
        target.write_bytes(gzip.compress((DATA / name).read_bytes()))
    else:
        shutil.copy(DATA / name, target)
    os.utime(target, (MTIME.timestamp(), MTIME.timestamp()))
    return target


def _ingest(tmp_path: Path, name: str, *, gz: bool = False, **options: object) -> Trace:
    return ingest_paths([_copy(tmp_path, name, gz=gz)], IngestOptions(**options))  # type: ignore[arg-type]


def test_training_stdout_oom_takes_the_time_of_the_line_before_it(tmp_path: Path) -> None:
    trace = _ingest(tmp_path, "train-stdout.log", tz="Europe/Berlin")
    (row,) = trace.events.to_dicts()
    assert row["ts"] == datetime(2024, 5, 2, 8, 0, 5, 456000, tzinfo=UTC)
    assert row["requested_bytes"] == 26 * MiB
    assert row["device"] == 0
    (diag,) = trace.manifest.sources
    assert diag.parser == "pytorch-log"
    assert diag.lines_recognised == 1
    assert diag.skipped["mentions memory but is no known out-of-memory message"].count == 1
    assert diag.lines_recognised + diag.lines_skipped == diag.lines_read == 9
    assert trace.manifest.clock == {"tz": "Europe/Berlin", "tz_assumed": False}


def test_tgi_log_rfc3339_with_ansi_colours_and_its_warmup_failure(tmp_path: Path) -> None:
    trace = _ingest(tmp_path, "tgi.log", gz=True)
    events = trace.events.select("ts", "kind", "requested_bytes", "detail").rows()
    # the router repeats the shard's OOM 84 ms later: one event
    assert events == [
        (
            datetime(2024, 12, 10, 21, 50, 1, 118870, tzinfo=UTC),
            "oom",
            round(1.95 * GiB),
            (
                "PyTorch OOM message (sentences layout); failing process: pid 402, the only one "
                "listed holding PyTorch's reserved memory; during the warm-up before serving"
            ),
        ),
        (
            datetime(2024, 12, 10, 21, 50, 1, 203150, tzinfo=UTC),
            "startup_kv_insufficient",
            None,
            "TGI warm-up: not enough memory to handle max_total_tokens=4096",
        ),
        # the launcher's account of the crash that followed
        (
            datetime(2024, 12, 10, 21, 50, 1, 290003, tzinfo=UTC),
            "engine_dead",
            None,
            "TGI: Webserver Crashed",
        ),
    ]
    # TGI's shard runs in a container: its own process is listed as "Process 402", and only it
    # holds the 21.90 GiB + 262.51 MiB PyTorch had reserved
    oom = trace.events.row(0, named=True)
    assert (oom["pid"], oom["process_bytes"]) == (402, round(22.61 * GiB))
    assert trace.samples.select("pid", "metric").rows() == [(402, "process_used_bytes")]
    assert trace.manifest.clock == {}


def test_llama_cpp_log_without_timestamps_alone_stays_untimed_not_at_the_file_time(
    tmp_path: Path,
) -> None:
    # GIVEN llama.cpp's default log (no time on any line), alone, its file time set
    trace = _ingest(tmp_path, "llama-server.log")
    # THEN its OOM is kept with its figures but no time: nothing of the incident anchors it
    (row,) = trace.events.to_dicts()
    assert (row["ts"], row["clock"]) == (None, "untimed")
    assert row["ts"] != MTIME
    assert row["requested_bytes"] == round(13285.50 * MiB)
    assert row["free_bytes"] is None
    # the line after it names the caller: the KV cache's buffer, made at start-up
    assert row["phase"] == "kv_cache_init"
    assert row["detail"] == (
        "llama.cpp (ggml) cudaMalloc failed: out of memory; during the KV cache's allocation at "
        "start-up"
    )
    (diag,) = trace.manifest.sources
    assert diag.notes[0].startswith("this log prints no time: its events keep their order")
    assert (diag.clock["status"], diag.clock["untimed_rows"]) == ("untimed", 1)
    assert diag.clock["reason"] == (
        "the log shows 1 failure and no timed input of the incident saw a memory release or an OOM"
    )


def test_journald_syslog_times_get_the_year_from_the_file_and_cross_new_year(
    tmp_path: Path,
) -> None:
    trace = _ingest(tmp_path, "journald.log")
    assert trace.events.select("ts", "requested_bytes").rows() == [
        (datetime(2024, 12, 31, 23, 59, 59, tzinfo=UTC), None),
        (datetime(2025, 1, 1, 0, 0, 2, tzinfo=UTC), round(3.15 * GiB)),
    ]
    assert trace.manifest.clock == {"tz": "UTC", "tz_assumed": True, "year_assumed": True}
    (tmp_path / "given").mkdir()
    explicit = _ingest(tmp_path / "given", "journald.log", year=2030)
    assert explicit.events["ts"].dt.year().to_list() == [2030, 2030]


def test_oom_lines_before_the_first_timestamp_take_it(tmp_path: Path) -> None:
    path = tmp_path / "early.log"
    path.write_text(
        "RuntimeError: CUDA error: out of memory\n2025-03-01T10:00:00+01:00 launcher exited\n"
    )
    trace = ingest_paths([path], IngestOptions())
    assert trace.events["ts"].to_list() == [datetime(2025, 3, 1, 9, 0, tzinfo=UTC)]
    assert trace.manifest.sources[0].notes == [
        "1 out-of-memory line(s) came before the first timestamp; placed at it"
    ]


def test_lines_from_a_collector_use_their_arrival_time() -> None:
    lines = pl.DataFrame(
        {
            "line": ["loading", "RuntimeError: CUDA error: out of memory"],
            "arrival_ts": [
                datetime(2025, 5, 5, 1, tzinfo=UTC),
                datetime(2025, 5, 5, 2, tzinfo=UTC),
            ],
        },
        schema={"line": pl.String, "arrival_ts": pl.Datetime("ns", "UTC")},
    )
    result = PARSER.parse_lines(lines, ParseContext(), SourceDiagnostics("t", "p", "n"))
    assert result.events is not None
    assert result.events["ts"].to_list() == [datetime(2025, 5, 5, 2, tzinfo=UTC)]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("2024-12-10T21:50:03.478010Z  INFO router", datetime(2024, 12, 10, 21, 50, 3, 478010)),
        ("2024-12-10T21:50:03+02:00 x", datetime(2024, 12, 10, 19, 50, 3)),
        ("2024-12-10T21:50:03.5-0130 x", datetime(2024, 12, 10, 23, 20, 3, 500000)),
        ("2024-12-10 21:50:03,123 - INFO - x", datetime(2024, 12, 10, 21, 50, 3, 123000)),
        ("[2024-12-10 21:50:03] x", datetime(2024, 12, 10, 21, 50, 3)),
        ("2024-12-10T21:50:03.123456789Z x", datetime(2024, 12, 10, 21, 50, 3, 123456)),
        ("Dec  9 21:50:03 host unit[1]: x", datetime(2024, 12, 9, 21, 50, 3)),
        ("web-1  | 2024-12-10T21:50:03Z x", datetime(2024, 12, 10, 21, 50, 3)),
        ("message " + "x" * 100 + " quoting 2024-12-10 21:50:03", None),
        ("2024-13-45 10:00:00 not a date", None),
        ("no time here", None),
    ],
)
def test_timestamp_forms(line: str, expected: datetime | None) -> None:
    stamps, _ = line_stamps(pl.Series([line]), "UTC", None, datetime(2024, 12, 31, tzinfo=UTC))
    got = stamps[0]
    assert (got.replace(tzinfo=None) if got else None) == expected


def test_zoned_times_win_over_zone_less_ones_in_one_line() -> None:
    # journald around a TGI line: the RFC 3339 time with a zone is the exact one
    line = "Dec 10 22:50:03 host tgi[7]: 2024-12-10T21:50:03.100000Z ERROR shard"
    stamps, forms = line_stamps(pl.Series([line]), "Europe/Berlin", 2024, None)
    assert stamps[0] == datetime(2024, 12, 10, 21, 50, 3, 100000, tzinfo=UTC)
    assert forms.zoned == 1


def test_sniffing_is_modest_and_steps_aside_for_engine_logs(tmp_path: Path) -> None:
    log = _copy(tmp_path, "train-stdout.log")
    assert PARSER.sniff(InputFile(log, log.name).head(), log.name) == 0.55
    assert PARSER.sniff("INFO 2025 all fine\n", "x.log") == 0.0
    sglang = (
        "[2025-03-14 02:16:14 TP0] Decode batch. #running-req: 1, #token: 1, token usage: 0.1\n"
        "RuntimeError: CUDA error: out of memory\n"
    )
    assert PARSER.sniff(sglang, "x.log") == 0.2
    chosen = sniff(InputFile(log, log.name), explicit=True)
    assert chosen.parser is not None
    assert chosen.parser.name == "pytorch-log"


def test_a_log_without_an_oom_is_not_recognised(tmp_path: Path) -> None:
    path = tmp_path / "plain.log"
    path.write_text("2025-01-01 00:00:00 INFO hello\n")
    with pytest.raises(InputError, match=r"^plain.log: no known format; no parser recognised it"):
        ingest_paths([path], IngestOptions())


@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.lists(st.text(max_size=150), max_size=25))
def test_arbitrary_text_never_raises(lines: list[str]) -> None:
    frame = pl.DataFrame({"line": lines}, schema={"line": pl.String})
    PARSER.parse_lines(
        frame, ParseContext(ClockOptions(tz="America/New_York")), SourceDiagnostics("x", "p", "n")
    )


@settings(
    max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None
)
@given(st.binary(max_size=600))
def test_arbitrary_bytes_never_raise(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "x.log"
    path.write_bytes(b"log " + data + b"\nCUDA error: out of memory\n")  # not gzip magic
    diag = SourceDiagnostics("x", "p", "n")
    PARSER.parse(InputFile(path, path.name), ParseContext(mtime=MTIME), diag)
    assert diag.lines_recognised >= 1


def test_cli_inspect_shows_the_stated_time_assumption(tmp_path: Path) -> None:
    log = _copy(tmp_path, "llama-server.log")
    result = CliRunner().invoke(cli, ["inspect", str(log), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert (doc["parser"], doc["confidence"]) == ("pytorch-log", 0.55)
    assert doc["counts"] == {"events": 1, "requests": 0, "samples": 0}
    (source,) = doc["manifest"]["sources"]
    assert source["notes"][0].startswith("this log prints no time: its events keep their order")


def test_cli_names_a_log_without_an_oom_and_the_remedy(tmp_path: Path) -> None:
    path = tmp_path / "plain.log"
    path.write_text("2025-01-01 00:00:00 INFO hello\n")
    result = CliRunner().invoke(cli, ["ingest", str(path), "--out", str(tmp_path / "t")])
    assert result.exit_code == 2
    assert result.output.startswith(
        "oomtrace: error: plain.log: no known format; no parser recognised it (tried: "
    )
    assert result.output.rstrip().endswith("pass --format")


def test_llama_cpp_durations_since_start_are_no_time_of_day(tmp_path: Path) -> None:
    # GIVEN llama.cpp's newer lines ("1.06.520.077 E ..."), its failure on device 1 of three
    trace = _ingest(tmp_path, "llama-server-log-timestamps.log")
    # THEN the failure keeps its device and size; a duration since start places nothing in time
    (row,) = trace.events.to_dicts()
    assert (row["ts"], row["clock"]) == (None, "untimed")
    assert row["device"] == 1
    assert row["requested_bytes"] == round(51748.72 * MiB)
    # graph_reserve and sched_reserve, right after it, say what failed: the compute buffers
    # reserved while the context is made (start-up)
    assert row["phase"] == "compute_reserve"
    (diag,) = trace.manifest.sources
    # the failure, ggml's buffer line that repeats it (read as the same failure), the lines that
    # state its phase and the server's slots ("n_slots = 1", its max_num_seqs)
    assert diag.lines_recognised == 5
    assert trace.manifest.engine_config == {"max_num_seqs": 1}
    assert any("llama.cpp prints how long after its start" in n for n in diag.notes)


# llama.cpp's statement of its KV cache, in the wordings of three generations of builds
LLAMA_KV_2024_OLD = (  # ollama/ollama #6860: the context's summary, then a compute buffer fails
    "llama_new_context_with_model: KV self size  = 5120.00 MiB, K (f16): 2560.00 MiB, V (f16): "
    "2560.00 MiB\n"
    "llama_new_context_with_model: pipeline parallelism enabled (n_copies=4)\n"
    "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 144.00 MiB on device 4: cudaMalloc "
    "failed: out of memory\n"
)
LLAMA_KV_2024 = (  # ggml-org/llama.cpp #9390: eight slots sharing 16384 cells over eight GPUs
    "llama_init_from_model: n_seq_max     = 8\n"
    "llama_init_from_model: n_ctx         = 16384\n"
    "llama_kv_cache_init: kv_size = 16384, offload = 1, type_k = 'q4_0', type_v = 'f16', "
    "n_layer = 61, can_shift = 0\n"
    "llama_kv_cache_init:      CUDA0 KV buffer size =  5824.00 MiB\n"
)
LLAMA_KV_2025 = (  # the current summary line (src/llama-kv-cache.cpp), a 2025 build's name
    "llama_context: n_seq_max     = 4\n"
    "llama_kv_cache_unified:      CUDA0 KV buffer size =  1024.00 MiB\n"
    "llama_kv_cache_unified: size = 1024.00 MiB (  8192 cells,  32 layers,  4/ 4 seqs), K (f16):  "
    "512.00 MiB, V (f16):  512.00 MiB\n"
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (LLAMA_KV_2024_OLD, {"available_kv_cache_bytes": 5120 * MiB}),
        (LLAMA_KV_2024, {"kv_cache_tokens": 16384, "max_num_seqs": 8}),
        (
            LLAMA_KV_2025,
            {"available_kv_cache_bytes": 1024 * MiB, "kv_cache_tokens": 8192, "max_num_seqs": 4},
        ),
    ],
)
def test_llama_cpp_states_its_kv_cache_at_start_up(
    tmp_path: Path, text: str, expected: dict[str, int]
) -> None:
    path = tmp_path / "llama-server.log"
    path.write_text(text)
    trace = ingest_paths([path], IngestOptions())
    assert trace.manifest.engine_config == expected


def test_a_recurrent_models_state_is_not_taken_for_kv_cache(tmp_path: Path) -> None:
    path = tmp_path / "llama-server.log"
    path.write_text(
        "llama_memory_recurrent: size =  150.75 MiB (     1 cells,  48 layers,  1 seqs), R (f32): "
        "  6.75 MiB, S (f32):  144.00 MiB\n"
        "llama_kv_cache: size =  354.75 MiB (  8448 cells,  43 layers,  1/1 seqs), K (f16):  "
        "354.75 MiB, V (f16):    0.00 MiB\n"
    )
    config = ingest_paths([path], IngestOptions()).manifest.engine_config
    assert (config["available_kv_cache_bytes"], config["kv_cache_tokens"]) == (
        round(354.75 * MiB),
        8448,
    )


def test_a_llama_cpp_log_is_recognised_before_its_failure_appears(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    path.write_text(
        "0.00.131.872 I ggml_cuda_init: found 3 CUDA devices:\n"
        + "0.00.902.114 I llama_model_loader: - kv   0: general.architecture str = llama\n" * 2000
    )
    chosen = sniff(InputFile(path, path.name), explicit=True)
    assert chosen.parser is not None
    assert chosen.parser.name == "pytorch-log"


def test_tgi_warmup_panic_with_the_cudamallocasync_refusal(tmp_path: Path) -> None:
    trace = _ingest(tmp_path, "tgi-warmup-panic.log")
    (row,) = trace.events.filter(pl.col("kind") == "oom").to_dicts()
    # "Webserver Crashed" and the launcher's exit "Error: WebserverFailed" are one death
    (death,) = trace.events.filter(pl.col("kind") == "engine_dead").to_dicts()
    assert death["ts"] == datetime(2023, 7, 7, 17, 55, 43, 805488, tzinfo=UTC)
    # the panic precedes the first timestamp in this excerpt, so it takes that one
    assert row["ts"] == datetime(2023, 7, 7, 17, 55, 43, 805488, tzinfo=UTC)
    assert (row["requested_bytes"], row["allocated_bytes"]) == (
        round(4.83 * GiB),
        round(16.08 * GiB),
    )
    assert (row["total_bytes"], row["free_bytes"]) == (round(22.20 * GiB), round(11.12 * MiB))
    assert str(row["detail"]).endswith(
        "limit 22.20 GiB (the memory fraction); during the warm-up before serving"
    )


def test_tgi_states_its_kv_pool_and_prefill_budget_after_warm_up(tmp_path: Path) -> None:
    # a start-up without any failure is still read, for the pool the warm-up settled on
    trace = _ingest(tmp_path, "tgi-startup.log")
    config = trace.manifest.engine_config
    assert (config["kv_cache_tokens"], config["max_num_batched_tokens"]) == (30816, 10049)
    (diag,) = trace.manifest.sources
    assert diag.parser == "pytorch-log"
    assert diag.lines_recognised == 2


def test_a_tgi_budget_that_no_warm_up_measured_is_no_kv_pool(tmp_path: Path) -> None:
    # models without paged attention: the router says so, then states the configured budget
    path = tmp_path / "tgi.log"
    path.write_text(
        "2024-03-04T16:38:11.273900Z WARN text_generation_router: router/src/main.rs:224: Model "
        "does not support automatic max batch total tokens\n"
        "2024-03-04T16:38:11.273926Z INFO text_generation_router: router/src/main.rs:246: "
        "Setting max batch total tokens to 16000\n"
    )
    trace = ingest_paths([path], IngestOptions())
    assert "kv_cache_tokens" not in trace.manifest.engine_config
    assert any("not a KV pool" in n for n in trace.manifest.sources[0].notes)


@pytest.mark.parametrize(
    ("line", "detail"),
    [
        # huggingface/text-generation-inference #755: the launcher's last line (1.x)
        (
            (
                'Error: Warmup(Generation("Not enough memory to handle 4096 prefill tokens. '
                'You need to decrease `--max-batch-prefill-tokens`"))'
            ),
            "4096 prefill tokens (--max-batch-prefill-tokens)",
        ),
        # huggingface/text-generation-inference #710: the wording before 1.0
        (
            (
                "Not enough memory to handle 16000 total tokens with 2 prefill tokens. You need to "
                "decrease `--max-batch-total-tokens` or `--max-batch-prefill-tokens`"
            ),
            "16000 total tokens with 2 prefill tokens",
        ),
    ],
)
def test_tgi_warm_up_refusals_of_every_release_are_start_up_refusals(
    tmp_path: Path, line: str, detail: str
) -> None:
    path = tmp_path / "tgi.log"
    path.write_text(line + "\n")
    trace = ingest_paths([path], IngestOptions())
    (row,) = trace.events.to_dicts()
    assert row["kind"] == "startup_kv_insufficient"
    assert row["detail"] == f"TGI warm-up: not enough memory to handle {detail}"


def test_the_refusal_printed_on_six_lines_is_one_event_and_all_its_lines_are_read(
    tmp_path: Path,
) -> None:
    trace = _ingest(tmp_path, "fraction-refusal-lines.log")
    (row,) = trace.events.to_dicts()
    assert row["ts"] == datetime(2024, 6, 22, 15, 12, 27, 221000, tzinfo=UTC)
    assert row["requested_bytes"] == 320 * MiB
    assert row["total_bytes"] == round(23.69 * GiB)
    assert str(row["detail"]).endswith("no memory fraction set, so CUDA itself refused")
    (diag,) = trace.manifest.sources
    assert diag.lines_recognised == 7
    assert diag.lines_recognised + diag.lines_skipped == diag.lines_read == 9


# A record split across lines by whoever pasted it (a terminal, an issue form): verl's notes on a
# checkpoint resume quote the OOM re-flowed at 78 columns or less. The shared text machinery
# (oomtrace/ingest/text/split_records.py) joins it back.
WRAPPED_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 74.00 MiB. GPU 0\n"
    "has a total capacity of 79.25 GiB of which 38.06 MiB is free. Process 1016459\n"
    "has 9.92 GiB memory in use. Process 1275461 has 9.10 GiB memory in use.\n"
    "Including non-PyTorch memory, this process has 2.29 GiB memory\n"
    "in use. Of the allocated memory 1.88 GiB is allocated by\n"
    "PyTorch, and 2.50 MiB is reserved by PyTorch but unallocated.\n"
)


def test_an_oom_message_wrapped_at_a_fixed_width_keeps_its_sizes(tmp_path: Path) -> None:
    path = tmp_path / "wrapped.log"
    path.write_text(WRAPPED_OOM)
    (row,) = ingest_paths([path], IngestOptions()).events.to_dicts()
    assert row["requested_bytes"] == 74 * MiB
    assert row["total_bytes"] == round(79.25 * GiB)
    assert row["process_bytes"] == round(2.29 * GiB)
