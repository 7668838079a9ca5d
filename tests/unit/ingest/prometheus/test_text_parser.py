"""Prometheus exposition text: single scrapes of every dialect, concatenated scrapes with time
lines, and the collector's parse_scrapes, which is the same code path."""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from polars.testing import assert_frame_equal

from oomtrace.cli import cli
from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.errors import InputError
from oomtrace.ingest import IngestOptions, ingest_paths
from oomtrace.ingest.prometheus.text_parser import PARSER, parse_scrapes
from oomtrace.trace import Trace
from tests.factories import file_at

DATA = Path(__file__).resolve().parents[3] / "data"
PROM = DATA / "prometheus"
MiB = 1 << 20
MTIME = datetime(2025, 3, 14, 9, 30, tzinfo=UTC)
T0 = datetime(2025, 3, 14, 9, 0, tzinfo=UTC)


def _copy(tmp_path: Path, name: str, folder: Path = PROM) -> Path:
    return file_at(tmp_path / name, MTIME, copy_of=folder / name)


def _write(tmp_path: Path, text: str, name: str = "metrics.prom") -> Path:
    return file_at(tmp_path / name, MTIME, text=text)


def _ingest(*paths: Path, **options: object) -> Trace:
    return ingest_paths(list(paths), IngestOptions(**options))  # type: ignore[arg-type]


def _frame(
    rows: list[tuple[datetime, str, float]], source: list[str] | None = None
) -> pl.DataFrame:
    frame = pl.DataFrame(
        {
            "ts": [r[0] for r in rows],
            "metric": [r[1] for r in rows],
            "value": [r[2] for r in rows],
        },
        schema={"ts": pl.Datetime("ns", "UTC"), "metric": pl.String, "value": pl.Float64},
    )
    return frame if source is None else frame.with_columns(source=pl.Series(source))


def _rows(trace: Trace, *extra: str) -> pl.DataFrame:
    return trace.samples.select("ts", "metric", "value", *extra).sort(
        "ts", "metric", *extra, maintain_order=True
    )


def _notes(trace: Trace) -> list[str]:
    return [n for s in trace.manifest.sources for n in s.notes]


def test_vllm_current_layout_maps_gauges_and_cache_config(tmp_path: Path) -> None:
    # GIVEN one scrape of vLLM 0.11 (generated layout, docs/formats/prometheus.md), no time in it
    trace = _ingest(_copy(tmp_path, "vllm_v1_0.11.prom"))
    # THEN the admission gauges map to the vocabulary, placed at the file's modification time
    assert_frame_equal(
        _rows(trace),
        _frame(
            [
                (MTIME, "kv_usage_ratio", 0.9871),
                (MTIME, "preemptions_total", 12.0),
                (MTIME, "requests_running", 48.0),
                (MTIME, "requests_waiting", 17.0),
            ]
        ),
    )
    assert trace.manifest.engine == {
        "name": "vllm",
        "metrics_family": "V1 >= 0.9.2 (kv_cache_usage_perc)",
    }
    assert trace.manifest.engine_config == {
        "block_size": 16,
        "cache_dtype": "auto",
        "enable_prefix_caching": True,
        "gpu_memory_utilization": 0.9,
        "num_gpu_blocks": 27000,
    }
    diag = trace.manifest.sources[0]
    assert diag.lines_read == diag.lines_recognised + diag.lines_skipped == 35
    assert diag.skipped["metric family not mapped to the vocabulary"].count == 11
    assert diag.skipped["not Prometheus exposition text"].example == "..."
    assert (
        "4 metric families not mapped: vllm:request_params_max_tokens (6), "
        "vllm:request_success_total (3), vllm:num_preemptions (1), vllm:prompt_tokens_total (1)"
    ) in diag.notes
    assert any(
        n.startswith(
            "one scrape with no time: placed at the file's modification time 2025-03-14T09:30:00Z"
        )
        for n in diag.notes
    )


def test_vllm_early_v1_old_usage_name_and_no_engine_label(tmp_path: Path) -> None:
    trace = _ingest(_copy(tmp_path, "vllm_v1_early.prom"))
    assert _rows(trace)["metric"].to_list() == [
        "kv_usage_ratio",
        "requests_running",
        "requests_waiting",
    ]
    assert trace.manifest.engine["metrics_family"] == "V1 0.7.3-0.9.1 (gpu_cache_usage_perc)"


