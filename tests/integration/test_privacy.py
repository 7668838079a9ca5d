"""Prompts never reach a byte oomtrace writes: a secret planted in every prompt shape the engines
print goes through the collector, ingest (of the capture and of the raw logs), analyze and every
report format, and no file, table cell or printed line holds it.

The shapes, per engine (rewritten from the engines' sources and public logs; see
tests/unit/collectors/test_redact_engines.py for the sources):

* vLLM V0 (0.6) and V1 (<= 0.11) INFO ``Received request ...: prompt: %r ...``; V1 0.12+ INFO
  ``Received request ...: params: ...`` with DEBUG ``Request ... details: prompt: %r``,
  ``Generated response ...: output: %r`` and ``Request ... JSON body: {...}``;
* SGLang ``--log-requests``: ``Receive: obj=GenerateReqInput(text=...)`` (whole, truncated as
  ``'head' ... 'tail'``, batched) and ``Finish: ... out={'text': ...}``;
* TGI: 2023 ``generate{req=Json(GenerateRequest { inputs: "..." })}`` spans, ``inputs="..."``
  span fields, DEBUG ``Input:`` / ``Output:`` printed raw over several lines;
* llama.cpp server: DEBUG request/response bodies, prompt and next-token pieces, the 2024 JSON
  log with the body as a JSON string.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from oomtrace.cli import cli

SECRET = "S3CR3T"
OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 79.15 GiB of which 1.75 GiB is free. Including non-PyTorch memory, this process "
    "has 77.40 GiB memory in use. Of the allocated memory 75.10 GiB is allocated by PyTorch, and "
    "1.20 GiB is reserved by PyTorch but unallocated."
)
PARAMS = (
    "SamplingParams(n=1, presence_penalty=0.0, frequency_penalty=0.0, repetition_penalty=1.0, "
    "temperature=0.0, top_p=1.0, top_k=-1, min_p=0.0, seed=None, stop=[], stop_token_ids=[], "
    "include_stop_str_in_output=False, ignore_eos=False, max_tokens=64, min_tokens=0, "
    "logprobs=None, prompt_logprobs=None, skip_special_tokens=True)"
)
STATS_V0 = (
    "Avg prompt throughput: 9.2 tokens/s, Avg generation throughput: 11.6 tokens/s, Running: 1 "
    "reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 97.1%, CPU KV cache usage: 0.0%."
)
STATS_V1 = (
    "Engine 000: Avg prompt throughput: 120.5 tokens/s, Avg generation throughput: 14.6 tokens/s, "
    "Running: 3 reqs, Waiting: 2 reqs, GPU KV cache usage: 97.0%, Prefix cache hit rate: 23.6%"
)


def secret(shape: str) -> str:
    return f"tell me the {SECRET}-{shape} now"


def vllm_v0() -> list[str]:
    return [
        "INFO 10-17 12:00:00 api_server.py:528] vLLM API server version 0.6.3",
        "INFO 10-17 12:00:01 gpu_executor.py:122] # GPU blocks: 27000, # CPU blocks: 2048",
        (
            f"INFO 10-17 12:00:05 logger.py:37] Received request cmpl-aa-0: prompt: "
            f"{secret('v0')!r}, params: {PARAMS}, prompt_token_ids: [128000, 3371, 757], "
            "lora_request: None, prompt_adapter_request: None."
        ),
        "INFO 10-17 12:00:05 engine.py:290] Added request cmpl-aa-0.",
        f"INFO 10-17 12:00:10 metrics.py:349] {STATS_V0}",
        "ERROR 10-17 12:00:11 engine.py:160] " + OOM,
    ]


def vllm_v1() -> list[str]:
    api, core = "(APIServer pid=1) ", "(EngineCore_DP0 pid=211) "
    body = {"model": "m", "messages": [{"role": "user", "content": secret("v1-body")}]}
    return [
        f"{api}INFO 03-14 13:58:02 [api_server.py:1351] vLLM API server version 0.13.0",
        f"{core}INFO 03-14 13:58:32 [kv_cache_utils.py:1087] GPU KV cache size: 31,536 tokens",
        (
            f"{api}INFO 03-14 14:00:00 [logger.py:41] Received request cmpl-bb-0: prompt: "
            f"{secret('v1-info')!r}, params: {PARAMS}, prompt_token_ids: [128000, 3371], "
            "prompt_embeds shape: None, lora_request: None."
        ),
        (
            f"{api}INFO 03-14 14:00:01 [logger.py:46] Received request cmpl-cc-0: "
            f"params: {PARAMS}, lora_request: None."
        ),
        (
            f"{api}DEBUG 03-14 14:00:01 [logger.py:52] Request cmpl-cc-0 details: prompt: "
            f"{secret('v1-debug')!r}, prompt_token_ids: [128000, 3371], prompt_embeds shape: None."
        ),
        f"{api}DEBUG 03-14 14:00:01 [request_logger.py:60] Request chatcmpl-dd JSON body: "
        + json.dumps(body),
        (
            f"{api}INFO 03-14 14:00:02 [logger.py:72] Generated response cmpl-bb-0: output: "
            f"{secret('v1-output')!r}, output_token_ids: [1, 2, 3], finish_reason: stop"
        ),
        f"{api}INFO 03-14 14:00:10 [loggers.py:310] {STATS_V1}",
        f"{core}ERROR 03-14 14:00:11 [core.py:710] EngineCore encountered a fatal error.",
        f"{core}ERROR 03-14 14:00:11 [core.py:710] " + OOM,
    ]


def sglang() -> list[str]:
    head = secret("sglang-head")
    return [
        (
            "[2025-06-10 14:58:02] server_args=ServerArgs(model_path='meta-llama/Llama-3.1-8B', "
            "tokenizer_path='meta-llama/Llama-3.1-8B', log_requests=True, log_requests_level=2)"
        ),
        (
            "[2025-06-10 14:58:20 TP0] KV Cache is allocated. #tokens: 367404, K size: 8.23 GB, "
            "V size: 8.23 GB"
        ),
        (
            f"[2025-06-10 15:00:00] Receive: obj=GenerateReqInput(text={secret('sglang')!r}, "
            "input_ids=None, sampling_params={'temperature': 0.7, 'max_new_tokens': 64}, "
            "rid='d3fe0784', stream=False)"
        ),
        (
            f"[2025-06-10 15:00:01] Receive: obj=GenerateReqInput(text={head!r} ... "
            f"{secret('sglang-tail')!r}, input_ids=None, rid='158867f7', stream=False)"
        ),
        (
            f"[2025-06-10 15:00:01] Receive: obj=GenerateReqInput(text=[{secret('b1')!r}, "
            f"{secret('b2')!r}], rid=['a1', 'a2'])"
        ),
        (
            "[2025-06-10 15:00:02 TP0] Prefill batch. #new-seq: 1, #new-token: 7, "
            "#cached-token: 0, token usage: 0.97, #running-req: 0, #queue-req: 0"
        ),
        (
            "[2025-06-10 15:00:03] Finish: obj=GenerateReqInput(rid='d3fe0784'), out={'text': "
            f"{secret('sglang-out')!r}, 'meta_info': {{'id': 'd3fe0784', 'finish_reason': "
            "{'type': 'stop'}, 'prompt_tokens': 3, 'completion_tokens': 9, 'cached_tokens': 0}}"
        ),
        "[2025-06-10 15:00:04 TP0] Scheduler hit an exception: " + OOM,
    ]


def tgi() -> list[str]:
    params = "GenerateParameters { best_of: None, max_new_tokens: Some(20), seed: None }"
    return [
        "2024-11-03T14:51:20.000000Z  INFO text_generation_launcher: Starting shard rank=0",
        (
            "2023-09-06T13:47:01.731233Z  INFO HTTP request{otel.name=POST /generate}:generate{req="
            f'Json(GenerateRequest {{ inputs: "{secret("tgi-2023")}", parameters: {params} }}) '
            'total_time="986.532642ms"}: text_generation_router::server: router/src/server.rs:289: '
            "Success"
        ),
        (
            f'2024-11-03T14:51:22.000000Z  INFO generate{{inputs="{secret("tgi-span")}" '
            'total_time="4.06s"}: text_generation_router::server: router/src/server.rs:322: Success'
        ),
        (
            f"2024-11-03T14:51:23.328491Z DEBUG generate{{parameters={params}}}: "
            "text_generation_router::server: router/src/server.rs:295: Input: <|system|>"
        ),
        secret("tgi-line-2"),
        "<|user|> " + secret("tgi-line-3"),
        (
            f"2024-11-03T14:51:27.393700Z DEBUG generate{{parameters={params}}}: "
            f"text_generation_router::server: router/src/server.rs:355: Output: {secret('tgi-out')}"
        ),
        (
            "2024-11-03T14:51:28.000000Z ERROR text_generation_launcher: Method Prefill "
            "encountered an error."
        ),
        "2024-11-03T14:51:28.000001Z ERROR text_generation_launcher: " + OOM,
    ]


def llama_cpp() -> list[str]:
    request = {"prompt": secret("llama-req"), "n_predict": 8, "input_prefix": secret("llama-fim")}
    response = {"content": secret("llama-resp"), "tokens_predicted": 8}
    old = json.dumps(json.dumps({"prompt": secret("llama-2024")}))
    return [
        "main: server is listening on http://127.0.0.1:8080 - starting the main loop",
        "srv  log_server_r: request:  " + json.dumps(request),
        "srv  log_server_r: response: " + json.dumps(response),
        f"slot update_slots: id  0 | task 0 | prompt token   3:  12345 '{secret('llama-piece')}'",
        (
            "slot process_toke: id  0 | task 0 | n_decoded = 5, n_remaining = -1, "
            f"next token:   198 '{secret('llama-next')}'"
        ),
        (
            '{"tid":"1","timestamp":1717000000,"level":"VERB","function":"log_server_request",'
            f'"line":2448,"msg":"request","request":{old},"response":"{{}}"}}'
        ),
        "ggml_cuda_host_malloc: failed to allocate 512.00 MiB of pinned memory: out of memory",
        "CUDA error: out of memory",
    ]


LOGS = {
    "vllm-v0.log": vllm_v0,
    "vllm-v1.log": vllm_v1,
    "sglang.log": sglang,
    "tgi.log": tgi,
    "llama-server.log": llama_cpp,
}


REPORTS = ("html", "md", "json")


def readable_text(path: Path) -> str:
    """Every byte of ``path`` as text a grep can search: Parquet cells decoded, gzip inflated."""
    if path.suffix == ".parquet":
        frame = pl.read_parquet(path)
        return frame.cast(pl.String, strict=False).write_csv() + str(frame.schema)
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return data.decode("utf-8", "backslashreplace")


def run(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code in (0, 1), result.output  # 1: the analysis found an incident
    return result.output


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Everything the collector, ingest, analyze and report write for the planted logs."""
    root = tmp_path_factory.mktemp("privacy")
    logs = []
    for name, lines in LOGS.items():
        (root / name).write_text("\n".join(lines()) + "\n", encoding="utf-8")
        logs.append(root / name)
    assert all(SECRET in p.read_text() for p in logs)  # the secrets are really there
    capture = root / "capture"
    log_args = [arg for p in logs for arg in ("--log", str(p))]
    agent = [sys.executable, "-m", "collectors", *log_args, "--out", str(capture)]
    collected = subprocess.run(
        [*agent, "--log-interval", "20ms", "--flush-interval", "50ms", "--duration", "1s"],
        capture_output=True,
        text=True,
        check=True,
    )
    printed = [collected.stdout, collected.stderr]
    for source, out in (("capture", [str(capture)]), ("raw", [str(p) for p in logs])):
        trace = root / f"trace-{source}"
        printed.append(run("ingest", *out, "-o", str(trace)))
        commands = [["analyze"], ["analyze", "--json"], ["report"]]
        commands += [["report", "-o", str(root / f"report-{source}.{kind}")] for kind in REPORTS]
        printed.extend(run(*command, str(trace)) for command in commands)
    printed += [run("inspect", str(p)) for p in logs]
    files = {
        str(p.relative_to(root)): readable_text(p)
        for p in root.rglob("*")
        if p.is_file() and p.suffix != ".log"
    }
    return {**files, **{f"printed {i}": text for i, text in enumerate(printed)}}


def test_no_byte_written_or_printed_holds_a_prompt(written: dict[str, str]) -> None:
    leaks = {name: text.count(SECRET) for name, text in written.items() if SECRET in text}
    assert leaks == {}


def test_the_planted_logs_were_really_read(written: dict[str, str]) -> None:
    # the privacy check means something only if the prompt lines reached every stage
    names = set(written)
    assert any(name.startswith("capture/seg-") for name in names)
    assert {"trace-capture/manifest.json", "trace-raw/manifest.json"} <= names
    assert {"report-raw.html", "report-capture.md", "report-raw.json"} <= names
    captured = "".join(text for name, text in written.items() if name.startswith("capture/"))
    assert captured.count("<redacted") >= 20
