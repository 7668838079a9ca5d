"""Standing fuzz: no input makes oomtrace crash. Every parser reads real inputs damaged the ways
files get damaged (flipped bits, cut ends, huge or negative numbers, impossible years, stray
bytes, lines lost or doubled), and ``analyze`` and the report read generated traces at the edges
of the schema. Each ends in a result or one typed error (exit 2), never another exception.

Bounded: a fixed number of examples per property (Hypothesis' deadline is off for the suite);
``OOMTRACE_FUZZ_EXAMPLES=500`` runs a deeper search locally. Opt-in (``slow``: ``--full`` and
``.ci/run`` run it), as a plain run stays quick.
"""

from __future__ import annotations

import gzip
import os
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oomtrace.analysis import analyze
from oomtrace.errors import OomtraceError
from oomtrace.ingest import IngestOptions, ingest_paths, registry
from oomtrace.report import build_report, render
from oomtrace.report.inputs import from_findings_object
from oomtrace.schema import EVENT_KINDS, LIMITS, MAX_COUNT, METRICS, REQUEST_EVENTS, empty
from oomtrace.trace import Trace, write_trace
from oomtrace.units import MAX_BYTES
from tests.factories import T0, events, requests, samples

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
SEEDS: dict[str, list[Path]] = {
    "vllm-log": sorted((DATA / "vllm").glob("*.log")),
    "sglang-log": sorted((DATA / "sglang").glob("*.log")),
    "pytorch-log": sorted((DATA / "torch").glob("*.log")),
    "nvidia-smi-csv": sorted((DATA / "nvidia_smi").glob("*.csv")),
    "prometheus": sorted((DATA / "prometheus").glob("*.prom")),
    "prometheus-query-json": [DATA / "prometheus" / "query_range.json"],
    "torch-memory-snapshot": sorted((DATA / "torch").glob("*.pickle")),
    "nvidia-smi-table": sorted((DATA / "nvidia_smi").glob("table-*.txt")),
    # the -q report as text and as -x XML
    "nvidia-smi-query": sorted((DATA / "nvidia_smi").glob("query-*.txt"))
    + sorted((DATA / "nvidia_smi").glob("query-xml-*.xml")),
    "nvidia-smi-monitor": sorted((DATA / "nvidia_smi").glob("monitor-*.txt")),
    "gpustat": sorted((DATA / "nvidia_smi").glob("gpustat-*.txt")),
    "collector-capture": sorted((ROOT / "sample_logs" / "vllm-prefill-oom" / "capture").glob("*")),
}
EXAMPLES = int(os.environ.get("OOMTRACE_FUZZ_EXAMPLES", "12"))
HUGE = ("1" + "0" * 28, "-1", "1e29", "nan", "inf", "99999999999999999999", "0", "")

# One damage to a file's bytes; each draws where and what.
Damage = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 2**31), st.integers(0, 7)),
    st.tuples(st.just("number"), st.integers(0, 2**31), st.sampled_from(HUGE)),
    st.tuples(st.just("year"), st.integers(0, 2**31), st.sampled_from(["0025", "6025", "9999"])),
    st.tuples(st.just("cut"), st.integers(0, 2**31), st.just(0)),
    st.tuples(st.just("insert"), st.integers(0, 2**31), st.binary(min_size=1, max_size=12)),
    st.tuples(st.just("line"), st.integers(0, 2**31), st.sampled_from(["drop", "double"])),
)


def damaged(data: bytes, damage: tuple[str, int, object]) -> bytes:
    kind, where, what = damage
    if not data:
        return data
    at = where % len(data)
    if kind == "flip":
        return data[:at] + bytes([data[at] ^ (1 << int(str(what)))]) + data[at + 1 :]
    if kind == "cut":
        return data[:at]
    if kind == "insert":
        assert isinstance(what, bytes)
        return data[:at] + what + data[at:]
    lines = data.split(b"\n")
    n = where % len(lines)
    if kind == "line":
        lines[n : n + 1] = [] if what == "drop" else [lines[n], lines[n]]
        return b"\n".join(lines)
    digits = [i for i, b in enumerate(data) if 0x30 <= b <= 0x39]
    if not digits:
        return data
    start = end = digits[where % len(digits)]
    while start > 0 and 0x30 <= data[start - 1] <= 0x39:
        start -= 1
    while end < len(data) and 0x30 <= data[end] <= 0x39:
        end += 1
    if kind == "year":
        start = max(start, end - 4)
    return data[:start] + str(what).encode() + data[end:]


def survives(ingest: object) -> Trace | None:
    """The result of ``ingest()``, None for a typed refusal; any other exception fails."""
    try:
        result = ingest()  # type: ignore[operator]
    except OomtraceError:
        return None
    assert isinstance(result, Trace)
    return result


