"""The inputs of one incident on one clock: a year-less or zone-less log is moved to where its
moments meet those of an input that states its times, or set apart with the remedy; a log
without times is anchored to another input's failure, or kept without a time.

Each test writes one incident's files in their real formats (``incident_files``) from a known
truth, then checks that every inferred year and offset is the true one, so that a wrong year, a
wrong zone or a join of inputs that do not overlap fails here.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import polars as pl
from click.testing import CliRunner

from oomtrace.analysis import analyze
from oomtrace.cli import cli
from oomtrace.ingest import IngestOptions, ingest_paths
from oomtrace.trace import Trace
from tests.unit.ingest.alignment.incident_files import (
    Life,
    Truth,
    checked_out,
    dcgm_query_json,
    llama_cpp_log,
    nvidia_smi_csv,
    sglang_log,
    sglang_scrapes,
    ticks,
    vllm_v0_log,
    vllm_v0_query_json,
    vllm_v1_log,
)

START = datetime(2025, 5, 6, 15, 2, 41, tzinfo=UTC)


def _clock(trace: Trace, name: str) -> dict[str, object]:
    return next(s.clock for s in trace.manifest.sources if s.name == name)


def _run(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def _engine_on_gpu(truth: Truth) -> list[Life]:
    """The engine core appears 12 s after its start with its budget and is gone 3 s after the
    OOM; a notebook's process holds 1.2 GiB all along."""
    return [
        Life(51377, "/home/mchen/.venv/bin/python", START - timedelta(hours=1), None, 1268),
        Life(48291, "VLLM::EngineCore", truth.start + timedelta(seconds=12),
             truth.end + timedelta(seconds=3), 34641),
    ]  # fmt: skip


def _year_less_incident(tmp_path: Path, zone: str) -> tuple[Truth, Path, Path]:
    """A vLLM 0.10 log (no year, no zone) and the host's nvidia-smi loop, both in ``zone``,
    checked out of git (modification time 2026-12-02)."""
    truth = Truth(START, seconds=600)
    log = vllm_v1_log(tmp_path / "vllm.log", truth, zone)
    first, last = truth.serving + timedelta(seconds=300), truth.end + timedelta(seconds=30)
    csv = nvidia_smi_csv(tmp_path / "gpu.csv", _engine_on_gpu(truth), first, last, zone)
    checked_out(log, csv)
    return truth, log, csv


def test_a_year_less_log_takes_the_year_of_the_nvidia_smi_csv_not_of_its_file(
    tmp_path: Path,
) -> None:
    # GIVEN a vLLM log and an nvidia-smi CSV of May 2025, both checked out in December 2026
    truth, _, _ = _year_less_incident(tmp_path, "America/Chicago")
    # WHEN they are ingested together without --year or --tz
    trace = ingest_paths([tmp_path], IngestOptions())
    # THEN the log's OOM is in 2025, where the engine's memory left the GPU 3 s later, not in
    # 2026 (the files' modification time)
    oom = trace.events.filter(pl.col("kind") == "oom")
    printed = truth.end.astimezone(ZoneInfo("America/Chicago")).replace(tzinfo=UTC)
    assert oom["ts"].to_list() == [printed]  # both inputs read as UTC: one clock, zone assumed
    clock = _clock(trace, f"{tmp_path.name}/vllm.log")
    assert (clock["status"], clock["year"], clock["year_source"]) == ("aligned", 2025, "aligned")
    assert clock["utc_offset"] == "+00:00"  # the same host: the same zone as the CSV
    assert clock["aligned_with"] == ["gpu.csv"]
    assert any("the memory drop on GPU 0" in e for e in clock["evidence"])  # type: ignore[attr-defined]
    assert not any("--year" in n for s in trace.manifest.sources for n in s.notes)
    # AND the analysis sees minutes, not a year
    findings = analyze(trace)
    assert findings.trace.end - findings.trace.start < timedelta(hours=1)  # type: ignore[operator]
    assert findings.incidents[0].peak_ts == printed


