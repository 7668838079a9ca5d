"""A llama.cpp server's requests from its slot lines, in the shapes public threads show them: the
server's start cut off, no time of day, or journald's prefix and llama.cpp's own durations."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from oomtrace.ingest import IngestOptions, ingest_paths
from oomtrace.trace import Trace


def _trace(tmp_path: Path, text: str) -> Trace:
    path = tmp_path / "server.log"
    path.write_text(text)
    trace = ingest_paths([path], IngestOptions(year=2026))
    assert trace.manifest.sources[0].parser == "pytorch-log"
    return trace


def _events(trace: Trace) -> list[tuple[object, ...]]:
    columns = ("request_id", "event", "prompt_tokens", "output_tokens")
    return trace.requests.select(columns).rows()


# the llama-server of 2026 serving /infill: one request ends, the next starts (tests/data/torch's
# README names its source)
INFILL = (Path(__file__).parents[3] / "data" / "torch" / "llama-server-slots.log").read_text()


def test_slot_lines_alone_are_a_llama_cpp_log_with_its_requests(tmp_path: Path) -> None:
    trace = _trace(tmp_path, INFILL)
    assert _events(trace) == [
        ("124", "first_token", 1360, None),
        # 10 tokens generated ("eval time ... / 10 tokens"), 1369 held in the slot's context
        ("124", "finished", None, 10),
        ("135", "admitted", 1371, None),
    ]
    # the log prints no time: the rows keep their order, without a made-up time
    assert trace.requests["ts"].null_count() == trace.requests.height


def test_a_cancelled_task_under_journald_is_an_abort(tmp_path: Path) -> None:
    # https://github.com/ggml-org/llama.cpp/pull/22929 (llama-server under systemd, May 2026:
    # journald's time, then llama.cpp's duration since start and its level letter)
    text = (
        "May 23 00:30:26 corrm-pc start_llama_server.sh[385247]: 48.36.087.347 W srv          "
        "next: stopping wait for next result due to should_stop condition (adjust the --timeout "
        "argument if needed)\n"
        "May 23 00:30:26 corrm-pc start_llama_server.sh[385247]: 48.36.089.319 W srv          "
        "stop: cancel task, id_task = 22416\n"
        "May 23 00:30:27 corrm-pc start_llama_server.sh[385247]: 48.36.669.415 I slot      "
        "release: id  0 | task 22416 | stop processing: n_tokens = 8192, truncated = 0\n"
        "May 23 00:30:27 corrm-pc start_llama_server.sh[385247]: 48.36.669.531 I srv  "
        "update_slots: all slots are idle\n"
    )
    trace = _trace(tmp_path, text)
    assert [row[:2] for row in _events(trace)] == [("22416", "aborted"), ("22416", "finished")]
    # journald's times place the rows
    assert trace.requests["ts"].dt.strftime("%m-%d %H:%M:%S").to_list() == [
        "05-23 00:30:26",
        "05-23 00:30:27",
    ]


def test_a_slot_line_without_a_task_is_no_request(tmp_path: Path) -> None:
    # https://github.com/ollama/ollama/issues/18123 (the runner of 2026: the sampler is set up
    # under task -1 before the task is known)
    text = (
        "slot launch_slot_: id  0 | task -1 | sampler chain: logits -> penalties -> top-k -> "
        "top-p -> dist \n"
        "slot launch_slot_: id  0 | task 0 | processing task, is_child = 0\n"
        "slot   operator(): id  0 | task 0 | new prompt, n_ctx_slot = 131072, n_keep = 4, "
        "task.n_tokens = 14892\n"
        "slot print_timing: id  0 | task 0 | prompt processing, n_tokens =   1536, progress = "
        "0.10, t =   3.42 s / 448.61 tokens per second\n"
    )
    trace = _trace(tmp_path, text)
    assert _events(trace) == [("0", "admitted", 14892, None)]
    assert trace.requests.filter(pl.col("request_id") == "-1").height == 0
