"""Request-line forms the capture-time redaction must also cover: JSON bodies, batched prompts,
token-id lists under SGLang names, and strings cut off before their closing quote."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from collectors.redact import redact_line


def test_json_request_body_content_is_removed_and_other_fields_kept() -> None:
    # GIVEN vLLM's `Request ... JSON body:` line (VLLM_REQUEST_BODY_LOG_LEVEL) for a chat request
    body = {"model": "m", "messages": [{"role": "user", "content": "a secret"}], "max_tokens": 5}
    prefix = "DEBUG 03-11 06:18:50 [request_logger.py:60] Request chatcmpl-1 JSON body: "
    line = prefix + json.dumps(body)
    # WHEN it is redacted
    out = redact_line(line)
    # THEN the message text is gone, the role, model and limits stay
    assert "secret" not in out
    assert '"content": <redacted 8 chars>' in out
    assert '"max_tokens": 5' in out
    assert '"role": "user"' in out


def test_batched_prompts_in_a_list_are_each_removed() -> None:
    line = "Receive: obj=GenerateReqInput(rid='r-1', text=['first secret', 'second secret'], x=1)"
    out = redact_line(line)
    assert "secret" not in out
    assert "rid='r-1'" in out
    assert "text=[<redacted 12 chars>, <redacted 13 chars>]" in out


def test_sglang_token_id_lists_become_counts() -> None:
    line = "Receive: obj=GenerateReqInput(rid='r', input_ids=[101, 7592, 2088], sampling_params={})"
    assert "input_ids=<3 token ids>" in redact_line(line)


def test_a_prompt_cut_off_before_its_closing_quote_is_removed_to_the_end_of_the_line() -> None:
    # GIVEN a line truncated in the middle of the prompt (no closing quote)
    line = "INFO 03-11 06:18:50 [logger.py:39] Received request r-2: prompt: 'the start of a sec"
    # WHEN redacted THEN nothing of the prompt survives
    out = redact_line(line)
    assert out.endswith("prompt: <redacted 18 chars>")


@given(st.text(max_size=60))
def test_any_python_repr_prompt_is_removed(prompt: str) -> None:
    # vLLM logs the prompt with %r, so any text (quotes, backslashes, newlines) arrives as repr
    line = f"Received request r: prompt: {prompt!r}, params: SamplingParams(max_tokens=3)"
    assert redact_line(line) == (
        f"Received request r: prompt: <redacted {len(repr(prompt)) - 2} chars>, "
        "params: SamplingParams(max_tokens=3)"
    )


@given(st.text(max_size=60))
def test_any_json_prompt_is_removed(prompt: str) -> None:
    out = redact_line("Request r JSON body: " + json.dumps({"prompt": prompt, "max_tokens": 9}))
    redacted = f"<redacted {len(json.dumps(prompt)) - 2} chars>"
    assert out == f'Request r JSON body: {{"prompt": {redacted}, "max_tokens": 9}}'
