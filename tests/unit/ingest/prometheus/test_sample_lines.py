"""The vectorised path for plain sample lines agrees with prometheus_client's parser, and
arbitrary text never makes the Prometheus text parser raise anything but its refusals."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.errors import InputError
from oomtrace.ingest.parser_api import ClockOptions, ParseContext
from oomtrace.ingest.prometheus.dialects import LABELS, SERIES
from oomtrace.ingest.prometheus.sample_lines import PLAIN, parse_samples
from oomtrace.ingest.prometheus.text_parser import PARSER
from oomtrace.ingest.text.input_file import InputFile

NAMES = sorted({s.name for s in SERIES})
label_names = st.sampled_from([*LABELS, "le", "finished_reason", "moe_ep_rank", "x_1"])
# Label values as exporters write them: any text, with quotes, backslashes and newlines escaped.
label_values = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12
)
numbers = st.one_of(
    st.integers(-(10**12), 10**19).map(str),
    st.floats(allow_nan=False, allow_infinity=False, width=64).map(repr),
    st.sampled_from(["nan", "NaN", "+Inf", "-Inf", "1.843211e+06", "9223372036854775794"]),
)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@st.composite
def sample_lines(draw: st.DrawFn) -> str:
    name = draw(st.sampled_from(NAMES))
    labels = draw(st.dictionaries(label_names, label_values, max_size=5))
    separator = draw(st.sampled_from([",", ", "]))
    body = separator.join(f'{k}="{_escape(v)}"' for k, v in labels.items())
    braces = f"{{{body}}}" if labels or draw(st.booleans()) else ""
    stamp = draw(st.one_of(st.none(), st.integers(0, 4 * 10**12)))
    tail = "" if stamp is None else f" {stamp}"
    return f"{name}{braces} {draw(numbers)}{tail}"


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(line=sample_lines())
def test_plain_path_agrees_with_prometheus_client(line: str) -> None:
    # GIVEN one well-formed sample line of a mapped family
    (expected,) = [s for f in text_string_to_metric_families(line) for s in f.samples]
    frame = pl.DataFrame(
        {
            "line": [line],
            "name": [line.split("{", maxsplit=1)[0].split(" ", maxsplit=1)[0]],
            "scrape": [0],
        }
    )
    # WHEN oomtrace reads it (plain lines by Polars, the rest by prometheus_client)
    raw, _ = parse_samples(frame, SourceDiagnostics("t", "prometheus", "n"))
    assert raw is not None
    row = raw.row(0, named=True)
    # THEN name, value, timestamp and every label oomtrace uses are the same
    assert row["name"] == expected.name
    assert _same(row["value"], float(expected.value))
    stamp = None if expected.timestamp is None else round(float(expected.timestamp) * 1000)
    got = None if row["ts"] is None else round(row["ts"].timestamp() * 1000)
    assert got == stamp
    for label in LABELS:
        assert row[label] == expected.labels.get(label)


def test_lines_with_escapes_are_not_plain() -> None:
    assert pl.Series(['x{a="b\\"c"} 1']).str.contains(PLAIN).to_list() == [False]
    assert pl.Series(['x{a="b", c="d",} 1 123']).str.contains(PLAIN).to_list() == [True]


def _parse(path: Path) -> SourceDiagnostics:
    ctx = ParseContext(clock=ClockOptions(), mtime=datetime(2025, 1, 1, tzinfo=UTC))
    diag = SourceDiagnostics(path.name, PARSER.name, "n")
    PARSER.parse(InputFile(path, path.name), ctx, diag)
    return diag


@pytest.mark.slow
@settings(max_examples=80, deadline=None)
@given(
    body=st.lists(
        st.one_of(sample_lines(), st.text(max_size=60), st.sampled_from(["1741942800", "# x"])),
        max_size=12,
    )
)
def test_arbitrary_exposition_after_a_time_line_never_raises(
    tmp_path_factory: pytest.TempPathFactory, body: list[str]
) -> None:
    path = tmp_path_factory.mktemp("p") / "m.prom"
    path.write_text("# oomtrace-scrape 2025-03-14T09:00:00Z\n" + "\n".join(body), encoding="utf-8")
    diag = _parse(path)
    # every line is either used or counted under a reason
    assert diag.lines_read == diag.lines_recognised + diag.lines_skipped


@settings(max_examples=80, deadline=None)
@given(data=st.binary(max_size=300))
def test_arbitrary_bytes_only_ever_raise_a_refusal(
    tmp_path_factory: pytest.TempPathFactory, data: bytes
) -> None:
    path = tmp_path_factory.mktemp("b") / "m.prom"
    path.write_bytes(data)
    message = ""
    try:
        _parse(path)
    except InputError as err:
        message = str(err)
    assert not message or "several scrapes with no time" in message or "zone only" in message