def test_both_kv_usage_names_at_one_instant_give_one_row(tmp_path: Path) -> None:
    # GIVEN vLLM 0.9.2-0.10.x, which exports the old and the new name with the same value
    path = _write(
        tmp_path,
        'vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.5\n'
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5\n',
    )
    trace = _ingest(path)
    assert_frame_equal(_rows(trace), _frame([(MTIME, "kv_usage_ratio", 0.5)]))
    assert trace.manifest.engine["metrics_family"] == "V1 0.9.2-0.11 (both KV usage names)"


def test_help_and_type_lines_without_samples_give_an_empty_trace(tmp_path: Path) -> None:
    trace = _ingest(_copy(tmp_path, "vllm_v0_help_only.prom"))
    assert trace.samples.height == 0
    assert trace.manifest.sources[0].lines_recognised == 15


def test_shell_prompt_and_ellipsis_lines_are_counted_not_fatal(tmp_path: Path) -> None:
    trace = _ingest(_copy(tmp_path, "vllm_docs_curl.prom"))
    skipped = trace.manifest.sources[0].skipped["not Prometheus exposition text"]
    assert (skipped.count, skipped.example) == (3, "$ curl http://0.0.0.0:8000/metrics")
    assert _rows(trace)["value"].to_list() == [8.0]


def _loop(texts: list[str], times: list[str], trailing: bool = False) -> str:
    parts = []
    for when, text in zip(times, texts, strict=True):
        parts += [text, when] if trailing else [when, text]
    return "\n".join(parts) + "\n"


SCRAPE = 'vllm:num_requests_running{{engine="0",model_name="m"}} {n}.0'


def test_oomtrace_scrape_lines_time_each_scrape(tmp_path: Path) -> None:
    text = _loop(
        [SCRAPE.format(n=1), SCRAPE.format(n=2)],
        [
            "# oomtrace-scrape 2025-03-14T09:00:00.000Z",
            "# oomtrace-scrape 2025-03-14T09:00:00.100Z",
        ],
    )
    trace = _ingest(_write(tmp_path, text))
    assert_frame_equal(
        _rows(trace),
        _frame(
            [
                (T0, "requests_running", 1.0),
                (T0 + timedelta(milliseconds=100), "requests_running", 2.0),
            ]
        ),
    )
    assert trace.manifest.clock == {}


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("1741942800", "1741942800.25"),
        ("1741942800000", "1741942800250"),
        ("1741942800000000000", "1741942800250000000"),
        ("2025-03-14T10:00:00+01:00", "2025-03-14T09:00:00,250000000+00:00"),
        ("Fri, 14 Mar 2025 09:00:00 +0000", "Fri, 14 Mar 2025 10:00:01 +0100"),
        ("Fri Mar 14 09:00:00 UTC 2025", "Fri Mar 14 09:00:01 GMT 2025"),
    ],
)
def test_date_and_epoch_time_lines_are_read(tmp_path: Path, first: str, second: str) -> None:
    trace = _ingest(
        _write(tmp_path, _loop([SCRAPE.format(n=1), SCRAPE.format(n=2)], [first, second]))
    )
    later = timedelta(seconds=1) if second.startswith("Fri") else timedelta(milliseconds=250)
    expected = [T0, T0 + later]
    assert trace.samples["ts"].to_list() == expected


@pytest.mark.skipif(shutil.which("date") is None, reason="needs the date command")
@pytest.mark.parametrize(
    "args",
    [["-Is"], ["-Ins"], ["-R"], ["-u", "+%FT%T.%3NZ"], ["+%s"], ["+%s%N"], ["+%s.%N"], []],
)
def test_what_the_real_date_command_prints_is_a_time_line(tmp_path: Path, args: list[str]) -> None:
    # GIVEN a time line written by the date command itself, as a curl loop would
    before = datetime.now(UTC).replace(microsecond=0)
    env = {**os.environ, "LC_ALL": "C", "TZ": "UTC"}
    stamp = subprocess.run(["date", *args], capture_output=True, text=True, check=True, env=env)
    after = datetime.now(UTC) + timedelta(seconds=1)
    trace = _ingest(_write(tmp_path, stamp.stdout + SCRAPE.format(n=1) + "\n"))
    # THEN the scrape is placed at that time
    (ts,) = trace.samples["ts"].to_list()
    assert before <= ts <= after


