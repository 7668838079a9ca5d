"""Inputs with values no measurement can hold (years outside what a nanosecond clock counts,
10^23 MiB, 1e29 requests, a 10^29 GiB allocation, 29-digit counts) and damaged trace
manifests: every command ends with a result or one clear error line, never a traceback. An
out-of-range value is skipped and counted for the source it came from."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from oomtrace.cli import cli

SAMPLES = Path(__file__).resolve().parents[2] / "sample_logs"
HUGE = "1" + "0" * 28  # 10^28: a 29-digit number


def run(*args: str) -> tuple[int, str]:
    # catch_exceptions=False: a crash fails the test with its traceback instead of exit code 1
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def chain(tmp_path: Path, *inputs: Path) -> dict[str, object]:
    """ingest, analyze and report; the manifest's sources."""
    trace = tmp_path / "trace"
    code, out = run("ingest", *map(str, inputs), "-o", str(trace))
    assert code == 0, out
    for command in (["analyze"], ["analyze", "--json"], ["report", "-o", str(tmp_path / "r.html")]):
        code, out = run(*command, str(trace))
        assert code in (0, 1), out  # 1: analyze found an incident
    manifest = json.loads((trace / "manifest.json").read_text())
    return {source["name"]: source for source in manifest["sources"]}


def skipped(source: object) -> dict[str, int]:
    assert isinstance(source, dict)
    return {reason: skip["count"] for reason, skip in source["skipped"].items()}


def edited(tmp_path: Path, sample: str, name: str, old: str, new: str, count: int = 1) -> Path:
    text = (SAMPLES / sample).read_text(encoding="utf-8")
    assert old in text
    out = tmp_path / name
    out.write_text(text.replace(old, new, count), encoding="utf-8")
    return out


@pytest.mark.parametrize("year", ["0025", "6025"])
def test_an_nvidia_smi_time_outside_the_clock_range_is_one_skipped_row(
    tmp_path: Path, year: str
) -> None:
    csv = edited(
        tmp_path, "vllm-foreign-process/gpu.csv", "gpu.csv", "2025/05/06 10:13:58.204", year
    )
    source = chain(tmp_path, csv)["gpu.csv"]
    assert sum(skipped(source).values()) == 1


def test_an_nvidia_smi_memory_of_10_to_the_23_mib_is_skipped(tmp_path: Path) -> None:
    csv = edited(tmp_path, "vllm-foreign-process/gpu.csv", "gpu.csv", "34644 MiB", "1" + "0" * 23)
    source = chain(tmp_path, csv)["gpu.csv"]
    assert sum(skipped(source).values()) == 1


def test_a_prometheus_sample_of_1e29_is_skipped_and_analyze_and_report_run(
    tmp_path: Path,
) -> None:
    prom = (SAMPLES / "sglang-retraction/metrics.prom").read_text(encoding="utf-8")
    running = re.compile(r"^(sglang:num_running_reqs\{[^}]*\}) \S+$", re.MULTILINE)
    assert running.search(prom)
    path = tmp_path / "metrics.prom"
    path.write_text(running.sub(r"\1 1e29", prom, count=3), encoding="utf-8")
    source = chain(tmp_path, path)["metrics.prom"]
    assert skipped(source) == {"value out of range": 3}


def test_an_oom_message_of_10_to_the_29_gib_keeps_the_event_without_the_size(
    tmp_path: Path,
) -> None:
    log = tmp_path / "train.log"
    log.write_text(
        "2025-06-10 15:00:00 torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
        f"1{'0' * 29}.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.75 GiB is free.\n",
        encoding="utf-8",
    )
    source = chain(tmp_path, log)["train.log"]
    assert source["rows"] == {"samples": 0, "requests": 0, "events": 1}
    assert skipped(source) == {"value out of range": 1}


def test_a_vllm_log_with_29_digit_numbers_is_read_without_them(tmp_path: Path) -> None:
    log = edited(
        tmp_path,
        "vllm-kv-exhaustion/vllm.log",
        "vllm.log",
        "Running: 0 reqs",
        f"Running: {HUGE} reqs",
        4,
    )
    log.write_text(
        log.read_text().replace(
            "GPU KV cache size: 31,536 tokens", f"GPU KV cache size: {HUGE} tokens"
        ),
        encoding="utf-8",
    )
    source = chain(tmp_path, log)["vllm.log"]
    # every such stats value is left out (idle repeats of one are dropped before, as stale)
    assert skipped(source)["value out of range"] >= 2
    samples = pl.read_parquet(tmp_path / "trace" / "samples.parquet")
    assert samples["value"].max() < 2**40
    manifest = json.loads((tmp_path / "trace" / "manifest.json").read_text())
    assert "kv_cache_tokens" not in manifest["engine_config"]
    assert any("kv_cache_tokens" in note for note in source["notes"])  # type: ignore[attr-defined]


@pytest.mark.parametrize("content", ["null", "[]", '"text"', "{"])
def test_a_manifest_that_is_not_an_object_is_one_clear_error(tmp_path: Path, content: str) -> None:
    trace = tmp_path / "trace"
    code, out = run("ingest", str(SAMPLES / "vllm-foreign-process/gpu.csv"), "-o", str(trace))
    assert code == 0, out
    (trace / "manifest.json").write_text(content, encoding="utf-8")
    for command in ("analyze", "report"):
        code, out = run(command, str(trace))
        assert code == 2
        assert "manifest.json" in out
        assert len(out.strip().splitlines()) == 1
