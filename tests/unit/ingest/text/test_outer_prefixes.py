"""Outer prefixes come off every line and say what they knew: host, full time, process, repeats."""

from __future__ import annotations

from datetime import UTC, datetime

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from oomtrace.ingest.text.outer_prefixes import detect_kinds, outer_pattern, strip_prefixes

VLLM = "INFO 09-22 23:46:42 metrics.py:367] Avg prompt throughput: 1.0 tokens/s"
CYAN, RESET = "\x1b[1;36m", "\x1b[0;0m"


def _strip(*lines: str) -> pl.DataFrame:
    return strip_prefixes(pl.DataFrame({"line": list(lines)})).drop("line")


def _one(line: str) -> dict[str, object]:
    row: dict[str, object] = _strip(line).row(0, named=True)
    return row


def test_a_line_without_prefixes_is_left_as_it_is() -> None:
    row = _one(VLLM)
    assert row == {"message": VLLM, "outer_ts": None, "host": None, "proc": None, "repeat": 1}


def test_journald_short_form_names_the_host_and_the_process_but_no_full_time() -> None:
    row = _one(f"Sep 22 23:46:42 ml2-1-a100-1 vllm[361991]: {VLLM}")
    assert row["message"] == VLLM
    assert row["host"] == "ml2-1-a100-1"
    assert row["proc"] == "361991"
    assert row["outer_ts"] is None


def test_journald_short_iso_form_carries_a_full_timestamp() -> None:
    row = _one(f"2024-09-22T23:46:42+0200 gpu7 vllm[12]: {VLLM}")
    assert row["message"] == VLLM
    assert row["host"] == "gpu7"
    assert row["outer_ts"] == datetime(2024, 9, 22, 21, 46, 42, tzinfo=UTC)


def test_kubectl_timestamps_keep_their_nanoseconds_and_any_zone() -> None:
    frame = _strip(
        f"2024-05-01T12:00:00.123456789Z {VLLM}",
        f"[pod/vllm-0/vllm] 2024-05-01T12:00:00.5+02:00 {VLLM}",
    )
    assert frame["message"].to_list() == [VLLM, VLLM]
    stamps = frame["outer_ts"].dt.epoch("ns").to_list()
    assert stamps[0] == 1714564800123456789
    assert stamps[1] == 1714557600500000000


def test_cloud_logging_severity_time_and_summary_fields_come_off() -> None:
    # GKE's Logs Explorer, copied (https://github.com/vllm-project/vllm/issues/29049): the
    # entry's severity, its UTC time and a summary field before vLLM's own process prefix
    engine = "ERROR 11-19 12:16:36 [v1/engine/core.py:842] return func(*args, **kwargs)"
    row = _one(
        "INFO 2025-11-19T20:16:36.096679281Z [resource.labels.containerName: vllm] "
        f"(EngineCore_DP0 pid=270) {engine}"
    )
    assert row["message"] == engine
    assert row["proc"] == "(EngineCore_DP0 pid=270)"
    assert row["outer_ts"] == datetime(2025, 11, 19, 20, 16, 36, 96679, tzinfo=UTC)
    # without summary fields too; vLLM's own "INFO <month-day>" is never taken for one
    assert _one(f"WARNING 2025-11-19T20:16:36Z {VLLM}")["message"] == VLLM
    assert _one(VLLM)["outer_ts"] is None


def test_docker_compose_service_prefix_with_and_without_its_timestamp() -> None:
    frame = _strip(
        f"qwen3-vl-32b  | (EngineCore_DP0 pid=413) {VLLM}",
        f"vllm-1  | 2024-05-01T12:00:00.000000001Z {VLLM}",
    )
    assert frame["message"].to_list() == [VLLM, VLLM]
    assert frame["proc"].to_list() == ["qwen3-vl-32b|(EngineCore_DP0 pid=413)", "vllm-1"]
    assert frame["outer_ts"].dt.epoch("ns").to_list() == [None, 1714564800000000001]


def test_slurm_task_numbers_are_the_process_key() -> None:
    frame = _strip(f"0: {VLLM}", f"12: {VLLM}")
    assert frame["message"].to_list() == [VLLM, VLLM]
    assert frame["proc"].to_list() == ["0", "12"]


def test_nested_ray_and_vllm_process_prefixes_come_off_together() -> None:
    line = (
        "(MapWorker(MapBatches(vLLMEngineStageUDF)) pid=36916, ip=10.0.96.245) "
        f"(EngineCore_DP0 pid=36992) {VLLM}"
    )
    row = _one(line)
    assert row["message"] == VLLM
    assert row["proc"] == (
        "(MapWorker(MapBatches(vLLMEngineStageUDF)) pid=36916, ip=10.0.96.245) "
        "(EngineCore_DP0 pid=36992)"
    )