def test_time_lines_after_their_scrape_close_it(tmp_path: Path) -> None:
    # GIVEN `curl; date +%s` in a loop: each time follows its scrape, the last scrape is cut off
    text = _loop(
        [SCRAPE.format(n=1), SCRAPE.format(n=2)], ["1741942800", "1741942801"], trailing=True
    )
    text += SCRAPE.format(n=3) + "\n"
    trace = _ingest(_write(tmp_path, text))
    assert_frame_equal(
        _rows(trace),
        _frame(
            [
                (T0, "requests_running", 1.0),
                (T0 + timedelta(seconds=1), "requests_running", 2.0),
            ]
        ),
    )
    diag = trace.manifest.sources[0]
    reason = "sample outside any timed scrape (before the first or after the last time line)"
    assert diag.skipped[reason].count == 1
    assert diag.lines_read == diag.lines_recognised + diag.lines_skipped == 5


def test_zone_less_times_are_utc_unless_tz_and_recorded(tmp_path: Path) -> None:
    text = _loop([SCRAPE.format(n=1)], ["2025-03-14 10:00:00"])
    assumed = _ingest(_write(tmp_path, text))
    assert assumed.samples["ts"].to_list() == [T0 + timedelta(hours=1)]
    assert assumed.manifest.clock == {"tz": "UTC", "tz_assumed": True}
    placed = _ingest(_write(tmp_path, text, "b.prom"), tz="Europe/Berlin")
    assert placed.samples["ts"].to_list() == [T0]
    assert placed.manifest.clock == {"tz": "Europe/Berlin", "tz_assumed": False}


def test_a_zone_abbreviation_needs_tz(tmp_path: Path) -> None:
    path = _write(tmp_path, _loop([SCRAPE.format(n=1)], ["Fri Mar 14 10:00:00 CET 2025"]))
    with pytest.raises(InputError) as err:
        _ingest(path)
    assert str(err.value) == (
        "metrics.prom: time lines such as 'Fri Mar 14 10:00:00 CET 2025' give their zone only "
        "as 'CET', which names no single offset; pass --tz with the IANA zone (e.g. "
        "Europe/Berlin) or write the times with `date -Is`"
    )
    assert _ingest(path, tz="Europe/Berlin").samples["ts"].to_list() == [T0]


def test_a_sample_s_own_timestamp_wins(tmp_path: Path) -> None:
    text = "# oomtrace-scrape 2025-03-14T09:00:05Z\n" + SCRAPE.format(n=1) + " 1741942800123\n"
    trace = _ingest(_write(tmp_path, text))
    assert trace.samples["ts"].to_list() == [T0 + timedelta(milliseconds=123)]


def test_a_timestamp_beyond_2255_is_counted_not_wrapped(tmp_path: Path) -> None:
    text = "# oomtrace-scrape 2025-03-14T09:00:05Z\n" + SCRAPE.format(n=1) + " 9999999999999999\n"
    trace = _ingest(_write(tmp_path, text))
    assert trace.samples.height == 0
    assert trace.manifest.sources[0].skipped["sample timestamp outside 1970-2255"].count == 1


def test_several_untimed_scrapes_are_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, SCRAPE.format(n=1) + "\n" + SCRAPE.format(n=2) + "\n")
    with pytest.raises(InputError) as err:
        _ingest(path)
    assert str(err.value) == (
        'metrics.prom: several scrapes with no time (series vllm:num_requests_running{engine="0",'
        'model_name="m"} appears 2 times), so they cannot be placed in time; put a line '
        "`# oomtrace-scrape <ISO time>` (e.g. from `date -u +%FT%T.%3NZ`) before each scrape, "
        "or save one scrape per file"
    )


def test_data_parallel_engines_stay_separate_series(tmp_path: Path) -> None:
    text = (
        "# oomtrace-scrape 2025-03-14T09:00:00Z\n"
        'vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.99\n'
        'vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.20\n'
    )
    trace = _ingest(_write(tmp_path, text))
    assert_frame_equal(
        _rows(trace, "source"),
        _frame(
            [(T0, "kv_usage_ratio", 0.99), (T0, "kv_usage_ratio", 0.2)],
            ["prometheus:metrics.prom#engine=0", "prometheus:metrics.prom#engine=1"],
        ),
    )


