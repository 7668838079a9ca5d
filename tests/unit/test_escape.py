"""Text from logs is data, never markup: each output's escape makes hostile text read as itself."""

from __future__ import annotations

import json

import pytest

from oomtrace import escape
from tests.hostile import HOSTILE, Collector, markdown_html


@pytest.mark.parametrize("text", HOSTILE)
def test_markdown_escaping_renders_exactly_the_text(text: str) -> None:
    # WHEN escaped text is rendered by a CommonMark parser with GFM tables
    rendered = markdown_html(escape.markdown(text))
    parsed = Collector()
    parsed.feed(rendered)
    # THEN it is one paragraph of exactly that text (control characters made visible)
    assert parsed.tags == ["p"]
    assert "".join(parsed.text).strip() == escape.visible(text)


@pytest.mark.parametrize("text", HOSTILE)
def test_markdown_escaping_keeps_a_table_cell_one_cell(text: str) -> None:
    table = f"| a | b |\n|---|---|\n| {escape.markdown(text)} | x |\n"
    rendered = markdown_html(table)
    assert rendered.count("<td>") == 2
    assert "<script" not in rendered
    assert "<img" not in rendered


def test_terminal_escaping_makes_control_characters_visible() -> None:
    assert escape.terminal("a\x1b[31mb\u202ec\n") == "a\\x1b[31mb\\u202ec\\x0a"


def test_terminal_escaping_shows_what_would_hide_a_difference_between_two_ids() -> None:
    # GIVEN ids that look alike on a screen: a zero-width space, a no-break space, a tab, a tag
    # character outside the basic plane; and one that prints as it is
    hidden = "req\u200b1 req\xa01\treq\U000e00411"
    # WHEN escaped for a terminal THEN each hidden character is spelt out, printable text is kept
    assert escape.terminal(hidden) == "req\\u200b1 req\\xa01\\x09req\\U000e00411"
    assert escape.terminal("résumé-7 ≈ 3 GiB") == "résumé-7 ≈ 3 GiB"


def test_terminal_escaping_cuts_to_a_width_after_escaping() -> None:
    assert escape.terminal("abcdef", width=4) == "abc…"
    assert escape.terminal("a\x1bbc", width=5) == "a\\x1…"
    assert escape.terminal("abcd", width=4) == "abcd"


def test_script_json_cannot_close_the_script_element() -> None:
    text = escape.script_json({"id": "</script><script>alert(1)</script>&\u2028"})
    assert "</" not in text
    assert "<" not in text
    assert json.loads(text) == {"id": "</script><script>alert(1)</script>&\u2028"}


def test_markdown_inside_a_line_escapes_marks_but_not_what_only_starts_a_line() -> None:
    # a table cell or the value after a label never starts a line: a sign or a decimal point
    # reads as written, while every mark that works anywhere is still escaped
    assert escape.markdown_inline("-1.49 GiB") == "-1.49 GiB"
    assert escape.markdown_inline("43.61 GiB") == "43.61 GiB"
    assert escape.markdown_inline("# not a heading") == "# not a heading"
    assert escape.markdown_inline("a|b *c* <i>") == "a\\|b \\*c\\* &lt;i&gt;"
    assert escape.markdown_inline("see http://x.example") == "see http\\://x.example"
    # prose still escapes both
    assert escape.markdown("-1.49 GiB") == "\\-1.49 GiB"