def test_a_zone_less_sglang_log_moves_to_the_offset_its_token_counts_agree_at(
    tmp_path: Path,
) -> None:
    # GIVEN SGLang's log printed in Los Angeles (PDT, UTC-07:00) and its scrapes in UTC
    truth = Truth(START, seconds=900, oom=False)
    sglang_log(tmp_path / "sglang.log", truth, "America/Los_Angeles")
    sglang_scrapes(tmp_path / "metrics.prom", truth)
    # WHEN they are ingested without --tz
    trace = ingest_paths([tmp_path], IngestOptions())
    # THEN the log's times move by seven hours, with strong agreement on its series
    clock = _clock(trace, f"{tmp_path.name}/sglang.log")
    assert (clock["status"], clock["utc_offset"], clock["tz_source"]) == (
        "aligned",
        "-07:00",
        "aligned",
    )
    assert clock["agreement"] == "strong"
    assert any(str(e).startswith("kv_tokens_used agrees") for e in clock["evidence"])  # type: ignore[attr-defined]
    tokens = trace.samples.filter(
        (pl.col("metric") == "kv_tokens_used") & pl.col("source").str.starts_with("sglang-log")
    )
    assert tokens.row(0, named=True)["ts"] == truth.serving  # the first decode line, in UTC
    assert tokens.row(0, named=True)["value"] == int(truth.kv[0] * 31_864)
    # AND with --tz the zone is the option's: every row at the same instant
    stated = ingest_paths([tmp_path], IngestOptions(tz="America/Los_Angeles"))
    assert _clock(stated, f"{tmp_path.name}/sglang.log")["status"] == "stated"
    assert stated.samples["ts"].to_list() == trace.samples["ts"].to_list()


def test_quarter_hour_zones_are_candidates(tmp_path: Path) -> None:
    # GIVEN SGLang's log printed in Kathmandu (UTC+05:45)
    truth = Truth(START, seconds=600, oom=False, seed=11)
    sglang_log(tmp_path / "sglang.log", truth, "Asia/Kathmandu")
    sglang_scrapes(tmp_path / "metrics.prom", truth)
    trace = ingest_paths([tmp_path], IngestOptions())
    # THEN the offset found is the quarter hour, not the nearest whole hour
    assert _clock(trace, f"{tmp_path.name}/sglang.log")["utc_offset"] == "+05:45"


def test_year_and_half_hour_zone_of_a_v0_log_from_a_prometheus_export(tmp_path: Path) -> None:
    # GIVEN a vLLM 0.6 V0 log (CRLF line ends) printed in India (UTC+05:30) with no year, and
    # a Prometheus export of its gauges (old names) in epoch seconds; the log checked out later
    truth = Truth(datetime(2024, 12, 30, 21, 40, tzinfo=UTC), seconds=900, oom=False, seed=3)
    log = vllm_v0_log(tmp_path / "vllm.log", truth, "Asia/Kolkata")
    vllm_v0_query_json(tmp_path / "prometheus.json", truth)
    checked_out(log)
    # WHEN ingested without --year or --tz
    trace = ingest_paths([tmp_path], IngestOptions())
    # THEN the log is placed in 2024 at UTC+05:30 (its last lines print 12-31 03:..)
    clock = _clock(trace, f"{tmp_path.name}/vllm.log")
    assert (clock["year"], clock["utc_offset"]) == (2024, "+05:30")
    kv = trace.samples.filter(
        (pl.col("metric") == "kv_usage_ratio") & pl.col("source").str.starts_with("vllm-log")
    )
    assert kv["ts"][0] == truth.serving
    assert kv["clock"].unique().to_list() == ["aligned"]