def test_sglang_keeps_dp_ranks_apart_and_the_lowest_tp_rank(tmp_path: Path) -> None:
    trace = _ingest(_copy(tmp_path, "sglang_dp.prom"))
    rows = trace.samples.sort("source", "metric").select("metric", "value", "pid", "source")
    name = "prometheus:sglang_dp.prom"
    assert rows.rows() == [
        ("kv_tokens_total", 570979.0, None, f"{name}#dp_rank=0"),
        ("kv_usage_ratio", 0.91, None, f"{name}#dp_rank=0"),
        ("preemptions_in_interval", 3.0, 914, f"{name}#dp_rank=0"),
        ("kv_tokens_total", 570979.0, None, f"{name}#dp_rank=1"),
        ("kv_usage_ratio", 0.35, None, f"{name}#dp_rank=1"),
        ("preemptions_in_interval", 0.0, 915, f"{name}#dp_rank=1"),
    ]
    assert (
        trace.manifest.sources[0]
        .skipped["series of a further tp_rank (repeats the lowest rank)"]
        .count
        == 2
    )
    assert trace.manifest.engine_config == {"kv_cache_tokens": 570979}


def test_sglang_0_5_1_verbatim(tmp_path: Path) -> None:
    trace = _ingest(_copy(tmp_path, "sglang_0.5.1.prom"))
    assert dict(_rows(trace).select("metric", "value").iter_rows()) == {
        "generation_throughput_tokens_per_s": 0.8371284457403783,
        "kv_tokens_used": 1.0,
        "kv_usage_ratio": 0.0,
        "requests_running": 1.0,
    }


def test_tgi_reservation_is_not_occupancy(tmp_path: Path) -> None:
    trace = _ingest(_copy(tmp_path, "tgi.prom"))
    assert dict(_rows(trace).select("metric", "value").iter_rows()) == {
        "kv_tokens_total": 150000.0,
        "requests_running": 32.0,
        "requests_waiting": 7.0,
    }
    assert trace.manifest.engine_config == {"kv_cache_tokens": 150000}
    assert (
        "tgi_batch_current_max_tokens: tokens the current batch may grow to: a reservation, "
        "not occupied KV; not mapped" in _notes(trace)
    )
    assert any("tgi_request_count (1)" in n for n in _notes(trace))


def test_llamacpp_nan_is_counted_and_gauges_map(tmp_path: Path) -> None:
    trace = _ingest(_copy(tmp_path, "llamacpp_2024.prom"))
    assert dict(_rows(trace).select("metric", "value").iter_rows()) == {
        "kv_tokens_used": 2048.0,
        "kv_usage_ratio": 0.5,
        "prompt_throughput_tokens_per_s": 911.2,
        "requests_deferred": 2.0,
        "requests_running": 4.0,
    }
    nan = _write(tmp_path, "llamacpp:kv_cache_usage_ratio nan\nllamacpp:n_tokens_max 8190\n", "n")
    later = _ingest(nan)
    assert _rows(later)["metric"].to_list() == ["kv_tokens_max_seen"]
    assert (
        later.manifest.sources[0].skipped["NaN or infinite value (nothing measured yet)"].count == 1
    )


def test_dcgm_framebuffer_in_bytes_per_gpu_with_host_and_sentinels(tmp_path: Path) -> None:
    trace = _ingest(_copy(tmp_path, "dcgm_node.prom"))
    whole = trace.samples.filter(~pl.col("source").str.contains("#mig="))
    rows = whole.sort("device", "metric").select("device", "metric", "value")
    assert rows.rows() == [
        (0, "device_free_bytes", 6824.0 * MiB),
        (0, "device_reserved_bytes", 525.0 * MiB),
        (0, "device_used_bytes", 74210.0 * MiB),
        (1, "device_used_bytes", 1.0 * MiB),
    ]
    # GPU 1's MIG instance 2 is a part of it, kept apart by its source qualifier
    part = trace.samples.filter(pl.col("source").str.ends_with("#mig=2"))
    assert part.select("device", "metric", "value").rows() == [(1, "device_used_bytes", 0.0)]
    assert trace.manifest.nodes == ["gpu-node-7"]
    skipped = trace.manifest.sources[0].skipped
    assert skipped["DCGM blank value (the field has no data)"].count == 1