def test_ansi_colour_codes_are_removed_wherever_they_are() -> None:
    row = _one(f"{CYAN}(VllmWorkerProcess pid=507){RESET} \x1b[32mINFO\x1b[0m 09-22 ...")
    assert row["message"] == "INFO 09-22 ..."
    assert row["proc"] == "(VllmWorkerProcess pid=507)"


def test_rays_repeat_suffix_and_its_advice_text_are_removed_and_counted() -> None:
    frame = _strip(
        "(RayWorkerWrapper pid=394715, ip=10.65.144.3) DEBUG 02-05 09:08:18 x.py:282] Connecting "
        "[repeated 23x across cluster]",
        "(WorkerDict pid=295845) after load [repeated 3x across cluster] (Ray deduplicates logs by "
        "default. Set RAY_DEDUP_LOGS=0 to disable log deduplication, or see https://docs.ray.io/.)",
    )
    assert frame["message"].to_list() == [
        "DEBUG 02-05 09:08:18 x.py:282] Connecting",
        "after load",
    ]
    assert frame["repeat"].to_list() == [23, 3]


@pytest.mark.parametrize(
    ("line", "message", "proc"),
    [
        # a kubectl timestamp, then a Python traceback header: not a journald host and unit
        ("2024-05-01T12:00:00Z Process SpawnProcess-1:", "Process SpawnProcess-1:", None),
        ("Traceback (most recent call last):", "Traceback (most recent call last):", None),
        # a process prefix quoted with its "(" lost is not a prefix
        ("VllmWorker rank=1 pid=254) torch.OutOfMemoryError: x",
         "VllmWorker rank=1 pid=254) torch.OutOfMemoryError: x", None),
        ('INFO:     127.0.0.1:46928 - "POST /v1 HTTP/1.1" 200 OK',
         'INFO:     127.0.0.1:46928 - "POST /v1 HTTP/1.1" 200 OK', None),
        # the vLLM process prefix with a space in its name
        ("(VllmWorker rank=1 pid=254) torch.OutOfMemoryError: x", "torch.OutOfMemoryError: x",
         "(VllmWorker rank=1 pid=254)"),
    ],
)  # fmt: skip
def test_text_that_only_resembles_a_prefix_stays_in_the_message(
    line: str, message: str, proc: str | None
) -> None:
    row = _one(line)
    assert (row["message"], row["proc"]) == (message, proc)


def test_only_the_kinds_a_chunk_has_are_in_its_pattern() -> None:
    lines = pl.DataFrame({"line": [f"2024-05-01T12:00:00Z (APIServer pid=1) {VLLM}", VLLM]})
    kinds = detect_kinds(lines)
    assert kinds == {"timestamp", "process"}
    assert "journald" not in outer_pattern(kinds)
    assert "jd_short" in outer_pattern()


def test_the_same_frame_results_whatever_the_mix_of_kinds() -> None:
    alone = _strip(f"(APIServer pid=1) {VLLM}")
    mixed = _strip(f"(APIServer pid=1) {VLLM}", f"Sep 22 23:46:42 h u[1]: {VLLM}").head(1)
    assert_frame_equal(alone, mixed)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(max_size=200), min_size=1, max_size=20))
def test_arbitrary_text_never_raises_and_keeps_one_row_per_line(lines: list[str]) -> None:
    lines = [line.replace("\n", " ") for line in lines]
    frame = _strip(*lines)
    assert frame.height == len(lines)
    assert frame["repeat"].min() is not None


def test_a_ci_runners_bracketed_timestamp_is_the_lines_full_time() -> None:
    # https://github.com/pytorch/pytorch/issues/170433 (vLLM's CI on Buildkite: the runner's UTC
    # time in brackets before vLLM's own process prefix and local time)
    line = (
        "[2025-12-13T19:54:35Z] (Worker_TP0 pid=9260) ERROR 12-13 11:54:35 "
        "[multiproc_executor.py:826]     self.cuda_graph.capture_end()"
    )
    row = _one(line)
    assert row["outer_ts"] == datetime(2025, 12, 13, 19, 54, 35, tzinfo=UTC)
    assert row["proc"] == "(Worker_TP0 pid=9260)"
    assert str(row["message"]).startswith("ERROR 12-13 11:54:35 [multiproc_executor.py:826]")