def test_inputs_that_meet_at_no_candidate_are_not_joined_and_every_command_says_so(
    tmp_path: Path,
) -> None:
    # GIVEN a vLLM log of May 6 and an nvidia-smi CSV someone took on May 9
    truth = Truth(START, seconds=600)
    vllm_v1_log(tmp_path / "vllm.log", truth, "UTC")
    later = truth.end + timedelta(days=3)
    nvidia_smi_csv(
        tmp_path / "gpu.csv", _engine_on_gpu(truth), later, later + timedelta(minutes=5), "UTC"
    )
    # WHEN ingested
    trace = ingest_paths([tmp_path], IngestOptions())
    # THEN the log is kept but flagged, with the reason and the remedy
    clock = _clock(trace, f"{tmp_path.name}/vllm.log")
    assert clock["status"] == "unaligned"
    assert "at no candidate year or zone offset" in str(clock["reason"])
    assert clock["remedy"] == "pass --year YEAR and/or --tz ZONE to place it"
    assert trace.requests.height == 0 or set(trace.samples["clock"].unique()) == {
        "unaligned",
        "assumed",
    }
    # (nvidia-smi's process events, which name the processes, are the CSV's)
    logged = trace.events.filter(pl.col("kind") != "process")
    assert set(logged["clock"].to_list()) == {"unaligned"}
    # AND the analysis does not join them: the log's OOM is no incident, the span is the CSV's
    findings = analyze(trace)
    assert all(i.anchor != "oom" for i in findings.incidents)
    assert findings.trace.start >= later  # type: ignore[operator]
    # AND the first lines of analyze, report and ingest say so
    warning = f"{tmp_path.name}/vllm.log: not aligned in time with gpu.csv"
    assert _run("analyze", str(tmp_path)).splitlines()[1].startswith(f"WARNING  {warning}")
    report = _run("report", str(tmp_path), "--format", "text").splitlines()
    first = next(i for i, line in enumerate(report) if line.startswith("WARNING"))
    assert report[first].startswith(f"WARNING: {warning}")
    assert first < report.index("VERDICT")
    doc = json.loads(_run("report", str(tmp_path), "--format", "json"))
    assert doc["alerts"][0].startswith(warning)
    out = tmp_path / "out.md"
    _run("report", str(tmp_path), "-o", str(out))
    assert f"> **Warning:** {warning}" in out.read_text(encoding="utf-8")
    ingested = _run("ingest", str(tmp_path), "-o", str(tmp_path.parent / "trace"))
    assert ingested.splitlines()[0].startswith(f"WARNING  {warning}")
    # AND --year and --tz place it: nothing is set apart
    given = ingest_paths([tmp_path], IngestOptions(year=2025, tz="UTC"))
    assert {s.clock.get("status") for s in given.manifest.sources} == {"stated"}


def test_a_crash_loop_an_hour_apart_gives_no_evidence_to_choose(tmp_path: Path) -> None:
    # GIVEN a vLLM log of one attempt (year given, zone not), and DCGM's memory series of a
    # crash loop that started the engine at every hour, each attempt dying 20 minutes in
    truth = Truth(START, seconds=1100)
    vllm_v1_log(tmp_path / "vllm.log", truth, "America/New_York")
    lives = [
        Life(100 + h, "python", truth.start + timedelta(hours=h, seconds=12),
             truth.end + timedelta(hours=h, seconds=3), 34641)
        for h in (-1, 0, 1)
    ]  # fmt: skip
    dcgm_query_json(
        tmp_path / "dcgm.json",
        lives,
        START - timedelta(hours=1, minutes=5),
        START + timedelta(hours=2),
    )
    # WHEN ingested with --year (the zone left to inference)
    trace = ingest_paths([tmp_path], IngestOptions(year=2025))
    # THEN three offsets an hour apart agree equally: the log is set apart, not guessed
    clock = _clock(trace, f"{tmp_path.name}/vllm.log")
    assert clock["status"] == "unaligned"
    assert str(clock["reason"]).startswith("two candidates agree about equally (offset ")
    assert clock["remedy"] == "pass --tz ZONE to place it"
    # AND with --tz the log is stated and joined where it belongs
    placed = ingest_paths([tmp_path], IngestOptions(year=2025, tz="America/New_York"))
    oom = placed.events.filter(pl.col("kind") == "oom")
    assert oom["ts"].to_list() == [truth.end]


