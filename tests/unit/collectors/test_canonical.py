"""What the collectors write is canonical: every sample and event read back from a capture
conforms to the analyzer's schema (vocabulary, types, whole-number bytes)."""

from __future__ import annotations

import threading
from pathlib import Path

import polars as pl

from collectors.nvml import NvmlSource
from collectors.schedule import Schedule, SourceRunner
from collectors.segments import read_capture
from collectors.torch_hook.source import TorchSource
from oomtrace.schema import conform
from tests.unit.collectors.factories import writer
from tests.unit.collectors.test_nvml import FakeNvml, Proc
from tests.unit.collectors.test_torch_hook import Allocator

GiB = 1 << 30


def frame(columns: dict[str, list[object]]) -> pl.DataFrame:
    """The ingest adapter's conversion: ``ts_ns`` integers to UTC timestamps."""
    return (
        pl.DataFrame(columns, schema_overrides={"device": pl.Int32, "pid": pl.Int64})
        .with_columns(
            pl.from_epoch("ts_ns", time_unit="ns").dt.replace_time_zone("UTC").alias("ts")
        )
        .drop("ts_ns")
    )


def test_samples_events_gaps_and_health_conform_to_the_canonical_tables(tmp_path: Path) -> None:
    # GIVEN a capture with NVML and PyTorch samples, an OOM, a gap and health records
    w = writer(tmp_path)
    NvmlSource(
        w, write_interval_s=0.1, nvml=FakeNvml(used=[3 * GiB], processes=[[Proc(9, GiB)]])
    ).poll(1)
    allocator = Allocator()
    allocator.alloc(GiB)
    torch = TorchSource(allocator, w)
    torch.poll(2)
    allocator.oom(2 * GiB)
    gap = {
        "k": "gap",
        "ts": 3,
        "end": 5,
        "src": "collector.prometheus",
        "target": "u",
        "reason": "FetchError: HTTP 500",
        "attempts": 1,
    }
    w.append(gap)
    w.append(SourceRunner(torch, Schedule(1.0), w, threading.Event()).health(4))
    w.close()
    # WHEN read back and converted THEN both tables pass the schema's checks
    result = read_capture(tmp_path)
    samples = conform("samples", frame(result.samples.as_dict()), what="capture")
    events = conform("events", frame(result.events.as_dict()), what="capture")
    assert set(samples["metric"]) >= {
        "device_used_peak_bytes",
        "process_used_bytes",
        "torch_reserved_peak_bytes",
        "collector_up",
    }
    assert sorted(events["kind"]) == ["oom", "source_gap"]
