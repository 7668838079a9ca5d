"""The whole chain: log files in their real formats -> ingest on the fly -> findings.

An SGLang 0.4 server log (startup memory lines, ``Receive:``/``Finish:`` request lines, decode
batch lines, retractions) and an nvidia-smi CSV, written as those tools write them, for an
incident whose culprits are known: three long generations grow together until the KV pool is
full.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from click.testing import CliRunner

from oomtrace.cli import cli

T0 = datetime(2025, 3, 14, 2, 10, 0, tzinfo=UTC)
POOL = 20_000
RATE = 20  # tokens per second per request
LONG = {"long-a": 10, "long-b": 11, "long-c": 12}  # request id -> arrival second
END = 186


def stamp(seconds: float, rank: str = "") -> str:
    moment = T0 + timedelta(seconds=seconds)
    return f"[{moment:%Y-%m-%d %H:%M:%S}{' ' + rank if rank else ''}]"


def receive(rid: str, prompt: int, max_new: int) -> str:
    ids = ", ".join(str(1000 + i % 5000) for i in range(prompt))
    return (
        f"Receive: obj=GenerateReqInput(text=None, input_ids=[{ids}], input_embeds=None, "
        f"sampling_params={{'temperature': 0.7, 'max_new_tokens': {max_new}, 'stop': None}}, "
        f"rid='{rid}', return_logprob=False, stream=True)"
    )


def finish(rid: str, prompt: int, completion: int) -> str:
    return (
        f"Finish: obj=GenerateReqInput(text=None, input_ids=[1, 2] ... [3, 4], rid='{rid}'), "
        f"out={{'text': '', 'meta_info': {{'id': '{rid}', 'finish_reason': {{'type': 'stop', "
        f"'matched': 128009}}, 'prompt_tokens': {prompt}, 'completion_tokens': {completion}, "
        f"'cached_tokens': 0, 'e2e_latency': 3.0}}}}"
    )


def stored(t: float) -> tuple[int, int]:
    """Ground truth: tokens held and requests running at ``t``."""
    tokens = sum(3000 + RATE * (t - at) for at in LONG.values() if t >= at)
    background = [s for s in range(0, END, 3) if s <= t < s + 3]
    return round(tokens + 230 * len(background)), len(background) + 3


SERVER_ARGS = (
    "server_args=ServerArgs(model_path='meta-llama/Llama-3.1-8B-Instruct', tp_size=1, "
    "mem_fraction_static=0.85, page_size=1, log_requests=True)"
)
WEIGHTS = (
    "Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=63.20 GB, "
    "mem usage=14.99 GB."
)
POOL_LINE = (
    "max_total_num_tokens=20000, chunked_prefill_size=8192, max_prefill_tokens=16384, "
    "max_running_requests=64, context_len=131072"
)
STARTUP = (
    (0, "", SERVER_ARGS),
    (5, "TP0", WEIGHTS),
    (6, "TP0", "KV Cache is allocated. #tokens: 20000, K size: 1.22 GB, V size: 1.22 GB"),
    (8, "TP0", POOL_LINE),
    (9, "", "The server is fired up and ready to roll!"),
)
RETRACT = (
    "KV cache pool is full. Retract requests. #retracted_reqs: 2, "
    "#new_token_ratio: 0.4000 -> 0.6000"
)


def decode(seconds: int) -> str:
    tokens, running = stored(seconds)
    return (
        f"Decode batch. #running-req: {running}, #token: {tokens}, token usage: "
        f"{tokens / POOL:.2f}, gen throughput (token/s): {running * RATE:.2f}, #queue-req: 0"
    )


def server_log() -> str:
    lines: list[tuple[float, str, str]] = list(STARTUP)
    lines += [(at, "", receive(rid, 3000, 12000)) for rid, at in LONG.items()]
    for i, s in enumerate(range(0, END, 3)):
        lines.append((s, "", receive(f"bg-{i:03d}", 200, 256)))
        if s + 3 < END:
            lines.append((s + 3, "", finish(f"bg-{i:03d}", 200, 60)))
    lines += [(s + 0.5, "TP0", decode(s)) for s in range(14, END + 1, 2)]
    lines += [(s + 0.7, "TP0", RETRACT) for s in (END - 1, END)]
    ordered = sorted(lines, key=lambda x: x[0])
    return "".join(f"{stamp(int(t), rank)} {text}\n" for t, rank, text in ordered)


def nvidia_smi() -> str:
    rows = ["timestamp, index, memory.total [MiB], memory.used [MiB], memory.free [MiB]"]
    for s in range(END + 1):
        moment = T0 + timedelta(seconds=s)
        rows.append(f"{moment:%Y/%m/%d %H:%M:%S}.000, 0, 81559 MiB, 69500 MiB, 12059 MiB")
    return "\n".join(rows) + "\n"


@pytest.fixture(scope="module")
def findings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    folder = tmp_path_factory.mktemp("incident")
    (folder / "server.log").write_text(server_log(), encoding="utf-8")
    (folder / "gpu.csv").write_text(nvidia_smi(), encoding="utf-8")
    result = CliRunner().invoke(
        cli, ["analyze", str(folder / "server.log"), str(folder / "gpu.csv"), "--json"]
    )
    assert result.exit_code == 0, result.output
    document: dict[str, object] = json.loads(result.stdout)
    return document


def test_raw_logs_become_findings_with_the_long_requests_first(findings: dict[str, object]) -> None:
    incident = findings["incidents"][0]  # type: ignore[index]
    assert incident["class"] == "kv_exhaustion"
    assert [c["request_id"] for c in incident["culprits"][:3]] == ["long-a", "long-b", "long-c"]
    assert incident["coverage_basis"] == "observed KV in use"
    assert incident["coverage"] > 0.9
    assert "2 preemptions" in incident["reason"] or "4 preemptions" in incident["reason"]


def test_the_kv_model_comes_from_the_engine_startup_lines(findings: dict[str, object]) -> None:
    kv = findings["kv_model"]  # type: ignore[index]
    assert kv["basis"] == "engine_tokens"
    assert kv["pool_tokens"] == POOL


def test_the_evidence_cites_rows_of_the_ingested_tables(findings: dict[str, object]) -> None:
    incident = findings["incidents"][0]  # type: ignore[index]
    tables = {row["table"] for row in incident["evidence"]}
    assert {"samples", "events"} <= tables
    sources = {row["source"] for row in incident["evidence"]}
    assert any("server.log" in str(s) for s in sources)


def test_the_gaps_say_what_the_logs_could_not(findings: dict[str, object]) -> None:
    kinds = {g["kind"] for g in findings["gaps"]}  # type: ignore[index]
    assert "no_admission" in kinds  # SGLang states arrivals and finishes only
    assert "no_allocator" in kinds
