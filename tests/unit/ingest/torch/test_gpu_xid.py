"""The NVIDIA driver's Xid reports in a kernel log (dmesg, journalctl -k): each an ``xid`` event
with its number, the GPU's PCI address (placed on a device where another input ties it to an
index) and the process the driver names; a GPU fallen off the bus without an Xid line is Xid
79, once per GPU."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from oomtrace.ingest import IngestOptions, ingest_paths
from oomtrace.trace import Trace
from tests.factories import file_at

DATA = Path(__file__).resolve().parents[3] / "data" / "torch"
MTIME = datetime(2026, 5, 18, 12, 0, tzinfo=UTC)


def _ingest(tmp_path: Path, *files: tuple[str, str | None], **options: object) -> Trace:
    paths = [
        file_at(tmp_path / name, MTIME, text=text)
        if text
        else file_at(tmp_path / name, MTIME, copy_of=DATA / name)
        for name, text in files
    ]
    return ingest_paths(paths, IngestOptions(**options))  # type: ignore[arg-type]


def _xids(trace: Trace) -> list[tuple[object, ...]]:
    frame = trace.events.filter(pl.col("kind") == "xid")
    return frame.select("pid", pl.col("detail").str.extract(r"^Xid (\d+)", 1)).rows()


def test_an_mmu_fault_and_the_channels_torn_down_after_it(tmp_path: Path) -> None:
    trace = _ingest(tmp_path, ("dmesg-xid-31-62-45.log", None))
    assert _xids(trace) == [(13332, "31"), (None, "62"), (None, "45"), (None, "45")]
    first = trace.events.filter(pl.col("kind") == "xid")["detail"][0]
    assert "process 13332 (cuda_plot_k32_v)" in first
    assert "MMU Fault" in first
    (diag,) = trace.manifest.sources
    assert diag.parser == "pytorch-log"
    assert diag.lines_read == 5 == diag.lines_recognised + diag.lines_skipped
    # dmesg's "[14328.198504]" is time since boot, no time of day: the events keep their order
    assert trace.events["ts"].null_count() == trace.events.height


def test_a_gpu_fallen_off_the_bus_over_three_lines_is_xid_79(tmp_path: Path) -> None:
    trace = _ingest(tmp_path, ("dmesg-570-fallen-off-bus.log", None))
    assert _xids(trace) == [(None, "79")]
    assert "0000:b3:00.0" in trace.events["detail"][0]


def test_lines_of_one_width_behind_kernel_are_no_folded_record(tmp_path: Path) -> None:
    # https://github.com/NVIDIA/open-gpu-kernel-modules/issues/1150: four lines of one width
    text = "".join(
        f"kernel: NVRM: Xid (PCI:0000:{bus}:00): 45, pid={pid}, name=python3, Ch 0000000{ch} "
        f"caused by previous Xid 145\n"
        for bus, pid, ch in (("ed", 1818992, "c"), ("ba", 1818989, "2"), ("97", 1818987, "3"))
    )
    trace = _ingest(tmp_path, ("kern.log", text))
    assert [pid for pid, _ in _xids(trace)] == [1818992, 1818989, 1818987]


def test_the_bus_address_places_the_gpu_and_syslog_gives_the_time(tmp_path: Path) -> None:
    # https://github.com/tinygrad/tinygrad/issues/6947's fault, behind a syslog prefix
    log = (
        "Oct 13 09:41:02 box kernel: NVRM: Xid (PCI:0000:01:00): 31, pid=14292, name=python, "
        "Ch 00000030, intr 00000000. MMU Fault: ENGINE HOST0 HUBCLIENT_ESC faulted @ "
        "0x10_00200000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ\n"
    )
    smi = (
        "timestamp, index, pci.bus_id, memory.used [MiB]\n"
        "2024/10/13 09:41:01.000, 0, 00000000:01:00.0, 23000 MiB\n"
    )
    trace = _ingest(tmp_path, ("kern.log", log), ("smi.csv", smi), year=2024)
    (row,) = trace.events.filter(pl.col("kind") == "xid").rows(named=True)
    assert (row["device"], row["pid"]) == (0, 14292)
    assert row["ts"] == datetime(2024, 10, 13, 9, 41, 2, tzinfo=UTC)
