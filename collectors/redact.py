"""Remove prompt and output text from engine log lines, keeping ids and token counts.

Used by the log-tail collector at capture time (so prompts never reach the disk) and by the
analyzer for every log line it keeps as an example. Standard library only: the collectors run
beside a production server.

Redaction fails closed. A *text key* is a name that carries request text in some engine's log:
``prompt``, ``input``, ``output``, ``text``, ``content``, ``suffix``, ``prefix`` (plural, any case,
with a prefix such as ``input_text``, ``system_prompt``, ``token_text``), ``*logprobs``, and the
2024 llama.cpp fields ``to_eval`` and ``cached``; it is followed by ``:`` or ``=``, or by a quote
(``prompt '...'``). Whatever follows one is replaced by ``<redacted N chars>``:

* a quoted string (Python ``repr``, JSON, Rust ``Debug``; escaped quotes inside handled), and the
  second half SGLang prints after `` ... `` for a long one;
* a list of strings, item by item (``text=['a', 'b']``: the batch size stays visible); any other
  bracketed value whole (chat ``content`` parts, logprob tuples, token-id prompts);
* anything else (text printed without quotes, as TGI's ``Input: {}``, a string whose closing quote
  is missing or is not followed by a delimiter, a bracket that never closes): everything to the
  end of the line. Only ``None``/``null``/``true``/``false``/numbers followed by a delimiter, and
  empty brackets, stay.

Not keys: a Python source line in a traceback (``output = self.model(x)``: spaces around ``=``
and a call on the right), and id lists of settings (``stop_token_ids``).

Token-id lists (``prompt_token_ids``, ``output_token_ids``, SGLang ``input_ids``/``output_ids``,
llama.cpp ``tokens``) become ``<N token ids>``: the count is the token count, and ids decode back
to the text. llama.cpp's DEBUG token pieces (``prompt token   3: 12345 'piece'``, ``next token:
198 'piece'``) and ``Parsing chat message: ...`` lose everything after the id.

Text printed without escaping can run over several lines (TGI's ``Input: {}`` of a chat prompt).
:class:`LineRedactor` follows one file: after a line whose text ran to its end, every following
line that does not start like a log record (a timestamp, a level, an engine prefix) is removed
whole, up to the next one that does. A line that itself does not start like a record never opens
such a run, so a program's own ``print`` cannot hide the rest of its log.

Every step is one regular-expression match at a known position or a scan over the value's
brackets, so the cost is linear in the line (``benchmarks/redact_bench.py``).
"""

from __future__ import annotations

import re

