"""nvidia-smi CSV captures: --query-gpu and --query-compute-apps, with the mess real files have."""

from __future__ import annotations

import gzip
import shutil
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from oomtrace.cli import cli
from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.errors import InputError
from oomtrace.ingest import IngestOptions, ingest_paths
from oomtrace.ingest.nvidia_smi.csv_parser import PARSER, parse_header
from oomtrace.ingest.parser_api import ClockOptions, ParseContext
from oomtrace.ingest.text.input_file import InputFile
from oomtrace.trace import Trace

DATA = Path(__file__).resolve().parents[3] / "data" / "nvidia_smi"
MiB = 1 << 20
GPU0 = "GPU-34319582-d595-d1c7-d1d2-179bcfa61660"


def _ingest(tmp_path: Path, *names: str, **options: object) -> Trace:
    paths = []
    for name in names:
        target = tmp_path / name
        shutil.copy(DATA / name, target)
        paths.append(target)
    return ingest_paths(paths, IngestOptions(**options))  # type: ignore[arg-type]


def _csv(tmp_path: Path, text: str, name: str = "gpu.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _at(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=UTC)


def _expected(rows: list[tuple[str, int | None, int | None, str, int]]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "ts": [_at(r[0]) for r in rows],
            "device": [r[1] for r in rows],
            "pid": [r[2] for r in rows],
            "metric": [r[3] for r in rows],
            "value": [float(r[4]) for r in rows],
        },
        schema={
            "ts": pl.Datetime("ns", "UTC"),
            "device": pl.Int32,
            "pid": pl.Int64,
            "metric": pl.String,
            "value": pl.Float64,
        },
    )


def _rows(trace: Trace) -> pl.DataFrame:
    return trace.samples.select("ts", "device", "pid", "metric", "value").sort(
        "ts", "device", "pid", "metric", nulls_last=True
    )


def test_query_gpu_loop_gives_device_memory_in_bytes_per_gpu(tmp_path: Path) -> None:
    # GIVEN a looping --query-gpu capture with a repeated header, [N/A] values and an error line
    trace = _ingest(tmp_path, "query_gpu_loop.csv")
    # THEN every memory field becomes integer bytes on its device index
    first = _rows(trace).filter(pl.col("ts") == _at("2025-03-14 10:00:00.105"))
    assert_frame_equal(
        first,
        _expected(
            [
                ("2025-03-14 10:00:00.105", 0, None, "device_free_bytes", 6824 * MiB),
                ("2025-03-14 10:00:00.105", 0, None, "device_reserved_bytes", 525 * MiB),
                ("2025-03-14 10:00:00.105", 0, None, "device_total_bytes", 81559 * MiB),
                ("2025-03-14 10:00:00.105", 0, None, "device_used_bytes", 74210 * MiB),
            ]
        ),
    )
    # AND the rows after the repeated header are read, unavailable values left out and counted
    assert trace.samples.height == 5 * 4 - 2
    diag = trace.manifest.sources[0]
    assert diag.lines_read == 8
    assert diag.lines_recognised == 7  # two headers, five rows
    assert diag.skipped["not a row of the CSV header above it"].count == 1
    assert (
        "memory.reserved: 2 value(s) were [N/A], [Not Supported] or another unavailable state; "
        "left out" in diag.notes
    )
    assert "fields with no canonical metric, not used: utilization.gpu" in diag.notes
    # AND the parser tells these notes of data left out from its notes on how it read the file
    assert {diag.category(n) for n in diag.notes if "left out" in n or "not used" in n} == {"gap"}


def test_timestamps_are_utc_by_default_and_recorded_as_assumed(tmp_path: Path) -> None:
    trace = _ingest(tmp_path, "query_gpu_loop.csv")
    assert trace.manifest.clock == {"tz": "UTC", "tz_assumed": True}
    assert any(
        "local time without a zone; read as UTC" in n for n in trace.manifest.sources[0].notes
    )


