"""A trace of two nodes whose series share source, device and pid: each node's series kept apart.

Two nodes of one deployment leave files of the same names (``gpu.csv``, ``vllm.log``), so their
series differ by node alone. Each node's files are ingested with ``--node`` and the tables put in
one trace directory, then analysed in one pass and in windows.
"""

from __future__ import annotations

import shutil
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from oomtrace.analysis import analyze
from oomtrace.analysis.findings import Findings
from oomtrace.analysis.options import AnalyzeOptions
from oomtrace.analysis.trace_scan import open_trace
from oomtrace.ingest import IngestOptions, ingest_paths
from oomtrace.trace import Trace, write_trace

SAMPLE = Path(__file__).parents[3] / "sample_logs" / "vllm-kv-exhaustion"
ONE_PASS = AnalyzeOptions(windowed_above_rows=10**9)
WINDOWED = AnalyzeOptions(windowed_above_rows=0)
MIB = 2**20


def _nvidia_smi_csv(peak_at: int, peak_mib: int) -> str:
    """``nvidia-smi --query-gpu=timestamp,index,memory.used,memory.total --format=csv -l 1`` on
    one 80 GB GPU: two minutes at 20,000 MiB with one rise to ``peak_mib`` at second
    ``peak_at`` (the milliseconds drift as ``-l 1`` drifts)."""
    start = datetime(2025, 3, 14, 13, 57, 0)
    rows = ["timestamp, index, memory.used [MiB], memory.total [MiB]"]
    for second in range(120):
        used = {peak_at: peak_mib, peak_at + 1: 30_000}.get(second, 20_000)
        when = start + timedelta(seconds=second, milliseconds=208 + 2 * second)
        rows.append(f"{when:%Y/%m/%d %H:%M:%S}.{when.microsecond // 1000:03d}, 0, ")
        rows[-1] += f"{used} MiB, 81559 MiB"
    return "\n".join(rows) + "\n"


def _two_nodes(tmp_path: Path, files: dict[str, dict[str, str | Path]]) -> Path:
    """Each node's files (name: text, or a file to copy) ingested with ``--node``, the tables of
    both in one trace directory."""
    traces = []
    for node, named in files.items():
        folder = tmp_path / node
        folder.mkdir()
        for name, content in named.items():
            if isinstance(content, Path):
                shutil.copy(content, folder / name)
            else:
                (folder / name).write_text(content)
        traces.append(ingest_paths(sorted(folder.iterdir()), IngestOptions(node=node)))
    manifest = traces[0].manifest
    manifest.nodes = sorted(files)
    manifest.sources += [s for t in traces[1:] for s in t.manifest.sources]
    both = Trace(
        *(pl.concat([getattr(t, table) for t in traces]) for table in TABLES), manifest=manifest
    )
    write_trace(both, tmp_path / "both")
    return tmp_path / "both"


TABLES = ("samples", "requests", "events")


@pytest.mark.parametrize("options", [ONE_PASS, WINDOWED], ids=["one pass", "windowed"])
def test_peaks_on_two_nodes_sharing_source_and_device_are_both_found_and_named(
    tmp_path: Path, options: AnalyzeOptions
) -> None:
    # GIVEN two nodes' nvidia-smi CSVs, both named gpu.csv, GPU 0 near full on each at its own
    # moment (node-a 13:57:30, node-b 13:58:20)
    trace = _two_nodes(
        tmp_path,
        {
            "node-a": {"gpu.csv": _nvidia_smi_csv(30, 81_200)},
            "node-b": {"gpu.csv": _nvidia_smi_csv(80, 81_000)},
        },
    )
    # WHEN analysed
    findings = analyze(open_trace(trace), options)
    # THEN each node's peak is an incident of its own, on its own series, named with its node
    peaks = {(i.node, i.anchor_series, i.peak_bytes) for i in findings.incidents}
    assert peaks == {
        ("node-a", "device_used_bytes gpu0 (nvidia-smi-csv:gpu.csv on node-a)", 81_200 * MIB),
        ("node-b", "device_used_bytes gpu0 (nvidia-smi-csv:gpu.csv on node-b)", 81_000 * MIB),
    }
    assert _series_nodes(findings, "device_used_bytes") == {
        "device_used_bytes gpu0 (nvidia-smi-csv:gpu.csv on node-a)": "node-a",
        "device_used_bytes gpu0 (nvidia-smi-csv:gpu.csv on node-b)": "node-b",
    }


def test_two_nodes_vllm_logs_keep_a_kv_and_scheduler_series_each(tmp_path: Path) -> None:
    # GIVEN the sample incident's vLLM log and nvidia-smi CSV on two nodes (files of one name)
    files = {"vllm.log": SAMPLE / "vllm.log", "gpu.csv": SAMPLE / "gpu.csv"}
    trace = _two_nodes(tmp_path, {"node-a": dict(files), "node-b": dict(files)})
    # WHEN analysed
    findings = analyze(open_trace(trace), ONE_PASS)
    # THEN each node has its own KV-in-use and running-requests series, named with its node,
    # and an incident each
    for metric in ("kv_used", "requests_running"):
        nodes = _series_nodes(findings, metric)
        assert sorted(nodes.values()) == ["node-a", "node-b"]
        assert all(name.endswith(f" on {node})") for name, node in nodes.items())
    assert sorted(i.node for i in findings.incidents) == ["node-a", "node-b"]


def test_one_node_keeps_its_labels_without_the_node(tmp_path: Path) -> None:
    # GIVEN one node's files ingested alone
    folder = tmp_path / "node-a"
    folder.mkdir()
    (folder / "gpu.csv").write_text(_nvidia_smi_csv(30, 81_200))
    write_trace(ingest_paths([folder / "gpu.csv"], IngestOptions(node="node-a")), tmp_path / "t")
    # WHEN analysed THEN its series are named as before (no node)
    findings = analyze(open_trace(tmp_path / "t"), ONE_PASS)
    assert set(_series_nodes(findings, "device_used_bytes")) == {
        "device_used_bytes gpu0 (nvidia-smi-csv:gpu.csv)"
    }


def _series_nodes(findings: Findings, metric: str) -> dict[str, str]:
    """Each series of ``metric`` the findings hold, with its node."""
    rows = findings.series.filter(pl.col("metric") == metric).select("series", "node").unique()
    assert rows["series"].is_unique().all()  # one node per series
    return dict(rows.iter_rows())
