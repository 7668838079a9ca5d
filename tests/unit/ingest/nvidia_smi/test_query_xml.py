"""``nvidia-smi -q -x`` reports as attached to public reports: per-GPU frame buffer memory
(total, reserved, used, free), the processes with pid, name and memory, each report at its
timestamp; a paste cut short keeps what came before the cut; MIG instances' own memory is set
aside."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from oomtrace.ingest import IngestOptions, ingest_paths
from tests.factories import file_at
from tests.unit.ingest.nvidia_smi.report_files import DATA, MTIME, MiB, ingest_report, metric_rows


def test_a_driver_515_report_of_a_t4_with_two_processes(tmp_path: Path) -> None:
    trace = ingest_report(tmp_path, "query-xml-515-t4.xml")
    at = datetime(2023, 4, 24, 16, 22, 39, tzinfo=UTC)
    assert metric_rows(trace, "device_total_bytes") == [(at, 0, None, 15360.0 * MiB)]
    assert metric_rows(trace, "device_reserved_bytes") == [(at, 0, None, 388.0 * MiB)]
    assert metric_rows(trace, "device_used_bytes") == [(at, 0, None, 1032.0 * MiB)]
    assert metric_rows(trace, "device_free_bytes") == [(at, 0, None, 13939.0 * MiB)]
    assert metric_rows(trace, "process_used_bytes") == [
        (at, 0, 675, 22.0 * MiB),
        (at, 0, 5762, 1005.0 * MiB),
    ]
    names = trace.events.filter(pl.col("kind") == "process").sort("pid")
    assert names.select("device", "pid", "detail").rows() == [
        (0, 675, "/usr/lib/xorg/Xorg"),
        (0, 5762, "python"),
    ]
    (diag,) = trace.manifest.sources
    assert diag.parser == "nvidia-smi-query"
    assert diag.lines_read == 348 == diag.lines_recognised + diag.lines_skipped
    assert diag.clock["tz_assumed"] is True


def test_the_time_is_local_time_read_in_the_zone_given(tmp_path: Path) -> None:
    trace = ingest_report(tmp_path, "query-xml-515-t4.xml", tz="America/New_York")
    (ts,) = {r[0] for r in metric_rows(trace, "device_used_bytes")}
    assert ts == datetime(2023, 4, 24, 20, 22, 39, tzinfo=UTC)  # 16:22:39 EDT


def test_a_paste_cut_short_keeps_what_came_before_the_cut(tmp_path: Path) -> None:
    # cut after the fourth of five processes, inside the GPU's element
    trace = ingest_report(tmp_path, "query-xml-536-wddm-cut.xml")
    assert [r[3] for r in metric_rows(trace, "device_used_bytes")] == [1128.0 * MiB]
    assert [r[2] for r in metric_rows(trace, "process_used_bytes")] == [835, 1481, 2214, 4044]
    (diag,) = trace.manifest.sources
    assert any("cut short" in note for note in diag.lost)
    assert diag.lines_read == diag.lines_recognised + diag.lines_skipped


def test_mig_instances_memory_is_set_aside_for_the_gpus_own(tmp_path: Path) -> None:
    trace = ingest_report(tmp_path, "query-xml-535-a100-mig.xml")
    assert [r[3] for r in metric_rows(trace, "device_total_bytes")] == [81920.0 * MiB]
    assert [r[3] for r in metric_rows(trace, "device_used_bytes")] == [50.0 * MiB]
    (diag,) = trace.manifest.sources
    assert diag.skipped["MIG instance's own memory (the GPU's is read)"].count == 4


def test_a_loop_of_reports_behind_a_prompt_is_a_series(tmp_path: Path) -> None:
    one = (DATA / "query-xml-515-t4.xml").read_text()
    two = one.replace("Mon Apr 24 16:22:39 2023", "Mon Apr 24 16:22:44 2023").replace(
        "<used>1032 MiB</used>", "<used>4 MiB</used>"
    )
    trace = ingest_report(tmp_path, "smi.xml", text="$ nvidia-smi -q -x -l 5\n" + one + two)
    at = datetime(2023, 4, 24, 16, 22, 39, tzinfo=UTC)
    assert metric_rows(trace, "device_used_bytes") == [
        (at, 0, None, 1032.0 * MiB),
        (at.replace(second=44), 0, None, 4.0 * MiB),
    ]


def test_the_bus_id_ties_the_index_to_rows_that_name_the_gpu_by_it(tmp_path: Path) -> None:
    report = file_at(tmp_path / "q.xml", MTIME, copy_of=DATA / "query-xml-515-t4.xml")
    apps = file_at(
        tmp_path / "apps.csv",
        MTIME,
        text="timestamp, gpu_bus_id, pid, used_gpu_memory [MiB]\n"
        "2023/04/24 16:22:40.000, 00000000:00:1E.0, 777, 100 MiB\n",
    )
    trace = ingest_paths([report, apps], IngestOptions())
    assert trace.samples.filter(pl.col("pid") == 777)["device"].to_list() == [0]


def test_a_damaged_byte_is_a_note_not_a_crash(tmp_path: Path) -> None:
    # found by tests/integration/test_fuzz.py: the pull parser queues the error among its events
    data = (DATA / "query-xml-515-t4.xml").read_bytes()
    (tmp_path / "smi.xml").write_bytes(data[:5] + bytes([data[5] ^ 1]) + data[6:])
    trace = ingest_paths([tmp_path / "smi.xml"], IngestOptions(format="nvidia-smi-query"))
    (diag,) = trace.manifest.sources
    assert any("damaged" in note for note in diag.lost)
