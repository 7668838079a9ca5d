"""`oomtrace analyze`: exit codes, the exact error lines, the summary and the JSON."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
from click.testing import CliRunner

from oomtrace.cli import cli
from oomtrace.trace import Trace, write_trace
from tests import scenarios


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["analyze", *args])
    return result.exit_code, result.stdout, result.stderr


def trace_dir(tmp_path: Path, trace: Trace | None = None) -> Path:
    out = tmp_path / "trace"
    write_trace(trace or scenarios.long_requests_growing().trace, out)
    return out


def test_the_summary_names_the_class_the_culprits_and_the_coverage(tmp_path: Path) -> None:
    code, out, err = run(str(trace_dir(tmp_path)))
    assert (code, err) == (0, "")
    # the moment the pool filled and ran dry (its last entry into 95 % of its blocks before the
    # first preemption), not its later maximum
    assert "PRIMARY  kv_exhaustion at 2025-03-14 09:03:25.000 UTC" in out
    assert "coverage:  100.0% of the observed KV in use" in out
    lines = out.splitlines()
    first = next(i for i, line in enumerate(lines) if line.strip().startswith("#  request"))
    assert [lines[first + k].split()[1] for k in (1, 2, 3)] == ["long-1", "long-2", "long-3"]
    assert "Data gaps" in out
    assert "KV model: engine statements" in out


def test_json_prints_the_findings_document(tmp_path: Path) -> None:
    code, out, _ = run(str(trace_dir(tmp_path)), "--json", "--top", "2", "--window", "30s")
    assert code == 0
    document = json.loads(out)
    assert document["findings_version"] == 1
    assert document["options"]["window_s"] == 30.0
    assert [c["request_id"] for c in document["incidents"][0]["culprits"]] == ["long-1", "long-2"]


def test_a_missing_path_is_one_error_line_and_exit_2(tmp_path: Path) -> None:
    code, out, err = run(str(tmp_path / "nope"))
    assert (code, out) == (2, "")
    assert (
        err == f"oomtrace: error: {tmp_path / 'nope'}: no such file or directory; check the path\n"
    )


def test_a_file_no_parser_recognises_is_refused_with_the_remedy(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("we restarted the server at noon\n", encoding="utf-8")
    code, _, err = run(str(notes))
    assert code == 2
    assert err.startswith("oomtrace: error: notes.txt: no known format; no parser recognised it")
    assert err.endswith("; pass --format\n")
    assert err.count("\n") == 1


def test_raw_files_are_ingested_on_the_fly(tmp_path: Path) -> None:
    code, out, _ = run("tests/data/sglang/v0.4-tp2.log")
    assert code == 0
    assert "PRIMARY  kv_exhaustion at 2025-03-14 02:16:17.000 UTC" in out


def test_a_config_switches_the_kv_model_to_the_architecture(tmp_path: Path) -> None:
    code, out, _ = run(
        str(trace_dir(tmp_path)), "--config", "tests/data/configs/llama-3.1-8b", "--json"
    )
    assert code == 0
    kv = json.loads(out)["kv_model"]
    assert kv["basis"] == "architecture"
    assert kv["bytes_per_token"] == 128 * 1024  # 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 B
    assert "llama-3.1-8b" in kv["statement"]


def test_a_config_that_cannot_be_read_is_one_error_line(tmp_path: Path) -> None:
    code, _, err = run(str(trace_dir(tmp_path)), "--config", str(tmp_path / "missing.json"))
    assert code == 2
    assert err == (
        f"oomtrace: error: --config {tmp_path / 'missing.json'}: no such file or directory; "
        "pass a model's config.json or the directory that holds it\n"
    )


def test_a_window_without_a_unit_is_a_usage_error(tmp_path: Path) -> None:
    code, _, err = run(str(trace_dir(tmp_path)), "--window", "60")
    assert code == 2
    assert (
        err
        == "oomtrace: error: --window '60' is not a duration; write e.g. '60s', '2m' or '500ms'\n"
    )


def test_an_empty_trace_is_one_line_naming_the_reason(tmp_path: Path) -> None:
    code, _, err = run(str(trace_dir(tmp_path, Trace())))
    assert code == 2
    assert err.startswith("oomtrace: error: the trace holds no samples, requests or events")
    assert err.count("\n") == 1


def test_request_ids_from_logs_are_escaped_in_the_summary(tmp_path: Path) -> None:
    # GIVEN a request id carrying a terminal escape sequence
    scenario = scenarios.long_requests_growing()
    evil = "long-1\x1b[2J"
    requests = scenario.trace.requests.with_columns(pl.col("request_id").replace("long-1", evil))
    trace = Trace(scenario.trace.samples, requests, scenario.trace.events, scenario.trace.manifest)
    code, out, _ = run(str(trace_dir(tmp_path, trace)))
    assert code == 0
    assert "\x1b" not in out
    assert "long-1\\x1b[2J" in out


def test_fail_on_incident_exits_1_when_an_incident_is_found(tmp_path: Path) -> None:
    # GIVEN a trace with a KV exhaustion, WHEN analysed for a CI gate
    code, out, err = run(str(trace_dir(tmp_path)), "--fail-on-incident")
    # THEN the summary is printed as usual, remedies first, and the exit status says "found"
    assert (code, err) == (1, "")
    assert out.splitlines()[2].startswith("Remedies (")
    assert out.index("Remedies (") < out.index("PRIMARY  kv_exhaustion")
    # without the flag the same trace exits 0
    assert run(str(trace_dir(tmp_path / "again")))[0] == 0


def test_fail_on_incident_exits_0_on_a_quiet_trace_and_2_on_bad_input(tmp_path: Path) -> None:
    quiet = scenarios.ScenarioBuilder(duration=60.0)
    quiet.add(*[scenarios.Req(f"q-{i}", 2.0 * i, 2.0 * i + 0.1, 200, 50, 256) for i in range(25)])
    code, out, _ = run(str(trace_dir(tmp_path, quiet.build())), "--fail-on-incident")
    assert code == 0
    assert "No incident" in out
    code, _, err = run(str(tmp_path / "nope"), "--fail-on-incident")
    assert code == 2
    assert err.startswith("oomtrace: error: ")


def test_the_cli_remedies_a_kv_exhaustion_with_limits_a_replay_shows_passing(
    tmp_path: Path,
) -> None:
    # GIVEN a trace with a KV exhaustion, WHEN analysed as JSON from the command line
    code, out, _ = run(str(trace_dir(tmp_path)), "--json")
    assert code == 0
    remedies = json.loads(out)["remedies"]
    # THEN its remedies are limits the replay ran, each with the queueing delay it costs
    assert remedies
    assert {r["basis"] for r in remedies} == {"replay"}
    assert all("queueing p50" in r["detail"] for r in remedies)
    assert {r["setting"] for r in remedies} <= {
        "--max-num-seqs",
        "--max-num-batched-tokens",
        "--max-model-len",
    }


def test_long_request_ids_are_printed_whole_so_they_can_be_grepped(tmp_path: Path) -> None:
    # GIVEN a culprit whose id is as long as vLLM's (cmpl- + 32 hex digits + -0) and then some
    scenario = scenarios.long_requests_growing()
    long_id = "cmpl-858c08ce99bf0b8b50aaa8ab891a490f-0-with-a-suffix-a-proxy-added"
    requests = scenario.trace.requests.with_columns(pl.col("request_id").replace("long-1", long_id))
    trace = Trace(scenario.trace.samples, requests, scenario.trace.events, scenario.trace.manifest)
    # WHEN the summary is printed
    code, out, _ = run(str(trace_dir(tmp_path, trace)))
    # THEN the id is there in full, never cut with an ellipsis
    assert code == 0
    assert f" {long_id} " in out
    assert "…" not in "".join(line for line in out.splitlines() if "long" in line)