def _llama_incident(tmp_path: Path, failures: int) -> tuple[Path, list[Life]]:
    """llama-server's timeless log and the host's nvidia-smi loop: the server loads its weights
    and KV cache, fails to allocate its compute buffer and exits, ``failures`` times."""
    server = "/opt/llama.cpp/build/bin/llama-server"
    lives = [
        Life(9000 + i, server, START + timedelta(minutes=3 * i, seconds=5),
             START + timedelta(minutes=3 * i, seconds=71), 39109)
        for i in range(failures)
    ]  # fmt: skip
    llama_cpp_log(tmp_path / "llama-server.log", failures)
    nvidia_smi_csv(
        tmp_path / "gpu.csv", lives, START, START + timedelta(minutes=3 * failures), "UTC"
    )
    checked_out(tmp_path / "llama-server.log")
    return tmp_path, lives


def test_a_timeless_llama_cpp_log_is_anchored_by_its_oom_to_the_memory_drop(
    tmp_path: Path,
) -> None:
    # GIVEN llama.cpp's default log (no time on any line) and nvidia-smi showing the server's
    # memory leaving the GPU once
    folder, lives = _llama_incident(tmp_path, failures=1)
    # WHEN ingested together
    trace = ingest_paths([folder], IngestOptions())
    # THEN the OOM is placed at the last sample that still saw the server's memory, and says so
    (row,) = trace.events.filter(pl.col("kind") == "oom").to_dicts()
    last_held = [t for t in ticks(START, START + timedelta(minutes=3)) if t < lives[0].down][-1]
    assert (row["ts"], row["clock"], row["requested_bytes"]) == (last_held, "anchored", 1104 << 20)
    clock = _clock(trace, f"{tmp_path.name}/llama-server.log")
    assert clock["status"] == "anchored"
    (anchor,) = clock["anchors"]  # type: ignore[misc]
    assert anchor.startswith("the OOM (line 67) placed at the memory drop on GPU 0")
    # AND the analysis finds the incident there, with the memory nvidia-smi saw
    incident = analyze(trace).incidents[0]
    assert (incident.anchor, incident.peak_ts) == ("oom", last_held)


def test_a_timeless_oom_two_drops_could_be_stays_untimed_and_is_not_joined(
    tmp_path: Path,
) -> None:
    # GIVEN one failure in llama.cpp's log but two memory drops in nvidia-smi (the log was
    # rotated by the second start): which drop is the logged one is not known
    folder, _ = _llama_incident(tmp_path, failures=2)
    llama_cpp_log(tmp_path / "llama-server.log", failures=1)
    trace = ingest_paths([folder], IngestOptions())
    # THEN the OOM is kept with its figures, without a time, after the timed rows
    (row,) = trace.events.filter(pl.col("kind") == "oom").to_dicts()
    assert (row["ts"], row["clock"], row["requested_bytes"]) == (None, "untimed", 1104 << 20)
    clock = _clock(trace, f"{tmp_path.name}/llama-server.log")
    assert clock["reason"] == (
        "the log shows 1 failure and the timed inputs 2 moments of memory release or an OOM: "
        "which is which is not known"
    )
    # AND analyze says so first, and finds no OOM incident at a made-up time
    lines = _run("analyze", str(folder)).splitlines()
    assert lines[1].startswith(f"WARNING  {tmp_path.name}/llama-server.log: prints no time")
    assert all(i.anchor != "oom" for i in analyze(trace).incidents)