def test_tz_places_local_timestamps(tmp_path: Path) -> None:
    trace = _ingest(tmp_path, "query_gpu_loop.csv", tz="Europe/Berlin")
    assert trace.samples["ts"].min() == _at("2025-03-14 09:00:00.105")
    assert trace.manifest.clock == {"tz": "Europe/Berlin", "tz_assumed": False}


def test_dst_fall_back_keeps_a_loop_monotonic_and_spring_gap_is_left_out(tmp_path: Path) -> None:
    # GIVEN a loop across the repeated hour of a fall-back, and a time inside a spring-forward gap
    path = _csv(
        tmp_path,
        "timestamp, index, memory.used [MiB]\n"
        "2025/10/26 02:30:00.000, 0, 1 MiB\n"
        "2025/10/26 02:59:59.000, 0, 2 MiB\n"
        "2025/10/26 02:00:01.000, 0, 3 MiB\n"
        "2025/03/30 02:30:00.000, 0, 4 MiB\n",
    )
    trace = ingest_paths([path], IngestOptions(tz="Europe/Berlin"))
    # THEN the rows after the clock went back take the later instant; the gap row is dropped
    assert _rows(trace)["ts"].to_list() == [
        _at("2025-10-26 00:30:00.000"),
        _at("2025-10-26 00:59:59.000"),
        _at("2025-10-26 01:00:01.000"),
    ]
    assert any("does not exist in Europe/Berlin" in n for n in trace.manifest.sources[0].notes)


def test_compute_apps_are_placed_on_devices_by_a_query_gpu_file_of_the_incident(
    tmp_path: Path,
) -> None:
    # GIVEN a compute-apps capture naming GPUs by UUID, and a query-gpu capture with index+uuid
    trace = _ingest(tmp_path, "compute_apps.csv", "query_gpu_loop.csv")
    # THEN the per-process rows land on the device the query-gpu file states for that UUID
    procs = _rows(trace).filter(pl.col("metric") == "process_used_bytes")
    assert_frame_equal(
        procs,
        _expected(
            [
                ("2025-03-14 10:00:00.110", 0, 3858903, "process_used_bytes", 72190 * MiB),
                ("2025-03-14 10:00:00.612", 0, 3858903, "process_used_bytes", 79014 * MiB),
            ]
        ),
    )
    apps = next(s for s in trace.manifest.sources if s.name == "compute_apps.csv")
    # AND the foreign process whose path holds a comma was read, its [N/A] memory counted
    assert apps.lines_recognised == 4
    assert any(n.startswith("used_gpu_memory: 1 value(s) were [N/A]") for n in apps.notes)


def test_compute_apps_alone_keep_device_unknown_with_a_note(tmp_path: Path) -> None:
    trace = _ingest(tmp_path, "compute_apps.csv")
    assert trace.samples["device"].null_count() == trace.samples.height == 2
    assert any(
        n.startswith(f"2 row(s) name their GPU only as {GPU0}, which no input")
        for n in trace.manifest.sources[0].notes
    )


def test_nounits_layouts_switching_in_one_file_are_read_with_their_header(tmp_path: Path) -> None:
    # GIVEN one file with three layouts (any field order, nounits) and a bus-id-only process row
    trace = _ingest(tmp_path, "nounits_mixed.csv")
    # THEN the process row is placed on device 0 by the same file's index/pci.bus_id layout
    assert_frame_equal(
        _rows(trace),
        _expected(
            [
                ("2025-03-14 10:00:00.105", 0, None, "device_used_bytes", 74210 * MiB),
                ("2025-03-14 10:00:00.110", 0, 3858903, "process_used_bytes", 72190 * MiB),
            ]
        ),
    )
    assert (
        "used_memory: values without a unit were read as MiB, nvidia-smi's memory unit"
        in trace.manifest.sources[0].notes
    )