# A quoted string with backslash escapes, as an unrolled loop: linear, no backtracking.
_SQ = r"'[^'\\]*(?:\\.[^'\\]*)*'"
_DQ = r'"[^"\\]*(?:\\.[^"\\]*)*"'
_STRING = re.compile(f"{_SQ}|{_DQ}", re.DOTALL)
# Where a key may be: one search for these words (on the lowered line) finds every candidate,
# then :data:`_KEY` is matched at each. Searching for the key itself at every position, with its
# optional quote and name prefix, costs ten times more on a long line.
_HINT = re.compile(
    "prompt|input|output|text|content|suffix|prefix|token|logprobs|to_eval|cached|chat message"
)
_KEY = re.compile(
    r"(?P<ids>token_ids|input_ids|output_ids|tokens)(?:\\?['\"])?\s*[:=]\s*(?=\[)"
    r"|(?P<text>(?:prompt|input|output|text|content|suffix|prefix)s?|logprobs|input_extra|to_eval"
    r"""|cached)(?:\\?['"])?(?:\s*[:=]\s*|\s+(?=\\?['"]))"""
    r"|(?P<piece>(?:(?<=prompt )|(?<=next )|(?<=cache ))token\s*\d*\s*:\s*-?\d+\s"
    r"|(?<=parsing )chat message:\s)"
)
_NAME_CHAR = re.compile(r"[\w\\]")
# Id lists under these names only: ``stop_token_ids`` and the like are settings, not a request.
_ID_PREFIXES = ("prompt_", "output_", "input_")
# A source line in a traceback (``output = self.model(...)``), not a value: an assignment with
# spaces around ``=`` whose right side is a call or a subscript.
_ASSIGNMENT = re.compile(r"\s=\s")
_CODE = re.compile(r"(?:await\s+)?[A-Za-z_][\w.]*\s*[(\[]")
_EMPTY = re.compile(r"\[\s*\]|\{\s*\}|\(\s*\)")
_NON_ASCII = re.compile(r"[^\x00-\x7f]")
_LITERAL = re.compile(
    r"(?:None|null|nil|true|false|True|False|-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
    r"|Some\((?:true|false|-?\d+(?:\.\d+)?)\))"
    # followed by a delimiter: the end, a closing bracket, or a comma before the next field
    r"(?=\s*(?:$|[)\]}]|\.\s*$|,\s*(?:$|\\?['\"]?[\w.-]+\\?['\"]?\s*[:=])))"
)
_MARKER = re.compile(r"<redacted \d+ chars>|<\d+ token ids>")
# After a closed string: a delimiter, or the next ``key=`` of a span; anything else means the
# quote was inside raw text (early SGLang printed text in double quotes without escaping).
_AFTER_STRING = re.compile(r"\s*(?:$|[,;:)\]}]|\.\s*$)|\s+[\w.-]+\s*[=:]|\s+\.\.\.\s")
_CONTINUED = re.compile(r"\s\.\.\.\s(?=['\"\[])")
_ID_LIST = re.compile(r"\[[\d\s,]*\]")
_ID_LIST_CUT = re.compile(r"\[[\d\s,]*$")
_STRING_LIST = re.compile(rf"\[\s*(?:(?:{_SQ}|{_DQ})\s*,\s*)*(?:(?:{_SQ}|{_DQ})\s*)?\]", re.DOTALL)
_BRACKET_PART = re.compile(
    rf"""(?:[^\[\](){{}}'"]+|{_SQ}|{_DQ})+|[\[({{]+|[\])}}]+|['"]""", re.DOTALL
)
_OPENERS, _CLOSERS = "[({", "])}"
# How a log record starts. A supervisor prefixes every printed line, continuation lines too
# (docker compose ``svc  | ``, ``docker logs -t`` / ``kubectl --timestamps``, kubectl
# ``[pod/...]``, journald, Slurm ``N: ``), so those are passed over first; what follows them must
# be an engine's own head: a level, a timestamp followed by a level within a few words (TGI,
# Python logging), SGLang's ``[date time]``, llama.cpp's ``srv``/``slot``/``que`` or timing
# prefix, a JSON object, or a traceback. vLLM's ``(APIServer pid=1)`` and colour codes may come
# before it.
_ISO_TS = r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(?::[\d.,]+)?(?:Z|[+-]\d\d:?\d\d)?"
_LEVEL = r"(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL|TRACE|VERB)\b"
_RECORD_HEAD = re.compile(
    r"(?:[A-Za-z0-9][\w.-]* +\| )?"  # docker compose
    r"(?:\[(?:pod|po)/[^\]\s]+\] )?"
    rf"(?:(?:[A-Z][a-z]{{2}} [ \d]\d [\d:.]+|{_ISO_TS}) [^\s\[\]:]+ [^\s\[\]:]+\[\d+\]: )?"
    r"(?: *\d+: )?"  # Slurm task
    rf"(?:{_ISO_TS} +(?={_ISO_TS}|\S+ +{_LEVEL}))?"  # an outer timestamp before the engine's
    r"(?:\x1b\[[0-9;]*m)*(?:\(\w[^)\n]{0,80}\)(?:\x1b\[[0-9;]*m)*\s+)*"
    rf"(?:{_LEVEL}|{_ISO_TS}[\s-]+(?:\S+[\s-]+){{0,4}}?{_LEVEL}|\[\d{{4}}-\d\d-\d\d[ T]\d\d:"
    r"|\d+\.\d\d\.\d{3}\.\d{3} [IWED] |(?:srv|slot|que) +\w+: |\{\"|Traceback \(most recent)"
)


def _redacted(n: int) -> str:
    return f"<redacted {n} chars>"


def _count_ids(ids: str) -> int:
    return 0 if not ids.strip("[] \t") else ids.count(",") + 1


def _bracket_end(line: str, start: int) -> int | None:
    """End of the bracketed value opening at ``start`` (quotes respected); None if it never
    closes on this line. Text and strings between brackets are skipped a run at a time."""
    depth, pos = 0, start
    while (part := _BRACKET_PART.match(line, pos)) is not None:
        token, pos = part.group(), part.end()
        if token[0] in _OPENERS:
            depth += len(token)
        elif token[0] in _CLOSERS:
            if depth <= len(token):
                return part.start() + depth
            depth -= len(token)
        elif token in ("'", '"'):
            return None  # a quote that never closes
    return None


def _string_value(line: str, start: int) -> tuple[int, str] | None:
    """A closed string at ``start`` (plus SGLang's `` ... 'tail'``), or None."""
    pieces, pos = [], start
    while True:
        string = _STRING.match(line, pos)
        if string is None or _AFTER_STRING.match(line, string.end()) is None:
            return None
        pieces.append(_redacted(len(string.group()) - 2))
        pos = string.end()
        more = _CONTINUED.match(line, pos)
        if more is None or line[more.end()] == "[":
            return pos, " ... ".join(pieces)
        pos = more.end()