def analysed(trace: Trace, tmp: Path) -> None:
    """The trace written, analysed and reported (JSON): a typed error at most."""
    try:
        write_trace(trace, tmp / "trace", overwrite=True)
        findings = analyze(trace)
        render(build_report(from_findings_object(findings, trace)), "json")
    except OomtraceError:
        return


FUZZ = settings(max_examples=EXAMPLES, suppress_health_check=[HealthCheck.function_scoped_fixture])


def fuzz_parser(name: str) -> object:
    @FUZZ
    @given(
        seed=st.sampled_from(SEEDS[name]),
        damages=st.lists(Damage, min_size=1, max_size=4),
        compress=st.booleans(),
    )
    def test(
        tmp_path: Path, seed: Path, damages: list[tuple[str, int, object]], compress: bool
    ) -> None:
        work = tmp_path / "fuzz"
        work.mkdir(exist_ok=True)
        if seed.parent.name == "capture":  # damage one segment of a capture directory
            target = work / "capture"
            target.mkdir(exist_ok=True)
            for old in target.iterdir():
                old.unlink()
            for part in SEEDS[name]:
                (target / part.name).write_bytes(part.read_bytes())
            victim = target / seed.name
            data = victim.read_bytes()
            for damage in damages:
                data = damaged(data, damage)
            victim.write_bytes(data)
        else:
            data = seed.read_bytes()
            for damage in damages:
                data = damaged(data, damage)
            target = work / (seed.name + (".gz" if compress else ""))
            target.write_bytes(gzip.compress(data) if compress else data)
        trace = survives(lambda: ingest_paths([target], IngestOptions(format=name)))
        if trace is not None:
            analysed(trace, work)

    return test


test_fuzz_vllm_log = fuzz_parser("vllm-log")
test_fuzz_sglang_log = fuzz_parser("sglang-log")
test_fuzz_pytorch_log = fuzz_parser("pytorch-log")
test_fuzz_nvidia_smi_csv = fuzz_parser("nvidia-smi-csv")
test_fuzz_prometheus = fuzz_parser("prometheus")
test_fuzz_prometheus_query_json = fuzz_parser("prometheus-query-json")
test_fuzz_torch_memory_snapshot = fuzz_parser("torch-memory-snapshot")
test_fuzz_collector_capture = fuzz_parser("collector-capture")
test_fuzz_nvidia_smi_table = fuzz_parser("nvidia-smi-table")
test_fuzz_nvidia_smi_query = fuzz_parser("nvidia-smi-query")
test_fuzz_nvidia_smi_monitor = fuzz_parser("nvidia-smi-monitor")


def test_every_parser_is_fuzzed() -> None:
    assert set(SEEDS) == set(registry())
    assert all(SEEDS.values())


# Traces at the edges of the schema: any metric with any value up to its limit, requests whose
# events come in any order with any counts, events of any kind with any sizes.
seconds = st.integers(0, 3600)
small = st.none() | st.integers(0, 4)


@st.composite
def traces(draw: st.DrawFn) -> Trace:
    sample_rows = [
        {
            "ts": T0 + timedelta(seconds=draw(seconds)),
            "device": draw(small),
            "pid": draw(st.none() | st.integers(1, 99999)),
            "metric": (metric := draw(st.sampled_from(sorted(METRICS)))),
            "value": float(draw(st.integers(0, int(LIMITS[METRICS[metric][0]])))),
        }
        for _ in range(draw(st.integers(0, 30)))
    ]
    count = st.none() | st.integers(0, MAX_COUNT)
    request_rows = [
        {
            "ts": T0 + timedelta(seconds=draw(seconds)),
            "request_id": draw(st.sampled_from(["a", "b", "c", "d"])),
            "event": draw(st.sampled_from(REQUEST_EVENTS)),
            "prompt_tokens": draw(count),
            "max_tokens": draw(count),
            "output_tokens": draw(count),
            "cached_tokens": draw(count),
        }
        for _ in range(draw(st.integers(0, 20)))
    ]
    size = st.none() | st.integers(0, MAX_BYTES)
    event_rows = [
        {
            "ts": T0 + timedelta(seconds=draw(seconds)),
            "device": draw(small),
            "kind": draw(st.sampled_from(sorted(EVENT_KINDS))),
            "requested_bytes": draw(size),
            "total_bytes": draw(size),
            "free_bytes": draw(size),
            "allocated_bytes": draw(size),
            "reserved_unallocated_bytes": draw(size),
            "process_bytes": draw(size),
        }
        for _ in range(draw(st.integers(0, 6)))
    ]
    return Trace(
        samples(*sample_rows) if sample_rows else empty("samples"),
        requests(*request_rows) if request_rows else empty("requests"),
        events(*event_rows) if event_rows else empty("events"),
    )


@settings(max_examples=3 * EXAMPLES, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(trace=traces())
def test_analyze_and_the_report_read_any_trace(tmp_path: Path, trace: Trace) -> None:
    analysed(trace, tmp_path)