def test_a_file_without_a_header_is_refused_with_the_remedy(tmp_path: Path) -> None:
    shutil.copy(DATA / "noheader.csv", tmp_path / "noheader.csv")
    with pytest.raises(InputError) as err:
        ingest_paths([tmp_path / "noheader.csv"], IngestOptions())
    assert str(err.value) == (
        "noheader.csv: nvidia-smi CSV without a header line (--format=csv,noheader), so its "
        "columns cannot be told apart; add the header line naming the queried fields in order "
        "(e.g. `timestamp, index, memory.used [MiB], memory.total [MiB]`) or re-run with "
        "--format=csv"
    )


def test_adding_the_field_list_as_header_makes_a_noheader_file_readable(tmp_path: Path) -> None:
    # GIVEN the verbatim csv,noheader,nounits row with the query's field list put on top
    row = (DATA / "noheader.csv").read_text()
    path = _csv(tmp_path, "timestamp,gpu_name,pid,process_name,used_gpu_memory\n" + row)
    trace = ingest_paths([path], IngestOptions())
    assert_frame_equal(
        _rows(trace),
        _expected([("2025-09-07 22:37:17.908", None, 1106871, "process_used_bytes", 23342 * MiB)]),
    )


def test_rows_without_a_timestamp_column_keep_their_order_and_no_made_up_time(
    tmp_path: Path,
) -> None:
    # a one-off query pasted in a report states no time: its figures are kept, un-timed
    shutil.copy(DATA / "apps_no_timestamp.csv", tmp_path / "apps.csv")
    trace = ingest_paths([tmp_path / "apps.csv"], IngestOptions())
    rows = trace.samples.sort("pid").select("ts", "pid", "metric", "value", "clock").rows()
    assert rows == [
        (None, 3858903, "process_used_bytes", 6265 * MiB, "untimed"),
        (None, 3880364, "process_used_bytes", 5530 * MiB, "untimed"),
    ]
    names = trace.events.filter(pl.col("kind") == "process").sort("pid")
    assert names.select("pid", "detail").rows() == [
        (3858903, "VLLM::EngineCore"),
        (3880364, "VLLM::EngineCore"),
    ]
    (diag,) = trace.manifest.sources
    assert any("no made-up time" in n for n in diag.notes)
    assert diag.lines_read == diag.lines_recognised + diag.lines_skipped


def test_a_pasted_query_without_timestamp_or_index_keeps_each_gpus_figures(
    tmp_path: Path,
) -> None:
    # https://github.com/aristocratos/bpytop/issues/26: the command (under `time`) and its output
    # on two GPUs, rewritten: no timestamp, no index, units on every value
    text = (
        "$ time nvidia-smi --query-gpu=gpu_name,memory.total,memory.used,utilization.gpu "
        "--format=csv\n"
        "name, memory.total [MiB], memory.used [MiB], utilization.gpu [%]\n"
        "GeForce GTX 1080 Ti, 11175 MiB, 2856 MiB, 36 %\n"
        "GeForce GTX 1060 6GB, 6078 MiB, 4 MiB, 0 %\n"
        "\nreal\t0m0,022s\n"
    )
    trace = ingest_paths([_csv(tmp_path, text)], IngestOptions())
    got = trace.samples.select("metric", "value").rows()
    assert got == [
        ("device_total_bytes", 11175 * MiB),
        ("device_used_bytes", 2856 * MiB),
        ("device_total_bytes", 6078 * MiB),
        ("device_used_bytes", 4 * MiB),
    ]
    assert set(trace.samples["clock"]) == {"untimed"}


def test_timeless_rows_beside_placeable_ones_are_left_out_with_a_note(tmp_path: Path) -> None:
    text = (DATA / "apps_no_timestamp.csv").read_text() + (DATA / "nounits_mixed.csv").read_text()
    trace = ingest_paths([_csv(tmp_path, text)], IngestOptions())
    assert trace.samples.height == 2
    assert any(
        n.startswith("2 row(s) under a header without `timestamp`")
        for n in (trace.manifest.sources[0].notes)
    )


