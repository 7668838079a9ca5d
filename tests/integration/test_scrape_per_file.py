"""A real vLLM run whose ``/metrics`` was saved one scrape per file, the way people do by hand
(``curl -s host:8000/metrics > scrape-$(date +%s).txt``), gives the facts the same scrapes give
in one file: one series, each scrape at the time in its name, the counter's increase kept."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import polars as pl
from click.testing import CliRunner

from oomtrace.analysis import analyze
from oomtrace.cli import cli
from oomtrace.ingest import IngestOptions, load_any

DATA = Path(__file__).resolve().parents[1] / "data" / "prometheus" / "vllm-0.32-scrape-per-file"
FILES = sorted(DATA.glob("scrape-*.txt"))
# Not the scrape times: the files were copied, so their modification times say nothing.
COPIED = 1_900_000_000


def _per_file(tmp_path: Path) -> Path:
    folder = tmp_path / "metrics"
    folder.mkdir()
    for file in FILES:
        os.utime(shutil.copy(file, folder), (COPIED, COPIED))
    return folder


def _one_file(tmp_path: Path) -> Path:
    # the same scrapes in one file, each after the `date +%s` line a loop would print
    path = tmp_path / "all.prom"
    with path.open("w", encoding="utf-8") as out:
        for file in FILES:
            out.write(file.stem.removeprefix("scrape-") + "\n")
            out.write(file.read_text(encoding="utf-8"))
    return path


def _facts(paths: list[Path]) -> tuple[pl.DataFrame, dict[str, object]]:
    trace = load_any(paths, IngestOptions())
    incident = analyze(trace).to_json()["incidents"][0]
    samples = trace.samples.select("ts", "metric", "value").sort("ts", "metric")
    return samples, {k: incident[k] for k in ("class", "peak_ts", "reason")}


def test_three_scrape_files_give_the_facts_of_one_file(tmp_path: Path) -> None:
    per_file, per_file_incident = _facts([_per_file(tmp_path)])
    one_file, one_file_incident = _facts([_one_file(tmp_path)])
    assert per_file.equals(one_file)
    assert per_file_incident == one_file_incident
    # what a person reads off the scrapes: the pool full at the second scrape, 25 preemptions
    # by then (0 at the first) and 36 at the last, 12 s after it filled: the storm the fill set off
    assert per_file_incident["class"] == "kv_exhaustion"
    assert per_file_incident["peak_ts"] == "2026-12-02T00:20:14.000000Z"
    reason = str(per_file_incident["reason"])
    assert "36 preemptions from the rise to a window after it filled" in reason
    counter = per_file.filter(pl.col("metric") == "preemptions_total")["value"].to_list()
    assert counter == [0.0, 25.0, 36.0]


def test_the_series_is_one_source_whose_diagnostics_say_how_it_was_placed(
    tmp_path: Path,
) -> None:
    trace = load_any([_per_file(tmp_path)], IngestOptions())
    assert trace.samples["source"].unique().to_list() == ["prometheus:metrics/scrape-*.txt"]
    (diag,) = trace.manifest.sources
    assert diag.name == "metrics/scrape-*.txt"
    assert diag.lines_read == sum(len(f.read_text().splitlines()) for f in FILES)
    assert diag.lines_read == diag.lines_recognised + diag.lines_skipped
    assert (
        "3 file(s) of one scrape each: placed at the time in the file name (epoch seconds): "
        "scrape-1796170786.txt at 2026-12-02T00:19:46.000Z; scrape-1796170814.txt at "
        "2026-12-02T00:20:14.000Z ..."
    ) in diag.notes
    assert trace.manifest.nodes == ["metrics"]


def test_files_named_on_the_command_line_are_one_series_too(tmp_path: Path) -> None:
    folder = _per_file(tmp_path)
    out = tmp_path / "trace"
    args = ["ingest", *map(str, sorted(folder.iterdir())), "--out", str(out)]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    assert [s["name"] for s in manifest["sources"]] == ["scrape-*.txt"]
