"""Text from logs is data, never markup: a request id full of markup renders as text in every
format."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import pytest
from markdown_it import MarkdownIt

from oomtrace.report import ReportInputs, build_report, escape, render
from tests.unit.report.scenario import incident_findings, incident_lanes, incident_trace

HOSTILE = (
    "<script>alert(1)</script>",
    '"><img src=x onerror=alert(1)>',
    "a|b`code`|c",
    "[click](http://evil.example)",
    "**bold** _em_ ~~strike~~ $x$",
    "\x1b[31mred\x1b[0m",
    "# heading",
)


@pytest.fixture(scope="module")
def hostile_report() -> object:
    ids = HOSTILE[:3]
    trace = incident_trace(ids)
    return build_report(ReportInputs(incident_findings(ids), trace, lanes=incident_lanes(ids)))


def _markdown_html(text: str) -> str:
    return MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(text)


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)

    def handle_data(self, data: str) -> None:
        self.text.append(data)


@pytest.mark.parametrize("text", HOSTILE)
def test_markdown_escaping_renders_exactly_the_text(text: str) -> None:
    # WHEN escaped text is rendered by a CommonMark parser with GFM tables
    rendered = _markdown_html(escape.markdown(text))
    parsed = _Collector()
    parsed.feed(rendered)
    # THEN it is one paragraph of exactly that text (control characters made visible)
    assert parsed.tags == ["p"]
    assert "".join(parsed.text).strip() == escape.visible(text)


@pytest.mark.parametrize("text", HOSTILE)
def test_markdown_escaping_keeps_a_table_cell_one_cell(text: str) -> None:
    table = f"| a | b |\n|---|---|\n| {escape.markdown(text)} | x |\n"
    rendered = _markdown_html(table)
    assert rendered.count("<td>") == 2
    assert "<script" not in rendered
    assert "<img" not in rendered


def test_terminal_escaping_makes_control_characters_visible() -> None:
    assert escape.terminal("a\x1b[31mb\u202ec\n") == "a\\x1b[31mb\\u202ec\\x0a"


def test_script_json_cannot_close_the_script_element() -> None:
    text = escape.script_json({"id": "</script><script>alert(1)</script>&\u2028"})
    assert "</" not in text
    assert "<" not in text
    assert json.loads(text) == {"id": "</script><script>alert(1)</script>&\u2028"}


def test_markup_ids_are_text_in_the_terminal(hostile_report: object) -> None:
    text = render(hostile_report, "text").text  # type: ignore[arg-type]
    for hostile in HOSTILE[:3]:
        assert hostile in text
    assert "\x1b" not in text


def test_markup_ids_are_text_in_json(hostile_report: object) -> None:
    doc = json.loads(render(hostile_report, "json").text)  # type: ignore[arg-type]
    ids = [c["request_id"] for c in doc["verdict"]["culprits"]]
    assert ids == list(HOSTILE[:3])


def test_markup_ids_are_text_in_markdown(hostile_report: object) -> None:
    # GIVEN the Markdown report, rendered as a tracker would render it
    rendered = _markdown_html(render(hostile_report, "markdown", asset_dir="c").text)  # type: ignore[arg-type]
    parsed = _Collector()
    parsed.feed(rendered)
    # THEN no element came from an id, and every id reads as itself
    assert "script" not in parsed.tags
    assert parsed.tags.count("img") == 4  # the four charts, nothing else
    assert all(re.fullmatch(r"c/\w+\.svg", src) for src in re.findall(r'src="([^"]+)"', rendered))
    text = "".join(parsed.text)
    for hostile in HOSTILE[:3]:
        assert hostile in text


def test_markup_ids_are_text_in_html(hostile_report: object) -> None:
    # GIVEN the HTML page without its scripts (the browser test runs them)
    page = render(hostile_report, "html").text  # type: ignore[arg-type]
    body = page[: page.index("<script>")]
    parsed = _Collector()
    parsed.feed(body)
    # THEN the ids are text nodes and created no element
    assert "img" not in parsed.tags
    assert "script" not in parsed.tags
    text = "".join(parsed.text)
    for hostile in HOSTILE[:3]:
        assert hostile in text
    specs = page[page.index('id="oomtrace-specs">') :]
    assert "<script>alert" not in specs[: specs.index("</script>")]