def test_dcgm_docs_verbatim_older_hostname_label(tmp_path: Path) -> None:
    trace = _ingest(_copy(tmp_path, "dcgm_mig_docs.prom"))
    assert trace.manifest.nodes == ["ub20-a100-k8s"]
    assert sorted(trace.samples["value"].to_list()) == [4845.0 * MiB, 35690.0 * MiB]


def test_a_gpu_s_only_mig_instance_stands_for_it(tmp_path: Path) -> None:
    text = 'DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-a",GPU_I_PROFILE="1g.5gb",GPU_I_ID="13"} 100\n'
    trace = _ingest(_write(tmp_path, text))
    assert trace.samples.select("device", "value").rows() == [(0, 100.0 * MiB)]
    assert "GPU 0: its only MIG instance 13 (1g.5gb) stands for the device" in _notes(trace)


def test_dcgm_uuid_places_nvidia_smi_process_rows(tmp_path: Path) -> None:
    # GIVEN a compute-apps CSV naming GPUs by UUID, and a DCGM scrape with gpu and UUID labels
    apps = _copy(tmp_path, "compute_apps.csv", DATA / "nvidia_smi")
    trace = _ingest(apps, _copy(tmp_path, "dcgm_node.prom"))
    procs = trace.samples.filter(pl.col("metric") == "process_used_bytes")
    assert procs["device"].to_list() == [0, 0]


def test_xid_changes_become_events(tmp_path: Path) -> None:
    line = 'DCGM_FI_DEV_XID_ERRORS{{gpu="0",UUID="GPU-a"}} {v}'
    text = _loop(
        [line.format(v=0), line.format(v=79), line.format(v=79)],
        ["1741942800", "1741942801", "1741942802"],
    )
    trace = _ingest(_write(tmp_path, text))
    assert trace.events.select("ts", "device", "kind", "detail").rows() == [
        (T0 + timedelta(seconds=1), 0, "xid", "Xid 79")
    ]


def test_cache_config_changes_are_noted_and_the_first_kept(tmp_path: Path) -> None:
    config = (
        'vllm:cache_config_info{{block_size="16",engine="0",kv_cache_max_concurrency="7.81",'
        'kv_cache_size_tokens="{tokens}",num_gpu_blocks="{blocks}",sliding_window="None"}} 1.0'
    )
    text = _loop(
        [config.format(tokens=432000, blocks=27000), config.format(tokens=320000, blocks=20000)],
        ["# oomtrace-scrape 2025-03-14T09:00:00Z", "# oomtrace-scrape 2025-03-14T09:05:00Z"],
    )
    trace = _ingest(_write(tmp_path, text))
    assert trace.manifest.engine_config == {
        "block_size": 16,
        "kv_cache_tokens": 432000,
        "max_concurrency": 7.81,
        "num_gpu_blocks": 27000,
    }
    assert (
        "vllm:cache_config_info differs at 2025-03-14T09:05:00.000Z (kv_cache_tokens, "
        "num_gpu_blocks: 432000 -> 320000, 27000 -> 20000); engine_config keeps the first"
    ) in _notes(trace)


def test_escaped_label_values_take_prometheus_client_s_path(tmp_path: Path) -> None:
    text = 'vllm:num_requests_running{engine="0",model_name="a \\"quoted\\" name"} 3\n'
    trace = _ingest(_write(tmp_path, text))
    assert trace.samples["value"].to_list() == [3.0]


def test_a_line_prometheus_client_refuses_is_counted(tmp_path: Path) -> None:
    text = "vllm:num_requests_running{engine=0} 3\nvllm:num_requests_waiting 4\n"
    trace = _ingest(_write(tmp_path, text))
    assert trace.samples["metric"].to_list() == ["requests_waiting"]
    skipped = trace.manifest.sources[0].skipped["sample line prometheus_client cannot parse"]
    assert skipped.example == "vllm:num_requests_running{engine=0} 3"


def test_gzip_concatenated_file(tmp_path: Path) -> None:
    text = _loop([SCRAPE.format(n=1), SCRAPE.format(n=2)], ["1741942800", "1741942801"])
    path = tmp_path / "loop.prom.gz"
    path.write_bytes(gzip.compress(text.encode()))
    assert _ingest(path).samples["value"].to_list() == [1.0, 2.0]