def _text_value(line: str, start: int) -> tuple[int, str] | None:
    """Where the value of a text key ends and what replaces it; None: it runs to the end."""
    if start >= len(line):
        return None
    first = line[start]
    if first in "'\"":
        return _string_value(line, start)
    if first in _OPENERS:
        if empty := _EMPTY.match(line, start):
            return empty.end(), empty.group()
        flat = _STRING_LIST.match(line, start) if first == "[" else None
        if flat is not None:
            items = _STRING.sub(lambda s: _redacted(len(s.group()) - 2), flat.group())
            return flat.end(), items
        end = _bracket_end(line, start)
        return None if end is None else (end, _redacted(end - start))
    kept = _LITERAL.match(line, start)
    return None if kept is None else (kept.end(), kept.group())


def _id_value(line: str, start: int) -> tuple[int, str] | None:
    ids = _ID_LIST.match(line, start)
    if ids is None:
        cut = _ID_LIST_CUT.match(line, start)
        if cut is not None:  # a list cut off by the line's end: still only ids
            return len(line), f"<{_count_ids(cut.group())} token ids>"
        end = _bracket_end(line, start)
        return None if end is None else (end, _redacted(end - start))
    parts, pos = [f"<{_count_ids(ids.group())} token ids>"], ids.end()
    while (more := _CONTINUED.match(line, pos)) and (ids := _ID_LIST.match(line, more.end())):
        parts.append(f"<{_count_ids(ids.group())} token ids>")
        pos = ids.end()
    return pos, " ... ".join(parts)


def _lowered(line: str) -> str:
    """The line in lower case, index for index (a few non-ASCII letters change length when
    lowered: they are blanked first)."""
    lowered = line.lower()
    return lowered if len(lowered) == len(line) else _NON_ASCII.sub("\0", line).lower()


def _not_a_value(lowered: str, key: re.Match[str]) -> bool:
    at = key.start()
    if key.group("ids") and at and lowered[at - 1] == "_":
        return not lowered.endswith(_ID_PREFIXES, 0, at)
    return (
        _ASSIGNMENT.search(key.group()) is not None and _CODE.match(lowered, key.end()) is not None
    )


def _next_key(lowered: str, pos: int) -> re.Match[str] | None:
    """The first key from ``pos`` on: a hint word that begins a name (or follows ``_`` in one,
    as in ``input_text``), after an optional quote, and is followed by its separator."""
    while (hit := _HINT.search(lowered, pos)) is not None:
        at = pos = hit.start()
        pos += 1
        if at and lowered[at - 1] != "_":
            before = at - 1
            if lowered[before] in "'\"":
                before -= 1
                if before >= 0 and lowered[before] == "\\":
                    before -= 1  # an escaped quote: a JSON body logged inside a JSON string
            if before >= 0 and _NAME_CHAR.match(lowered, before):
                continue  # inside a longer name: "xprompt", "\\prompt"
        key = _KEY.match(lowered, at)
        if key is None or _not_a_value(lowered, key):
            continue
        return key
    return None


def _redact(line: str) -> tuple[str, bool]:
    """The line without its text values, and whether a value ran to the line's end."""
    lowered = _lowered(line)
    out: list[str] = []
    pos = 0
    while (key := _next_key(lowered, pos)) is not None:
        out.append(line[pos : key.end()])
        start = key.end()
        if (done := _MARKER.match(line, start)) and _AFTER_STRING.match(line, done.end()):
            value: tuple[int, str] | None = (done.end(), done.group())  # redacted before
        elif key.group("ids"):
            value = _id_value(line, start)
        elif key.group("text"):
            value = _text_value(line, start)
        else:
            value = None  # a raw token piece or chat message: nothing after it is safe
        if value is None:
            # to the end of the line; an opening quote is not part of the text
            quoted = line.startswith(("'", '"'), start)
            out.append(_redacted(len(line) - start - quoted) if start < len(line) else "")
            return "".join(out), True
        pos, replacement = value
        out.append(replacement)
    if not out:
        return line, False
    out.append(line[pos:])
    return "".join(out), False


def redact_line(line: str) -> str:
    """Return ``line`` with prompt and output text removed; everything else is unchanged."""
    return _redact(line)[0]


def has_text_key(line: str) -> bool:
    """Whether ``line`` names any text key (a line an example must not quote even redacted)."""
    return _next_key(_lowered(line), 0) is not None


class LineRedactor:
    """Redacts the lines of one file in order, removing the continuation lines of text that ran
    past the end of a log record's first line (see the module docstring)."""

    def __init__(self) -> None:
        self._open = False

    def redact(self, line: str) -> str:
        head = _RECORD_HEAD.match(line) is not None
        if self._open and not head:
            return _redacted(len(line)) if line else line
        text, ran_to_end = _redact(line)
        self._open = ran_to_end and head
        return text

    def reset(self) -> None:
        """Forget the previous line (the file was truncated or replaced)."""
        self._open = False

    def continue_unseen_line(self) -> None:
        """The previous line could not be read: it may have held text that runs on, so the
        lines after it are removed until one starts like a log record."""
        self._open = True
