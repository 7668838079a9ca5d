"""nvidia-smi's default table, as pasted into bug reports: per-GPU memory used and total, the
process table with pids, names and memory, the time line above it, and the GPUs' bus ids."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from oomtrace.ingest import IngestOptions, ingest_paths, sniff
from oomtrace.ingest.nvidia_smi.table_parser import PARSER
from oomtrace.ingest.text.input_file import InputFile
from oomtrace.trace import Trace
from tests.factories import file_at

DATA = Path(__file__).resolve().parents[3] / "data" / "nvidia_smi"
MiB = 1 << 20
MTIME = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
TABLE_535 = (DATA / "table-535-five-gpus.txt").read_text()


def _copy(tmp_path: Path, name: str) -> Path:
    return file_at(tmp_path / name, MTIME, copy_of=DATA / name)


def _write(tmp_path: Path, text: str, name: str = "smi.txt") -> Path:
    return file_at(tmp_path / name, MTIME, text=text)


def _ingest(*paths: Path, **options: object) -> Trace:
    return ingest_paths(list(paths), IngestOptions(**options))  # type: ignore[arg-type]


def _rows(trace: Trace, metric: str) -> list[tuple[object, ...]]:
    frame = trace.samples.filter(pl.col("metric") == metric).sort("device", "pid")
    return frame.select("device", "pid", "value").rows()


def _names(trace: Trace) -> list[tuple[object, ...]]:
    events = trace.events.filter(pl.col("kind") == "process").sort("device", "pid")
    return events.select("device", "pid", "detail").rows()


def test_five_gpus_and_the_vllm_engine_on_gpu_4(tmp_path: Path) -> None:
    trace = _ingest(_copy(tmp_path, "table-535-five-gpus.txt"))
    assert set(trace.samples["ts"]) == {datetime(2026, 6, 25, 17, 26, 53, tzinfo=UTC)}
    assert _rows(trace, "device_total_bytes") == [
        (0, None, 40960.0 * MiB),
        (1, None, 40960.0 * MiB),
        (2, None, 40960.0 * MiB),
        (3, None, 4096.0 * MiB),
        (4, None, 40960.0 * MiB),
    ]
    assert [r[2] for r in _rows(trace, "device_used_bytes")] == [0, 0, 0, MiB, 39346.0 * MiB]
    assert _rows(trace, "process_used_bytes") == [(4, 3380462, 39336.0 * MiB)]
    assert _names(trace) == [(4, 3380462, "VLLM::EngineCore")]
    (diag,) = trace.manifest.sources
    assert diag.parser == "nvidia-smi-table"
    assert diag.lines_read == 36 == diag.lines_recognised + diag.lines_skipped
    assert diag.lines_recognised == 13  # time, header, 5 GPU rows, 5 memory lines, 1 process
    assert diag.clock["tz_assumed"] is True
    berlin = _ingest(_copy(tmp_path, "table-535-five-gpus.txt"), tz="Europe/Berlin")
    assert set(berlin.samples["ts"]) == {datetime(2026, 6, 25, 15, 26, 53, tzinfo=UTC)}


def test_unified_memory_gpu_states_no_memory_but_its_processes_do(tmp_path: Path) -> None:
    trace = _ingest(_copy(tmp_path, "table-580-gb10.txt"))
    assert _rows(trace, "device_used_bytes") == []
    assert _rows(trace, "process_used_bytes") == [
        (0, 2804, 179.0 * MiB),
        (0, 3060, 48.0 * MiB),
        (0, 2283430, 61383.0 * MiB),
    ]
    assert _names(trace) == [
        (0, 2804, "/usr/lib/xorg/Xorg"),
        (0, 3060, "/usr/bin/gnome-shell"),
        (0, 2283430, "VLLM::EngineCore"),
    ]
    (diag,) = trace.manifest.sources
    assert any("Not Supported" in n for n in diag.lost)


def test_an_indented_paste_without_a_time_line_keeps_its_figures_and_no_made_up_time(
    tmp_path: Path,
) -> None:
    trace = _ingest(_copy(tmp_path, "table-450-indented.txt"))
    # the figures are kept, un-timed (the file's modification time is no time of the incident)
    assert set(trace.samples["ts"]) == {None}
    assert set(trace.samples["clock"]) == {"untimed"}
    assert _rows(trace, "device_used_bytes") == [(0, None, 476.0 * MiB)]
    assert _names(trace)[2] == (0, 10163, "build/bin/cbnMD")
    (diag,) = trace.manifest.sources
    assert any("no made-up time" in n for n in diag.notes)
    assert diag.clock["status"] == "untimed"
    assert diag.lines_read == diag.lines_recognised + diag.lines_skipped


def test_a_memory_figure_cut_short_is_left_out_but_the_process_is_named(
    tmp_path: Path,
) -> None:
    # an H200 (143771MiB) table: the process memory did not fit its column
    trace = _ingest(_copy(tmp_path, "table-570-cut-memory.txt"))
    assert _rows(trace, "process_used_bytes") == []
    assert _names(trace) == [(0, 1117159, "VLLM::EngineCore")]
    assert _rows(trace, "device_total_bytes") == [(0, None, 143771.0 * MiB)]
    assert any("cut short" in n for n in trace.manifest.sources[0].lost)


def test_a_loop_of_tables_is_a_series_and_untimed_tables_are_not_invented(
    tmp_path: Path,
) -> None:
    later = TABLE_535.replace("Thu Jun 25 17:26:53 2026", "Thu Jun 25 17:26:58 2026").replace(
        "39336MiB", "40100MiB"
    )
    trace = _ingest(_write(tmp_path, TABLE_535 + later))
    assert trace.samples.filter(pl.col("pid") == 3380462).select("ts", "value").rows() == [
        (datetime(2026, 6, 25, 17, 26, 53, tzinfo=UTC), 39336.0 * MiB),
        (datetime(2026, 6, 25, 17, 26, 58, tzinfo=UTC), 40100.0 * MiB),
    ]
    assert _names(trace) == [(4, 3380462, "VLLM::EngineCore")]  # named once
    # a table without its time line among tables with one is left out, counted
    untimed = TABLE_535.split("\n", 1)[1]
    mixed = _ingest(_write(tmp_path, untimed.replace("39336MiB", "40100MiB") + TABLE_535, "m.txt"))
    assert mixed.samples.filter(pl.col("pid") == 3380462)["value"].to_list() == [39336.0 * MiB]
    (diag,) = mixed.manifest.sources
    assert any("among tables with one" in n for n in diag.lost)
    assert diag.skipped["row of a table with no time"].count == 11
    # tables without any time line keep their order, and no time
    two = _ingest(_write(tmp_path, untimed + untimed.replace("39336MiB", "40100MiB"), "two.txt"))
    engine = two.samples.filter(pl.col("pid") == 3380462)
    assert engine.select("ts", "value").rows() == [(None, 39336.0 * MiB), (None, 40100.0 * MiB)]


def test_a_table_ties_bus_ids_to_indexes_for_compute_apps_rows(tmp_path: Path) -> None:
    table = _copy(tmp_path, "table-535-five-gpus.txt")
    apps = _write(
        tmp_path,
        "timestamp, gpu_bus_id, pid, process_name, used_gpu_memory [MiB]\n"
        "2026/06/25 17:26:54.100, 00000000:C2:00.0, 3380462, VLLM::EngineCore, 39336 MiB\n",
        "apps.csv",
    )
    trace = _ingest(table, apps)
    rows = trace.samples.filter(pl.col("source").str.contains("apps.csv"))
    assert rows.select("device", "pid").rows() == [(4, 3380462)]
    names = trace.events.filter(pl.col("source").str.contains("apps.csv"))
    assert names.select("device", "pid", "detail").rows() == [(4, 3380462, "VLLM::EngineCore")]


def test_a_table_cut_before_its_process_headings_is_recognised_by_its_header_box(
    tmp_path: Path,
) -> None:
    # Driver versions have three parts (580.126.20); the process table's column headings, the
    # other thing sniffing knows a table by, were cut off with the rest of the paste.
    trace = _ingest(_copy(tmp_path, "table-580-no-process-rows.txt"))
    assert set(trace.samples["ts"]) == {datetime(2026, 9, 2, 9, 15, 53, tzinfo=UTC)}
    assert _rows(trace, "device_used_bytes") == [(0, None, 31956.0 * MiB)]
    assert _rows(trace, "device_total_bytes") == [(0, None, 40960.0 * MiB)]


def test_a_table_pasted_with_a_stray_quote_before_its_frame_is_read(tmp_path: Path) -> None:
    # https://github.com/PrimeIntellect-ai/verifiers/issues/85 pastes a driver 550 table opened
    # by a quote (`'+---`) and cut inside its second GPU row, before any process heading.
    text = (DATA / "table-580-no-process-rows.txt").read_text().replace("+---", "'+---", 1)
    trace = _ingest(_write(tmp_path, text))
    assert _rows(trace, "device_used_bytes") == [(0, None, 31956.0 * MiB)]


def test_a_table_quoted_in_a_reply_on_windows_is_read(tmp_path: Path) -> None:
    # https://github.com/PromtEngineer/localGPT/issues/14 quotes a driver 531 table (Windows:
    # TCC/WDDM, the power figure glued to the cell's border) with Markdown's "> " on every line
    trace = _ingest(_copy(tmp_path, "table-531-wddm-quoted.txt"))
    assert trace.manifest.sources[0].parser == "nvidia-smi-table"
    assert set(trace.samples["ts"]) == {datetime(2023, 5, 29, 12, 21, 8, tzinfo=UTC)}
    assert _rows(trace, "device_used_bytes") == [(0, None, 1585.0 * MiB)]
    assert _rows(trace, "device_total_bytes") == [(0, None, 11264.0 * MiB)]


def test_sniffing_steps_aside_for_a_table_inside_other_output(tmp_path: Path) -> None:
    table = _copy(tmp_path, "table-535-five-gpus.txt")
    assert PARSER.sniff(InputFile(table, table.name).head(), table.name) == 0.85
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    pasted = _write(tmp_path, "Traceback (most recent call last):\n" * 30 + oom + TABLE_535)
    chosen = sniff(InputFile(pasted, pasted.name), explicit=True)
    assert chosen.parser is not None
    assert chosen.parser.name == "pytorch-log"
