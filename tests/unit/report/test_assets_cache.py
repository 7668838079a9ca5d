"""The same JavaScript bundle and the same chart SVG are built once per user and version, then
read from the user's cache folder: a report after the first does not pay for them again."""

from __future__ import annotations

from pathlib import Path

import pytest
import vl_convert

from oomtrace import report as report_package
from oomtrace import user_cache
from oomtrace.report import ReportInputs, build_report, chart_svg
from tests.unit.report.scenario import incident_findings, incident_trace


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv(user_cache.ENV, str(folder))
    report_package.javascript_bundle.cache_clear()
    return folder


@pytest.mark.slow  # bundling Vega, Vega-Lite and vega-embed takes seconds
def test_the_bundle_is_built_once_then_read_from_the_cache(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN an empty cache folder, WHEN the bundle is asked for
    calls: list[str] = []
    real = vl_convert.javascript_bundle

    def counted(snippet: str, vl_version: str) -> str:
        calls.append(vl_version)
        text: str = real(snippet, vl_version=vl_version)
        return text

    monkeypatch.setattr(vl_convert, "javascript_bundle", counted)
    first = report_package.javascript_bundle()
    # THEN it was built and stored under a name that holds the versions
    assert len(calls) == 1
    (stored,) = (cache / "javascript").iterdir()
    assert stored.name.startswith("vl-convert-")
    assert stored.read_text(encoding="utf-8") == first
    # AND another process (a fresh in-process cache) reads it instead of building it
    report_package.javascript_bundle.cache_clear()
    assert report_package.javascript_bundle() == first
    assert len(calls) == 1


def test_a_chart_svg_is_drawn_once(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    chart = build_report(ReportInputs(incident_findings(), incident_trace())).charts[0]
    first = chart_svg(chart)
    assert first.startswith("<svg")

    def fail(*_: object, **__: object) -> str:
        raise AssertionError("the SVG was drawn again")

    monkeypatch.setattr(vl_convert, "vegalite_to_svg", fail)
    assert chart_svg(chart) == first


def test_a_cache_folder_that_cannot_be_written_costs_nothing_but_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a cache "folder" that is a file
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("", encoding="utf-8")
    monkeypatch.setenv(user_cache.ENV, str(blocked))
    # WHEN something is cached there, THEN the value is still made and returned
    assert user_cache.cached_text("svg", "x.svg", lambda: "<svg/>") == "<svg/>"


def test_content_keyed_folders_keep_only_the_newest_entries(cache: Path) -> None:
    for i in range(5):
        user_cache.cached_text("svg", f"{i}.svg", lambda i=i: f"<svg>{i}</svg>", keep=3)  # type: ignore[misc]
    assert len(list((cache / "svg").iterdir())) == 3