def test_parse_scrapes_is_the_file_path_s_code_path(tmp_path: Path) -> None:
    # GIVEN the same scrapes as the collector holds them and as a curl loop wrote them
    texts = [(PROM / "vllm_v1_0.11.prom").read_text(), (PROM / "dcgm_node.prom").read_text()]
    times = [T0, T0 + timedelta(seconds=1)]
    live = parse_scrapes(zip(times, texts, strict=True), SourceDiagnostics("live", "p", "n"))
    stamps = ["# oomtrace-scrape 2025-03-14T09:00:00Z", "# oomtrace-scrape 2025-03-14T09:00:01Z"]
    from_file = _ingest(_write(tmp_path, _loop(texts, stamps)))
    # THEN both give the same rows and engine config
    assert live.samples is not None
    assert_frame_equal(
        live.samples.select("ts", "device", "metric", "value").sort("ts", "device", "metric"),
        from_file.samples.select("ts", "device", "metric", "value").sort("ts", "device", "metric"),
    )
    assert live.engine_config == from_file.manifest.engine_config
    assert live.host == "gpu-node-7"


def test_parse_scrapes_in_small_batches_gives_the_same_rows() -> None:
    scrapes = [(T0 + timedelta(seconds=i), SCRAPE.format(n=i) + "\n") for i in range(50)]
    whole = parse_scrapes(scrapes, SourceDiagnostics("a", "p", "n"))
    batched = parse_scrapes(scrapes, SourceDiagnostics("b", "p", "n"), batch_chars=100)
    assert whole.samples is not None
    assert batched.samples is not None
    assert_frame_equal(whole.samples, batched.samples)
    assert whole.samples["value"].to_list() == [float(i) for i in range(50)]


def test_parse_scrapes_takes_epoch_nanoseconds_as_the_collector_records_them() -> None:
    ns = 1741942800_123456789
    result = parse_scrapes([(ns, SCRAPE.format(n=4) + "\n")], SourceDiagnostics("a", "p", "n"))
    assert result.samples is not None
    assert result.samples["ts"].dt.epoch("ns").to_list() == [ns]


def test_parse_scrapes_wants_aware_times() -> None:
    with pytest.raises(ValueError, match="has no time zone"):
        parse_scrapes([(datetime(2025, 3, 14), "x 1\n")], SourceDiagnostics("a", "p", "n"))


@pytest.mark.parametrize(
    ("head", "score"),
    [
        ("# oomtrace-scrape 2025-03-14T09:00:00Z\nvllm:x 1\n", 0.95),
        ("# HELP vllm:num_requests_running x\n# TYPE vllm:num_requests_running gauge\n", 0.9),
        ('DCGM_FI_DEV_FB_USED{gpu="0"} 4845\n', 0.8),
        ("llamacpp:kv_cache_usage_ratio nan\n", 0.8),
        ("timestamp, index, memory.used [MiB]\n", 0.0),
        ("INFO 09-22 23:46:42 metrics.py:367] Avg prompt throughput: 0.0 tokens/s\n", 0.0),
        ('{"status":"success","data":{"resultType":"matrix","result":[]}}', 0.0),
    ],
)
def test_sniffing(head: str, score: float) -> None:
    assert PARSER.sniff(head, "x") == score


def test_cli_ingests_and_refuses_with_one_line(tmp_path: Path) -> None:
    runner = CliRunner()
    ok = runner.invoke(
        cli, ["ingest", str(_copy(tmp_path, "dcgm_node.prom")), "--out", str(tmp_path / "t")]
    )
    assert ok.exit_code == 0, ok.output
    assert ok.output.startswith(f"wrote {tmp_path / 't'}: 5 samples, 0 request events, 0 events")
    bad = _write(tmp_path, SCRAPE.format(n=1) + "\n" + SCRAPE.format(n=2) + "\n", "bad.prom")
    refused = runner.invoke(cli, ["inspect", str(bad)])
    assert refused.exit_code == 2
    assert refused.stderr.startswith("oomtrace: error: bad.prom: several scrapes with no time")
    assert refused.stderr.count("\n") == 1
