"""Hostile text from logs (markup, escapes) and what a reader's renderer makes of it."""

from __future__ import annotations

from html.parser import HTMLParser

from markdown_it import MarkdownIt

HOSTILE = (
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "a|b`code`|c",
    "[click](http://evil.example)",
    "**bold** _em_ ~~strike~~ $x$",
    "\x1b[31mred\x1b[0m",
    "# heading",
)


def markdown_html(text: str) -> str:
    """``text`` as a tracker renders Markdown: CommonMark with GFM tables."""
    return MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(text)


class Collector(HTMLParser):
    """The tags and the text of an HTML fragment."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)

    def handle_data(self, data: str) -> None:
        self.text.append(data)
