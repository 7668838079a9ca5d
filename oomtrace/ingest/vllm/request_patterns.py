"""vLLM's request lifecycle lines as data: each entry has the pattern (capturing ``id``, or
``ids`` comma-joined), the event it is, the version family it proves (a lower bound; ``None``
when it proves nothing), a real sample line and what that sample must yield;
``docs/formats/vllm.md`` says where in vLLM's source each form comes from.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from oomtrace.ingest.vllm.line_patterns import PREEMPT, PREEMPT_LITERAL, PREEMPT_SAMPLE, Family


@dataclass(frozen=True)
class RequestLine:
    """A request lifecycle line: ``pattern`` captures ``id`` (or ``ids``, comma-joined)."""

    name: str
    event: str
    literal: str
    pattern: str
    sample: str
    expect: Mapping[str, object]
    family: Family | None = None

    @property
    def lead(self) -> str:
        """The words the line starts with (what the classifier saw)."""
        found = re.match(r"\^([A-Za-z]+(?: [a-z]+)?)", self.pattern)
        return found.group(1) if found else ""


# The request line of every version (the one a busy server prints most).
RECEIVED: Final = r"^Received request (?P<id>[^\s:]+): (?:prompt|params): "

REQUEST_LINES: Final[tuple[RequestLine, ...]] = (
    RequestLine(
        "received <= 0.11 (prompt, params, token ids)", "arrived", "Received request ", RECEIVED,
        "Received request cmpl-02f7ed907eda4ad590c0fa925b945247-0: prompt: 'The future of AI is',"
        " params: SamplingParams(n=1, presence_penalty=0.0, frequency_penalty=0.0, "
        "repetition_penalty=1.05, temperature=0.0, top_p=1.0, top_k=-1, min_p=0.0, seed=None, "
        "stop=[], stop_token_ids=[], bad_words=[], include_stop_str_in_output=False, ignore_eos="
        "False, max_tokens=7, min_tokens=0, logprobs=None, prompt_logprobs=None, "
        "skip_special_tokens=True, spaces_between_special_tokens=True, truncate_prompt_tokens="
        "None, guided_decoding=None, extra_args=None), prompt_token_ids: [785, 3853, 315, 15235, "
        "374], lora_request: None, prompt_adapter_request: None.",
        {"request_id": "cmpl-02f7ed907eda4ad590c0fa925b945247-0", "max_tokens": 7,
         "prompt_tokens": 5},
    ),
    RequestLine(
        "received 0.12+ (params only)", "arrived", "Received request ", RECEIVED,
        "Received request chatcmpl-5b1a: params: SamplingParams(n=1, temperature=0.7, top_p=1.0,"
        " stop=[')'], max_tokens=512, min_tokens=0, logprobs=None, structured_outputs=None, "
        "extra_args=None), lora_request: None.",
        {"request_id": "chatcmpl-5b1a", "max_tokens": 512, "prompt_tokens": None},
    ),
    RequestLine(
        "request details 0.12+ (DEBUG)", "arrived", " details: prompt: ",
        r"^Request (?P<id>[^\s:]+) details: prompt: ",
        "Request chatcmpl-5b1a details: prompt: 'max_tokens=9 is what I want', prompt_token_ids:"
        " [1, 2, 3], prompt_embeds shape: None.",
        {"request_id": "chatcmpl-5b1a", "prompt_tokens": 3},
    ),
    RequestLine(
        "added (engine side)", "admitted", "Added request ", r"^Added request (?P<id>\S+)$",
        "Added request cmpl-02f7ed907eda4ad590c0fa925b945247-0.",
        {"request_id": "cmpl-02f7ed907eda4ad590c0fa925b945247-0"},
    ),
    RequestLine(
        "finished (V0 AsyncLLMEngine)", "finished", "Finished request ",
        r"^Finished request (?P<id>\S+)$",
        "Finished request cmpl-50c32d7a66084c3f9980d2bf06d79900-0.",
        {"request_id": "cmpl-50c32d7a66084c3f9980d2bf06d79900-0"}, "v0",
    ),
    RequestLine(
        "aborted (V0, V1 <= 0.9; V1 0.10+ comma-joined)", "aborted", "Aborted request",
        r"^Aborted request(?:\(s\))? (?P<ids>.+)$",
        "Aborted request(s) chatcmpl-a1, chatcmpl-b2.", {"request_id": "chatcmpl-a1"},
    ),
    RequestLine(
        "aborted or failed (V1 0.8.5+)", "aborted", "Request ",
        r"^Request (?P<id>\S+) (?P<what>aborted|failed)(?: \((?P<why>[^)]*)\))?",
        "Request chatcmpl-c3 failed (engine dead).", {"request_id": "chatcmpl-c3"}, "v1-0.8.5",
    ),
    RequestLine(
        "rejected, full waiting queue", "rejected", "was rejected due to a full waiting queue",
        r"^Request (?P<id>\S+) was rejected due to a full waiting queue",
        "Request chatcmpl-d4 was rejected due to a full waiting queue (log every 100 requests)",
        {"request_id": "chatcmpl-d4"},
    ),
    RequestLine(
        "client disconnect", "aborted", "cancelled by client disconnect",
        r"^Streaming request (?P<id>\S+) cancelled by client disconnect",
        "Streaming request chatcmpl-e5 cancelled by client disconnect",
        {"request_id": "chatcmpl-e5"},
    ),
    RequestLine(
        "generated response (output logging, 0.10.1+)", "finished", "Generated response ",
        r"^Generated response (?P<id>[^\s:]+)(?P<stream> \(streaming (?:delta|complete)\))?"
        r"(?P<details> details)?: ",
        "Generated response chatcmpl-f6: output: 'Paris.', output_token_ids: [60704, 13, 2], "
        "finish_reason: stop",
        {"request_id": "chatcmpl-f6", "output_tokens": 3},
    ),
    RequestLine(
        "preempted (V0 warning)", "preempted", PREEMPT_LITERAL, PREEMPT, PREEMPT_SAMPLE,
        {"request_id": "147"}, "v0",
    ),
    RequestLine(
        "resumed after preemption (LMCache connector)", "resumed", "has been resumed",
        r"^Preempted request (?P<id>\S+) has been resumed",
        "Preempted request cmpl-9f-0 has been resumed!", {"request_id": "cmpl-9f-0"},
    ),
)  # fmt: skip
