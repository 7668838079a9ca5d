"""Prompts and outputs never survive redaction; ids and token counts do."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from collectors.redact import redact_line

RECEIVED = (
    "INFO 03-11 06:18:50 [logger.py:39] Received request cmpl-02f7-0: prompt: 'The future of "
    "AI is', params: SamplingParams(n=1, max_tokens=7, min_tokens=0), prompt_token_ids: [785, "
    "3853, 315, 15235, 374], lora_request: None, prompt_adapter_request: None."
)


def test_vllm_received_line_keeps_id_params_and_token_count() -> None:
    out = redact_line(RECEIVED)
    assert "future" not in out
    assert "cmpl-02f7-0" in out
    assert "max_tokens=7" in out
    assert "prompt: <redacted 19 chars>" in out
    assert "prompt_token_ids: <5 token ids>" in out


def test_escaped_quotes_inside_the_prompt_are_part_of_the_prompt() -> None:
    line = r"""prompt: 'it\'s "quoted", params: x', params: SamplingParams(max_tokens=3)"""
    out = redact_line(line)
    assert "quoted" not in out
    assert "params: SamplingParams(max_tokens=3)" in out


def test_generated_response_output_is_removed() -> None:
    line = (
        "Generated response chatcmpl-9: output: 'Sure, here it is', output_token_ids: "
        "[1, 2, 3], finish_reason: stop"
    )
    out = redact_line(line)
    assert "Sure" not in out
    assert "output_token_ids: <3 token ids>" in out
    assert "finish_reason: stop" in out


def test_sglang_receive_text_is_removed() -> None:
    line = (
        "Receive: obj=GenerateReqInput(text='hello secret world', "
        "sampling_params={'max_new_tokens': 5})"
    )
    out = redact_line(line)
    assert "secret" not in out
    assert "'max_new_tokens': 5" in out


@given(st.text(alphabet=st.characters(blacklist_characters="'\\"), max_size=50))
def test_any_single_quoted_prompt_is_removed(prompt: str) -> None:
    out = redact_line(f"Received request r: prompt: '{prompt}', params: x")
    if prompt.strip():
        assert f"'{prompt}'" not in out
    assert "<redacted" in out
