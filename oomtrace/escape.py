"""Escaping for text that came from logs (request ids, messages, file names, user files).

Such text is data, never markup: a request id like ``<script>alert(1)</script>`` or
``a|b`` must show as those characters in every format. Each function makes the text safe for
one output; all first make every character that does not print visible (:func:`visible`),
because an ANSI escape sequence in a request id would otherwise repaint the reader's terminal, a
bidirectional override would reorder what they read, and a zero-width or non-breaking space
would hide a difference between two ids. :func:`terminal` is the one escape for text shown on a
terminal (every renderer in :mod:`oomtrace.terminal` uses it).
"""

from __future__ import annotations

import html as _html
import json
import re
from typing import Any

# Marks that open Markdown syntax anywhere in a line (emphasis, code spans, links, tables,
# strike-through, GitHub math) are backslash-escaped; CommonMark renders an escaped mark as
# itself in every dialect. Underscores inside a word never open emphasis, so ``kv_exhaustion``
# stays readable; ``(`` and ``!`` cannot open a link once ``[`` is escaped.
_MD_INLINE = re.compile(r"([\\`*\[\]|~$])|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
# Marks that only mean something at the start of a line (headings, lists, quotes, rules).
_MD_LINE_START = re.compile(r"^([#+\-=])|^(\d+)([.)])")
# Bare URLs and www. names that GitHub would turn into links.
_MD_AUTOLINK = re.compile(r"(?i)(://|\bwww\.)")


def _code(char: str) -> str:
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def visible(text: str) -> str:
    """Every character that does not print (``str.isprintable``: controls, format marks such as
    bidi overrides and zero-width spaces, separators other than the space, unassigned code
    points) shown as ``\\xNN`` / ``\\uNNNN`` / ``\\UNNNNNNNN``; everything else as is."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _code(c) for c in text)


def terminal(text: str, width: int | None = None) -> str:
    """For a terminal: nothing in ``text`` can move the cursor, recolour, reorder or hide output.
    With ``width``, text longer than that is cut to ``width`` characters ending in ``…``."""
    shown = visible(text)
    if width is not None and len(shown) > width:
        return shown[: width - 1] + "…"
    return shown


def markdown(text: str) -> str:
    """For Markdown prose and table cells: ``<``, ``>`` and ``&`` become entities (so raw HTML
    is never interpreted), Markdown punctuation is backslash-escaped (no emphasis, links, code
    spans, autolinks, line-start lists or headings, table pipes), and line breaks show as
    ``\\x0a`` (a cell is one line)."""
    return _MD_LINE_START.sub(_escape_line_start, markdown_inline(text))


def markdown_inline(text: str) -> str:
    """:func:`markdown` for text that never starts a line (a table cell, the value after a
    label): the same escapes except those of marks that only mean something at the start of a
    line, so that ``-1.49 GiB`` and ``43.61 GiB`` read as written."""
    flat = visible(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    inline = _MD_INLINE.sub(lambda m: "\\" + m.group(0), flat)
    return _MD_AUTOLINK.sub(lambda m: m.group(0).replace(":", "\\:").replace(".", "\\."), inline)


def _escape_line_start(match: re.Match[str]) -> str:
    if match.group(1):
        return "\\" + match.group(1)
    return match.group(2) + "\\" + match.group(3)


def html(text: str) -> str:
    """For HTML text and attribute values (quotes escaped too)."""
    return _html.escape(visible(text), quote=True)


def script_json(value: Any) -> str:
    """JSON that can sit inside ``<script>``: ``<``, ``>``, ``&`` and the two JavaScript line
    separators are written as ``\\uNNNN`` escapes, so no data can close the script element or
    open a comment, and the text is still the same JSON value."""
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    for char in ("<", ">", "&", "\u2028", "\u2029"):
        text = text.replace(char, f"\\u{ord(char):04x}")
    return text
