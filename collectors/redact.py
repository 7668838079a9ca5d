"""Remove prompt and output text from engine log lines, keeping ids and token counts.

Used by the log-tail collector at capture time (so prompts never reach the disk) and by the
analyzer for every log line it keeps as an example. Standard library only: the collectors run
beside a production server.

What is removed (values replaced by ``<redacted N chars>``, or ``<N token ids>`` for id lists):

* vLLM ``prompt: '...'`` / ``prompt: "..."`` and ``output: '...'`` (Python ``repr`` strings, so
  escaped quotes inside are handled);
* vLLM ``prompt_token_ids: [...]`` and ``output_token_ids: [...]``: replaced by their length,
  which is the prompt or output token count;
* SGLang ``Receive: obj=GenerateReqInput(text=...`` and ``Finish: ... out={'text': ...}`` text
  fields (``text=``, ``'text':``, ``input_text``, ``output_text``).
"""

from __future__ import annotations

import re

_REPR_STRING = r"""(?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")"""
_TEXT_FIELD = re.compile(
    r"(?P<key>\b(?:prompt|output|text|input_text|output_text)\s*[:=]\s*|['\"](?:text|output_text|"
    r"input_text)['\"]\s*:\s*)(?P<value>" + _REPR_STRING + ")"
)
_ID_LIST = re.compile(r"(?P<key>\b(?:prompt|output)_token_ids\s*[:=]\s*)\[(?P<ids>[^\]]*)\]?")


def _count_ids(ids: str) -> int:
    stripped = ids.strip()
    return 0 if not stripped else stripped.count(",") + 1


def redact_line(line: str) -> str:
    """Return ``line`` with prompt and output text removed; everything else is unchanged."""
    if "prompt" not in line and "output" not in line and "text" not in line:
        return line
    line = _TEXT_FIELD.sub(
        lambda m: f"{m.group('key')}<redacted {len(m.group('value')) - 2} chars>", line
    )
    return _ID_LIST.sub(lambda m: f"{m.group('key')}<{_count_ids(m.group('ids'))} token ids>", line)
