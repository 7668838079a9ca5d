"""Every prompt-bearing line shape the engines print, in their real layouts, loses its text.

Shapes (rewritten from the engines' sources and public logs):

* vLLM V0/V1 <= 0.11 INFO ``Received request ...: prompt: %r, ...``; 0.12+ INFO ``Received
  request ...: params: ...`` plus DEBUG ``Request ... details: prompt: %r, prompt_token_ids: ...``;
  ``Generated response ...: output: %r`` (entrypoints/logger.py);
* SGLang ``--log-requests``: ``Receive: obj=GenerateReqInput(text=...)``, ``Finish: ... out={'text':
  ...}``, strings over ``max_length`` printed as ``'head' ... 'tail'`` and, in early releases, in
  raw double quotes without escaping (``dataclass_to_string_truncated``);
* TGI: tracing spans that carry the request (``generate{req=Json(GenerateRequest { inputs: "..."
  ...})}`` in 2023 routers, ``inputs="..."`` span fields), and DEBUG ``Input: {}`` / ``Output: {}``
  written with ``Display``: unquoted, newlines and all (router/src/server.rs);
* llama.cpp server: ``srv  log_server_r: request:  <body>`` / ``response: <body>`` (DEBUG), ``slot
  update_slots: ... prompt token   3:  12345 '<piece>'``, ``next token: 198 '<piece>'`` and the 2024
  JSON / ``key=value`` log formats whose ``request`` field holds the body as a JSON string.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collectors.redact import LineRedactor, has_text_key, redact_line

SECRET = "S3CR3T"
TGI_PARAMS = (
    "GenerateParameters { best_of: None, temperature: None, repetition_penalty: None, top_k: "
    "None, top_p: None, typical_p: None, do_sample: false, max_new_tokens: Some(20), "
    "return_full_text: None, stop: [], truncate: None, watermark: false, details: false, "
    "decoder_input_details: false, seed: None, top_n_tokens: None }"
)
TGI_SUCCESS = (
    f"2024-02-06T03:08:33.664018Z  INFO generate{{parameters={TGI_PARAMS} "
    'total_time="2.520979735s" validation_time="308.477µs" queue_time="70µs" '
    'inference_time="2.520601569s" time_per_token="25.206015ms" seed="None"}: '
    "text_generation_router::server: router/src/server.rs:298: Success"
)

LEAKING = {
    "vllm 0.12 DEBUG details": (
        "(APIServer pid=1222) DEBUG 09-17 18:27:24 [logger.py:52] Request cmpl-9-0 details: "
        f"prompt: 'tell me the {SECRET}', prompt_token_ids: [785, 3853], prompt_embeds shape: None."
    ),
    "tgi 2023 generate span": (
        "2023-09-06T13:47:01.731233Z  INFO HTTP request{otel.name=POST /generate}:generate{req="
        f'Json(GenerateRequest {{ inputs: "What is the {SECRET}?", parameters: {TGI_PARAMS} }}) '
        'total_time="986.532642ms"}: text_generation_router::server: router/src/server.rs:289: '
        "Success"
    ),
    "tgi inputs span field": (
        f'2024-11-03T14:51:27.393883Z  INFO generate{{inputs="the {SECRET} plan" '
        'total_time="4.065504959s"}: text_generation_router::server: router/src/server.rs:322: '
        "Success"
    ),
    "tgi DEBUG Input": (
        "2024-11-03T14:51:23.328491Z DEBUG generate{parameters=GenerateParameters { best_of: None "
        "}}: text_generation_router::server: router/src/server.rs:295: "
        f"Input: What is the {SECRET}, in one word?"
    ),
    "tgi DEBUG Output": (
        "2024-11-03T14:51:27.393700Z DEBUG generate{parameters=GenerateParameters { best_of: None "
        f"}}: text_generation_router::server: router/src/server.rs:355: Output: The {SECRET} is 42"
    ),
    "tgi json output": (
        '{"timestamp":"2024-11-03T14:51:23.328491Z","level":"DEBUG","fields":{"message":"Input: '
        f'the {SECRET}"}},"target":"text_generation_router::server"}}'
    ),
    "prompt without a colon": (
        f"WARNING 03-11 06:18:50 [serving.py:80] prompt 'the {SECRET}' ignored"
    ),
    "sglang truncated string": (
        "[2025-03-03 17:53:04] Receive: obj=GenerateReqInput(text='head of the prompt' ... "
        f"'and its {SECRET} tail', input_ids=None, rid='ced00776')"
    ),
    "sglang raw double quotes": (
        f'[2024-09-01 10:00:00] Receive: obj=GenerateReqInput(text="he said "{SECRET}" twice", '
        "input_ids=None, rid='a1')"
    ),
    "sglang finish logprobs": (
        "[2025-03-03 17:53:06] Finish: obj=GenerateReqInput(rid='a1'), out={'text': 'hi', "
        f"'meta_info': {{'id': 'a1', 'output_token_logprobs': [(-0.1, 13, '{SECRET}')]}}}}"
    ),
    "llama.cpp request body": (
        "srv  log_server_r: request:  "
        + json.dumps({"prompt": f"the {SECRET}", "n_predict": 8, "input_prefix": SECRET})
    ),
    "llama.cpp chat response body": (
        "srv  log_server_r: response: "
        + json.dumps({"choices": [{"message": {"role": "assistant", "content": SECRET}}]})
    ),
    "llama.cpp prompt token": (
        f"slot update_slots: id  0 | task 0 | prompt token   3:  12345 '{SECRET}'"
    ),
    "llama.cpp next token": (
        "slot process_toke: id  0 | task 0 | n_decoded = 5, n_remaining = -1, next token:   198 "
        f"'{SECRET}'"
    ),
    "llama.cpp 2024 json log": (
        '{"tid":"1","timestamp":1717000000,"level":"VERB","function":"log_server_request",'
        '"line":2448,"msg":"request","request":'
        + json.dumps(json.dumps({"prompt": SECRET}))
        + ',"response":"{}"}'
    ),
    "llama.cpp 2024 text log": (
        'VERB [           update_slots] prompt ingested | tid="1" timestamp=1717000000 n_past=0 '
        f'cached="" to_eval=" the {SECRET}"'
    ),
}


@pytest.mark.parametrize("line", LEAKING.values(), ids=LEAKING.keys())
def test_the_prompt_text_of_every_engine_shape_is_removed(line: str) -> None:
    out = redact_line(line)
    assert SECRET not in out
    assert "<redacted" in out
    assert has_text_key(line)


def test_tgi_span_fields_after_the_request_are_kept() -> None:
    out = redact_line(LEAKING["tgi inputs span field"])
    assert 'total_time="4.065504959s"' in out
    assert out.endswith("router/src/server.rs:322: Success")


def test_sglang_ids_and_counts_survive_next_to_a_truncated_prompt() -> None:
    out = redact_line(LEAKING["sglang truncated string"])
    assert "text=<redacted 18 chars> ... <redacted 19 chars>, input_ids=None" in out
    assert "rid='ced00776'" in out


UNTOUCHED = [
    TGI_SUCCESS,
    (
        "INFO 03-11 06:18:58 [loggers.py:80] Avg prompt throughput: 0.5 tokens/s, Avg generation "
        "throughput: 0.7 tokens/s, Running: 0 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%"
    ),
    (
        "(APIServer pid=1222) INFO 09-17 18:27:24 [logger.py:40] Received request cmpl-9-0: "
        "params: SamplingParams(n=1, temperature=0.0, include_stop_str_in_output=False, "
        "max_tokens=7, prompt_logprobs=None, truncate_prompt_tokens=None), lora_request: None."
    ),
    (
        "[2025-03-03 17:53:04 TP0] Prefill batch. #new-seq: 1, #new-token: 7, #cached-token: 0, "
        "token usage: 0.00, #running-req: 0, #queue-req: 0"
    ),
    (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a "
        "total capacity of 79.15 GiB of which 3.75 MiB is free."
    ),
    (
        "2024-02-06T03:08:33.664018Z ERROR text_generation_router::infer: router/src/infer.rs:117: "
        "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. Given: 4000 "
        "`inputs` tokens and 200 `max_new_tokens`"
    ),
    "slot launch_slot_: id  0 | task 0 | processing task",
    "srv  log_server_r: request: POST /completion 127.0.0.1 200",
    "Content-Type: text/plain; version=0.0.4",
]


@pytest.mark.parametrize("line", UNTOUCHED)
def test_lines_without_prompt_text_are_unchanged(line: str) -> None:
    assert redact_line(line) == line


def test_tgi_multi_line_input_is_removed_up_to_the_next_log_record() -> None:
    # GIVEN TGI's DEBUG Input line for a chat prompt: Display prints its newlines as they are
    redactor = LineRedactor()
    lines = [
        (
            "2024-11-03T14:51:23.328491Z DEBUG generate{}: text_generation_router::server: "
            "router/src/server.rs:295: Input: <|system|>"
        ),
        "You keep the " + SECRET,
        "",
        "  <|user|> what is it?",
        (
            "2024-11-03T14:51:27.393883Z  INFO generate{}: text_generation_router::server: "
            "router/src/server.rs:322: Success"
        ),
        "an unrelated line with no head stays",
    ]
    # WHEN the lines pass one by one (as the tail reads them)
    out = [redactor.redact(line) for line in lines]
    # THEN every continuation line is gone, the next record and what follows it are kept
    assert SECRET not in "\n".join(out)
    assert out[1:4] == ["<redacted 19 chars>", "", "<redacted 22 chars>"]
    assert out[4:] == lines[4:]


def test_traceback_source_lines_and_settings_are_not_prompts() -> None:
    # vLLM V1 prefixes every traceback line; the source line is code, not a logged value
    head = "(EngineCore_DP0 pid=391) ERROR 03-21 16:43:27 [core.py:710]     "
    for code in (
        "output = self.model_runner.execute_model(scheduler_output,",
        "outputs = await engine_core.get_output_async()",
        "logprobs = self.sampler.compute_logprobs(logits)",
    ):
        assert redact_line(head + code) == head + code
    params = "SamplingParams(n=1, stop=[], stop_token_ids=[2, 32000], max_tokens=7)"
    assert redact_line(params) == params
    dump = "SchedulerOutput(scheduled_encoder_inputs={}, num_common_prefix_blocks=[0])"
    assert redact_line(dump) == dump
    # a string is still a string, with or without spaces around "="
    assert redact_line(f"{head}prompt = '{SECRET}'") == f"{head}prompt = <redacted 6 chars>"


def test_a_line_without_a_record_head_never_opens_a_continuation() -> None:
    # a user's own print of "Output: ..." is not a log record: the lines after it stay
    redactor = LineRedactor()
    assert redactor.redact("Output: done") == "Output: <redacted 4 chars>"
    assert redactor.redact("epoch 3 loss 0.12") == "epoch 3 loss 0.12"


KEYS = ["prompt", "Input", "inputs", "output", "Output", "text", "content", "input_text"]


@given(
    key=st.sampled_from(KEYS),
    separator=st.sampled_from([": ", "=", ":", " : "]),
    quoting=st.sampled_from(["repr", "json", "raw double", "raw single", "none"]),
    tail=st.text(max_size=40),
    after=st.sampled_from(["", ", params: x", " total_time=1s}", "}}", ".", "\n"]),
)
def test_whatever_follows_a_text_key_in_any_quoting_is_removed(
    key: str, separator: str, quoting: str, tail: str, after: str
) -> None:
    # an escaped string may hold the secret anywhere; raw text is only known to start at the key
    text = tail + SECRET + tail if quoting in ("repr", "json") else SECRET + tail
    value = {
        "repr": repr(text),
        "json": json.dumps(text),
        "raw double": f'"{text}"',
        "raw single": f"'{text}'",
        "none": text,
    }[quoting]
    out = redact_line(f"INFO 03-11 06:18:50 [x.py:1] {key}{separator}{value}{after}")
    assert SECRET not in out


@given(st.lists(st.sampled_from([*LEAKING.values(), *UNTOUCHED]), min_size=1, max_size=4))
def test_redaction_is_idempotent(lines: list[str]) -> None:
    # ingest redacts again what the collector already redacted: nothing may change twice
    once = redact_line(" ".join(lines))
    assert redact_line(once) == once


@pytest.mark.parametrize(
    "prefix",
    ["", "tgi-1  | ", "2024-11-03T14:51:23.400000000Z ", "Mar 03 14:51:23 gpu-7 tgi[812]: "],
    ids=["bare", "docker compose", "docker logs -t", "journald"],
)
def test_a_supervisor_prefix_on_every_line_does_not_hide_a_continuation(prefix: str) -> None:
    # a supervisor prefixes continuation lines too: the engine's own head decides
    redactor = LineRedactor()
    first = f"{prefix}2024-11-03T14:51:23.328491Z DEBUG generate{{}}: server.rs:295: Input: hi"
    assert redactor.redact(first).endswith("Input: <redacted 2 chars>")
    assert SECRET not in redactor.redact(f"{prefix}the {SECRET} line")
    after = f"{prefix}2024-11-03T14:51:27.393883Z  INFO generate{{}}: server.rs:322: Success"
    assert redactor.redact(after) == after