def test_gzip_input_is_read_like_plain(tmp_path: Path) -> None:
    path = tmp_path / "gpu.csv.gz"
    path.write_bytes(gzip.compress((DATA / "query_gpu_loop.csv").read_bytes()))
    plain = _ingest(tmp_path, "query_gpu_loop.csv")
    packed = ingest_paths([path], IngestOptions())
    assert_frame_equal(_rows(packed), _rows(plain))


def test_rows_before_the_first_header_and_bad_timestamps_are_counted(tmp_path: Path) -> None:
    path = _csv(
        tmp_path,
        "2025/03/14 10:00:00.000, 0, 5 MiB\n"
        "timestamp, index, memory.used [MiB]\n"
        "14.03.2025 10:00, 0, 5 MiB\n"
        # a year no clock holds (found by tests/integration/test_fuzz.py: it crashed ingest)
        "-1/03/14 10:00:00.110, 0, 7 MiB\n"
        "2025/03/14 10:00:00.500, 0, 6 MiB\n",
    )
    trace = ingest_paths([path], IngestOptions())
    diag = trace.manifest.sources[0]
    assert trace.samples["value"].to_list() == [6.0 * MiB]
    assert diag.skipped["row before the first header line"].count == 1
    assert diag.skipped["timestamp not in nvidia-smi's YYYY/MM/DD HH:MM:SS.mmm form"].count == 2


def test_header_parsing_keeps_order_and_units() -> None:
    layout = parse_header("timestamp, memory.used [MiB], utilization.gpu [%], index")
    assert layout.fields == ("timestamp", "memory.used", "utilization.gpu", "index")
    assert layout.units == (None, "MiB", None, None)


@pytest.mark.parametrize(
    ("head", "score"),
    [
        ("timestamp, index, memory.used [MiB], memory.total [MiB]\n", 0.9),
        ("pid, process_name, used_gpu_memory [MiB]\n3858903, VLLM::EngineCore, 6265 MiB\n", 0.9),
        ("2025/09/07 22:37:17.908, NVIDIA GeForce RTX 3090, 1106871, /app/x, 23342\n", 0.6),
        ("INFO 09-22 23:46:42 metrics.py:367] Avg prompt throughput: 0.0 tokens/s\n", 0.0),
        ("# HELP vllm:num_requests_running x\nvllm:num_requests_running 1.0\n", 0.0),
    ],
)
def test_sniffing(head: str, score: float) -> None:
    assert PARSER.sniff(head, "x.csv") == score


def test_cli_ingest_and_the_refusal_message(tmp_path: Path) -> None:
    shutil.copy(DATA / "query_gpu_loop.csv", tmp_path / "gpu.csv")
    shutil.copy(DATA / "noheader.csv", tmp_path / "noheader.csv")
    runner = CliRunner()
    ok = runner.invoke(cli, ["ingest", str(tmp_path / "gpu.csv"), "--out", str(tmp_path / "t")])
    assert ok.exit_code == 0, ok.output
    assert ok.output.startswith(f"wrote {tmp_path / 't'}: 18 samples, 0 request events, 0 events")
    bad = runner.invoke(cli, ["inspect", str(tmp_path / "noheader.csv")])
    assert bad.exit_code == 2
    assert bad.stderr == (
        "oomtrace: error: noheader.csv: nvidia-smi CSV without a header line "
        "(--format=csv,noheader), so its columns cannot be told apart; add the header line naming "
        "the queried fields in order (e.g. `timestamp, index, memory.used [MiB], memory.total "
        "[MiB]`) or re-run with --format=csv\n"
    )


def _parse(path: Path) -> None:
    ctx = ParseContext(clock=ClockOptions(), mtime=datetime(2025, 1, 1, tzinfo=UTC))
    PARSER.parse(InputFile(path, path.name), ctx, SourceDiagnostics(path.name, PARSER.name, "n"))


