"""Each source keeps its own clock record: one input's assumed zone is never attributed to
another input whose times carried their zone."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

from oomtrace.analysis.gaps import manifest_gaps
from oomtrace.diagnostics import clock_sentence
from oomtrace.ingest import IngestOptions, ingest_paths

STATS = (
    "Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, "
    "Running: {r} reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0%, Prefix cache hit rate: 0.0%"
)
GPU_CSV = (
    "timestamp, index, memory.used [MiB], memory.total [MiB]\n"
    "2025/03/14 13:57:41.208, 0, 100 MiB, 23028 MiB\n"
    "2025/03/14 13:57:46.211, 0, 200 MiB, 23028 MiB\n"
)


def _write_vllm(path: Path, *, prefix: bool) -> Path:
    lines = []
    for i, second in enumerate((50, 51, 52)):
        line = f"INFO 03-14 13:58:{second} [loggers.py:236] {STATS.format(r=i)}"
        if prefix:  # kubectl logs --timestamps: RFC 3339 in UTC, with its Z
            line = f"2025-03-14T13:58:{second}.417181339Z {line}"
        lines.append(line)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    mtime = datetime(2025, 3, 14, 14, 0, tzinfo=UTC).timestamp()
    os.utime(path, (mtime, mtime))
    return path


def test_a_kubectl_prefixed_log_is_not_assumed_utc_beside_a_zoneless_csv(tmp_path: Path) -> None:
    # GIVEN a vLLM log read through kubectl's RFC 3339 prefix and an nvidia-smi CSV with no zone,
    # which saw nothing the log saw (two samples before the engine logged anything)
    log = _write_vllm(tmp_path / "vllm.log", prefix=True)
    (tmp_path / "gpu.csv").write_text(GPU_CSV, encoding="utf-8")
    # WHEN both are ingested together
    trace = ingest_paths([log, tmp_path / "gpu.csv"], IngestOptions())
    # THEN each source states its own clock: only the CSV's zone is assumed, and with nothing
    # to align it by, it is set apart
    clocks = {s.name: s.clock for s in trace.manifest.sources}
    assert clocks["vllm.log"]["tz_assumed"] is False
    assert clocks["vllm.log"]["tz_source"] == "kubectl/docker timestamps"
    assert clocks["vllm.log"]["status"] == "stated"
    csv = clocks["gpu.csv"]
    assert (csv["tz"], csv["tz_assumed"], csv["tz_source"]) == ("UTC", True, "default")
    assert (csv["status"], csv["remedy"]) == ("unaligned", "pass --tz ZONE to place it")
    # AND the analysis states the log's clock in one sentence, and sets the CSV apart with the
    # remedy (a gap, not an assumption)
    gaps = [(g.kind, g.source, g.detail) for g in manifest_gaps(trace.manifest)]
    assert [g for g in gaps if g[0] in ("clock", "unaligned")] == [
        (
            "clock",
            "vllm.log",
            (
                "times from the kubectl/docker timestamps, which state their zone; "
                "year from the same timestamps"
            ),
        ),
        (
            "unaligned",
            "gpu.csv",
            (
                "gpu.csv: not aligned in time with vllm.log (nothing was seen by both at the 1 "
                "zone offset candidate where their times overlap); its rows are kept but left "
                "out of the timeline: pass --tz ZONE to place it"
            ),
        ),
    ]
    # AND sources disagreeing on the clock is not a diagnostic
    assert not any("clock." in note for s in trace.manifest.sources for note in s.notes)


def test_tz_and_year_options_are_named_as_the_clock(tmp_path: Path) -> None:
    log = _write_vllm(tmp_path / "vllm.log", prefix=False)
    trace = ingest_paths([log], IngestOptions(tz="Europe/Berlin", year=2025))
    (source,) = trace.manifest.sources
    assert clock_sentence(source.clock) == (
        "local times read in Europe/Berlin (--tz); year 2025 from --year"
    )


def test_a_zoneless_yearless_log_is_read_as_utc_in_the_year_of_its_file_time(
    tmp_path: Path,
) -> None:
    log = _write_vllm(tmp_path / "vllm.log", prefix=False)
    (source,) = ingest_paths([log], IngestOptions()).manifest.sources
    assert source.clock["tz_assumed"] is True
    assert clock_sentence(source.clock) == (
        "read as UTC because the log states no zone (pass --tz ZONE); "
        "year 2025 from the file's modification time (pass --year if wrong)"
    )


def test_an_nvidia_smi_csv_read_in_a_given_zone_says_so(tmp_path: Path) -> None:
    (tmp_path / "gpu.csv").write_text(GPU_CSV, encoding="utf-8")
    trace = ingest_paths([tmp_path / "gpu.csv"], IngestOptions(tz="Asia/Tokyo"))
    (source,) = trace.manifest.sources
    assert clock_sentence(source.clock) == "local times read in Asia/Tokyo (--tz)"
