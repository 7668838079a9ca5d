"""One scrape per file: the time in a file's name places a file that has none of its own, and the
files of one series (same folder, same name but for the time, same engine) are one source."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from oomtrace.errors import InputError
from oomtrace.ingest import IngestOptions, ingest_paths
from oomtrace.ingest.prometheus.file_names import series_pattern, time_in_name
from oomtrace.ingest.sniffing import series_name
from oomtrace.trace import Trace
from tests.factories import file_at

MTIME = datetime(2025, 3, 14, 9, 30, tzinfo=UTC)
SCRAPE = (
    "# TYPE vllm:num_preemptions_total counter\n"
    'vllm:num_preemptions_total{{engine="0",model_name="m"}} {n}\n'
    'vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} {usage}\n'
)
DCGM = 'DCGM_FI_DEV_FB_USED{{gpu="0",UUID="GPU-1"}} {n}\n'


def _write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(exist_ok=True)
    return file_at(folder / name, MTIME, text=text)


def _ingest(*paths: Path, **options: object) -> Trace:
    return ingest_paths(list(paths), IngestOptions(**options))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "tz", "expected", "form"),
    [
        ("scrape-1796170786.txt", None, datetime(2026, 12, 2, 0, 19, 46), "epoch seconds"),
        ("m-1796170786123.prom", None, datetime(2026, 12, 2, 0, 19, 46, 123000), "epoch milli"),
        ("m-1796170786.5.txt", None, datetime(2026, 12, 2, 0, 19, 46, 500000), "epoch seconds"),
        (
            "metrics-2026-06-07T10:59:32Z.txt",
            None,
            datetime(2026, 6, 7, 10, 59, 32),
            "ISO 8601 with its zone",
        ),
        (
            "metrics_2026-06-07T10-59-32+02:00.prom",
            None,
            datetime(2026, 6, 7, 8, 59, 32),
            "ISO 8601 with its zone",
        ),
        ("m_20260607-105932.txt", "Europe/Berlin", datetime(2026, 6, 7, 8, 59, 32), "YYYYMMDD"),
        ("m_20260607T105932.txt", None, datetime(2026, 6, 7, 10, 59, 32), "YYYYMMDD"),
        (
            "metrics-2026-06-07 10:59:32,625.txt",
            None,
            datetime(2026, 6, 7, 10, 59, 32, 625000),
            "ISO",
        ),
    ],
)
def test_time_in_a_file_name(name: str, tz: str | None, expected: datetime, form: str) -> None:
    found = time_in_name(name, tz)
    assert found is not None
    assert found.when == expected.replace(tzinfo=UTC)
    assert found.form.startswith(form)


@pytest.mark.parametrize(
    "name",
    ["scrape-8000.txt", "scrape-3.txt", "report-2024.txt", "metrics.prom", "m-20261399-101010.txt"],
)
def test_numbers_that_are_not_times(name: str) -> None:
    assert time_in_name(name, None) is None


def test_series_patterns_and_names() -> None:
    assert series_pattern("metrics/scrape-1796170786.txt") == "metrics/scrape-*.txt"
    assert series_pattern("node-8001-20260607-105932.prom") == "node-8001-*.prom"
    assert series_pattern("metrics-3.txt") == "metrics-*.txt"
    assert series_pattern("before.txt") is None
    names = ["m/scrape-1796170786.txt", "m/scrape-1796170814.txt"]
    assert series_name(names) == "m/scrape-*.txt"


def test_a_lone_file_is_placed_at_the_time_in_its_name_not_its_modification_time(
    tmp_path: Path,
) -> None:
    path = _write(tmp_path, "scrape-1796170786.txt", SCRAPE.format(n=4, usage=0.5))
    trace = _ingest(path)
    assert set(trace.samples["ts"]) == {datetime(2026, 12, 2, 0, 19, 46, tzinfo=UTC)}
    assert trace.samples["source"].unique().to_list() == ["prometheus:scrape-1796170786.txt"]
    notes = trace.manifest.sources[0].notes
    assert (
        "one scrape with no time: placed at the time in the file name (epoch seconds): "
        "scrape-1796170786.txt at 2026-12-02T00:19:46.000Z"
    ) in notes


def test_zone_less_names_are_read_in_tz_and_say_so_without_it(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    paths = [
        _write(folder, "m_20260607-105932.txt", SCRAPE.format(n=1, usage=0.5)),
        _write(folder, "m_20260607-110032.txt", SCRAPE.format(n=2, usage=0.6)),
    ]
    utc = _ingest(*paths)
    assert utc.manifest.sources[0].clock["tz_assumed"] is True
    assert any("carry no zone" in n for n in utc.manifest.sources[0].notes)
    berlin = _ingest(*paths, tz="Europe/Berlin")
    assert berlin.samples["ts"].min() == datetime(2026, 6, 7, 8, 59, 32, tzinfo=UTC)
    clock = berlin.manifest.sources[0].clock
    assert (clock["tz"], clock["tz_assumed"], clock["tz_source"]) == (
        "Europe/Berlin",
        False,
        "option",
    )


def test_files_without_a_time_in_their_names_fall_back_to_their_modification_times(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "m"
    _write(folder, "metrics-1.txt", SCRAPE.format(n=1, usage=0.5))
    second = _write(folder, "metrics-2.txt", SCRAPE.format(n=3, usage=0.9))
    os.utime(second, (MTIME.timestamp() + 15, MTIME.timestamp() + 15))
    trace = _ingest(folder)
    (diag,) = trace.manifest.sources
    assert diag.name == "m/metrics-*.txt"
    assert trace.samples.filter(trace.samples["metric"] == "preemptions_total")[
        "value"
    ].to_list() == [1.0, 3.0]
    assert any(
        n.startswith("2 file(s) (metrics-1.txt, metrics-2.txt) hold one scrape with no time")
        for n in diag.notes
    )


def test_other_series_and_other_engines_stay_apart(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    for stamp in (1796170786, 1796170800):
        _write(folder, f"vllm-{stamp}.txt", SCRAPE.format(n=1, usage=0.5))
        _write(folder, f"dcgm-{stamp}.txt", DCGM.format(n=1024))
        _write(folder, f"other-8001-{stamp}.txt", SCRAPE.format(n=1, usage=0.5))
    _write(folder, "before.txt", SCRAPE.format(n=0, usage=0.1))
    trace = _ingest(folder)
    assert sorted(s.name for s in trace.manifest.sources) == [
        "m/before.txt",
        "m/dcgm-*.txt",
        "m/other-8001-*.txt",
        "m/vllm-*.txt",
    ]


def test_a_file_of_the_series_with_several_untimed_scrapes_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    _write(folder, "scrape-1796170786.txt", SCRAPE.format(n=1, usage=0.5))
    _write(
        folder,
        "scrape-1796170800.txt",
        SCRAPE.format(n=1, usage=0.5) + SCRAPE.format(n=2, usage=0.5),
    )
    with pytest.raises(InputError, match=r"^m/scrape-1796170800.txt: several scrapes with no time"):
        _ingest(folder)


def test_a_file_of_the_series_with_time_lines_keeps_its_own_times(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    _write(folder, "scrape-1796170786.txt", SCRAPE.format(n=1, usage=0.5))
    _write(
        folder,
        "scrape-1796170800.txt",
        "# oomtrace-scrape 2026-12-02T00:20:30Z\n" + SCRAPE.format(n=5, usage=0.9),
    )
    trace = _ingest(folder)
    counter = trace.samples.filter(trace.samples["metric"] == "preemptions_total")
    assert counter.select("ts", "value").rows() == [
        (datetime(2026, 12, 2, 0, 19, 46, tzinfo=UTC), 1.0),
        (datetime(2026, 12, 2, 0, 20, 30, tzinfo=UTC), 5.0),
    ]