@settings(max_examples=60, deadline=None)
@given(body=st.text(max_size=400))
def test_arbitrary_rows_under_a_header_never_raise(
    tmp_path_factory: pytest.TempPathFactory, body: str
) -> None:
    path = tmp_path_factory.mktemp("h") / "x.csv"
    path.write_text("timestamp, index, memory.used [MiB], pid\n" + body, encoding="utf-8")
    _parse(path)


@settings(max_examples=60, deadline=None)
@given(data=st.binary(max_size=400))
def test_arbitrary_bytes_only_ever_raise_the_refusal(
    tmp_path_factory: pytest.TempPathFactory, data: bytes
) -> None:
    path = tmp_path_factory.mktemp("b") / "x.csv"
    path.write_bytes(data)
    message = ""
    try:
        _parse(path)
    except InputError as err:
        message = str(err)
    assert not message or "header line" in message or "no timestamp column" in message


def test_compute_apps_name_their_processes_in_process_events(tmp_path: Path) -> None:
    trace = _ingest(tmp_path, "compute_apps.csv", "query_gpu_loop.csv")
    names = trace.events.filter(pl.col("kind") == "process").sort("pid")
    # one event per process and name, at its first row; the foreign process is named even
    # though its memory was [N/A], its comma-holding path kept whole
    assert names.select("device", "pid", "detail").rows() == [
        (0, 3858903, "VLLM::EngineCore"),
        (1, 3880364, "/opt/tools/render, v2/bin/python"),
    ]
    assert names["ts"].to_list() == [_at("2025-03-14 10:00:00.110")] * 2


def test_a_uuid_nothing_ties_is_the_only_gpu_the_incident_shows(tmp_path: Path) -> None:
    # GIVEN compute-apps rows naming one GPU by UUID, and a query-gpu loop that lists one GPU by
    # index only (no uuid column): the node has one GPU, so the UUID can only be that one
    apps = tmp_path / "apps.csv"
    apps.write_text(
        "timestamp, gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n"
        f"2025/03/14 10:00:00.110, {GPU0}, 3858903, VLLM::EngineCore, 72190 MiB\n"
    )
    gpu = tmp_path / "gpu.csv"
    gpu.write_text(
        "timestamp, index, memory.used [MiB], memory.total [MiB]\n"
        "2025/03/14 10:00:00.100, 0, 73000 MiB, 81559 MiB\n"
    )
    trace = ingest_paths([apps, gpu], IngestOptions())
    procs = trace.samples.filter(pl.col("metric") == "process_used_bytes")
    assert procs["device"].to_list() == [0]
    notes = next(s for s in trace.manifest.sources if s.name == "apps.csv").notes
    assert any(n.startswith(f"GPU {GPU0} is taken for device 0") for n in notes)
    # WHEN the listing shows two GPUs THEN the UUID stays unplaced, with the remedy
    gpu.write_text(gpu.read_text() + "2025/03/14 10:00:00.100, 1, 10 MiB, 81559 MiB\n")
    two = ingest_paths([apps, gpu], IngestOptions())
    assert two.samples.filter(pl.col("metric") == "process_used_bytes")["device"].to_list() == [
        None
    ]


def test_a_uuid_other_than_the_one_gpus_own_is_not_placed_on_it(tmp_path: Path) -> None:
    apps = tmp_path / "apps.csv"
    apps.write_text(
        "timestamp, gpu_uuid, pid, used_gpu_memory [MiB]\n"
        "2025/03/14 10:00:00.110, GPU-ffffffff-0000-0000-0000-000000000000, 41, 100 MiB\n"
    )
    gpu = tmp_path / "gpu.csv"
    gpu.write_text(
        "timestamp, index, uuid, memory.used [MiB]\n"
        f"2025/03/14 10:00:00.100, 0, {GPU0}, 73000 MiB\n"
    )
    trace = ingest_paths([apps, gpu], IngestOptions())
    assert trace.samples.filter(pl.col("pid") == 41)["device"].to_list() == [None]
