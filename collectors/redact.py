"""Remove prompt and output text from engine log lines, keeping ids and token counts.

Used by the log-tail collector at capture time (so prompts never reach the disk) and by the
analyzer for every log line it keeps as an example. Standard library only: the collectors run
beside a production server.

What is removed (values replaced by ``<redacted N chars>``, or ``<N token ids>`` for id lists):

* vLLM ``prompt: '...'`` / ``prompt: "..."`` and ``output: '...'`` (Python ``repr`` strings, so
  escaped quotes inside are handled);
* vLLM ``prompt_token_ids: [...]`` and ``output_token_ids: [...]``, SGLang ``input_ids=[...]`` and
  ``output_ids=[...]``: replaced by their length, which is the prompt or output token count (token
  ids decode back to the text, so they are the prompt as much as the text is);
* SGLang ``Receive: obj=GenerateReqInput(text=...`` and ``Finish: ... out={'text': ...}`` text
  fields (``text=``, ``'text':``, ``input_text``, ``output_text``);
* JSON request bodies (vLLM's ``Request ... JSON body:``): quoted keys ``"prompt"``,
  ``"content"``, ``"input"``, ``"suffix"``, ``"text"``, ``"output"``;
* a list of strings under any of those keys (batched prompts: ``text=['a', 'b']``);
* a string that is cut off before its closing quote (a line truncated by the engine or by the
  collector's line-length cap): everything to the end of the line is removed.
"""

from __future__ import annotations

import re

_REPR_STRING = r"""(?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")"""
# A string whose closing quote is missing: the rest of the line is the prompt.
_UNTERMINATED = r"""(?:'(?:[^'\\]|\\.)*\\?$|"(?:[^"\\]|\\.)*\\?$)"""
_TEXT_KEYS = r"prompt|output|text|input_text|output_text|content|input|suffix"
_KEY = rf"""(?P<key>(?P<q>['"]?)\b(?:{_TEXT_KEYS})(?P=q)\s*[:=]\s*)"""
_TEXT_FIELD = re.compile(_KEY + "(?P<value>" + _REPR_STRING + "|" + _UNTERMINATED + ")")
_TEXT_LIST = re.compile(
    _KEY + r"(?P<items>\[(?:\s*" + _REPR_STRING + r"\s*,?)+\s*(?:\]|$)|\[\s*" + _UNTERMINATED + ")"
)
_STRING_IN_LIST = re.compile(_REPR_STRING + "|" + _UNTERMINATED)
_CLOSED = re.compile(_REPR_STRING)
_ID_LIST = re.compile(
    r"""(?P<key>\b(?:(?:prompt|output)_token_ids|input_ids|output_ids)['"]?\s*[:=]\s*)"""
    r"\[(?P<ids>[^\]]*)\]?"
)
_HINTS = ("prompt", "output", "text", "content", "input", "suffix", "_ids")


def _count_ids(ids: str) -> int:
    stripped = ids.strip()
    return 0 if not stripped else stripped.count(",") + 1


def _redacted(value: str) -> str:
    closed = _CLOSED.fullmatch(value) is not None
    return f"<redacted {len(value) - (2 if closed else 1)} chars>"


def redact_line(line: str) -> str:
    """Return ``line`` with prompt and output text removed; everything else is unchanged."""
    if not any(hint in line for hint in _HINTS):
        return line
    line = _TEXT_LIST.sub(
        lambda m: (
            m.group("key") + _STRING_IN_LIST.sub(lambda s: _redacted(s.group(0)), m.group("items"))
        ),
        line,
    )
    line = _TEXT_FIELD.sub(lambda m: m.group("key") + _redacted(m.group("value")), line)
    return _ID_LIST.sub(lambda m: f"{m.group('key')}<{_count_ids(m.group('ids'))} token ids>", line)
