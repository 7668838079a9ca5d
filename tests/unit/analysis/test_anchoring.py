"""Which moments become incidents: memory taken while the engine starts is not one, and a spike
far below capacity is traffic."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import polars as pl

from oomtrace.analysis import analyze
from oomtrace.schema import conform
from oomtrace.trace import Manifest, Trace
from tests.factories import at, events, requests, samples

GiB = 1 << 30


def _device(level: Any, until: int = 300) -> list[dict[str, Any]]:
    """``device_used_bytes`` every second from ``level(t)``, with an 80 GiB device total."""
    rows = [
        {"ts": at(t), "metric": "device_used_bytes", "value": float(level(t))} for t in range(until)
    ]
    return [*rows, {"ts": at(0), "metric": "device_total_bytes", "value": float(80 * GiB)}]


def _starting(t: int) -> int:
    """An engine that loads weights and preallocates its pool in its first 30 s: 78 GiB."""
    return min(t, 30) * 78 * GiB // 30


def _requests(*starts: int, length: int = 20) -> pl.DataFrame:
    rows = []
    for k, start in enumerate(starts):
        rid = f"r{k}"
        rows += [
            {"ts": at(start), "request_id": rid, "event": "arrived", "prompt_tokens": 100},
            {"ts": at(start + length), "request_id": rid, "event": "finished", "output_tokens": 50},
        ]
    return requests(*rows)


def _no_events() -> pl.DataFrame:
    schema = {"ts": pl.Datetime("ns", "UTC"), "node": pl.String, "source": pl.String}
    return conform("events", pl.DataFrame(schema={**schema, "kind": pl.String}))


def _no_requests() -> pl.DataFrame:
    schema = {"ts": pl.Datetime("ns", "UTC"), "node": pl.String, "source": pl.String}
    return conform(
        "requests", pl.DataFrame(schema={**schema, "request_id": pl.String, "event": pl.String})
    )


def _trace(sample_rows: list[dict[str, Any]], reqs: pl.DataFrame, evs: pl.DataFrame) -> Trace:
    return Trace(samples(*sample_rows), reqs, evs, Manifest(nodes=["node-a"]))


def test_memory_taken_while_the_engine_starts_is_not_an_incident() -> None:
    # GIVEN device memory rising to 97 % while the engine starts, then requests from t=60 s
    trace = _trace(_device(_starting), _requests(60, 120, 180), _no_events())
    # WHEN it is analysed
    findings = analyze(trace)
    # THEN the rise is a spike in the findings but no incident: nothing was being served yet
    assert any(s.metric == "device_used_bytes" for s in findings.spikes)
    assert findings.incidents == ()


def _no_requests() -> pl.DataFrame:
    schema = {"ts": pl.Datetime("ns", "UTC"), "node": pl.String, "source": pl.String}
    return conform(
        "requests", pl.DataFrame(schema={**schema, "request_id": pl.String, "event": pl.String})
    )


def test_without_requests_a_device_left_without_room_is_an_incident() -> None:
    # GIVEN a rise to 99.5 % of the device and no request lifecycle at all (nothing tells
    # start-up from serving)
    trace = _trace(_device(lambda t: min(t, 30) * 796 * GiB // 300), _no_requests(), _no_events())
    # WHEN it is analysed, THEN the device left without room is an incident
    assert len(analyze(trace).incidents) == 1


def test_a_device_at_its_engines_usual_level_is_not_an_incident() -> None:
    # GIVEN the rise to 97 %, where a preallocating engine (gpu_memory_utilization 0.95 and its
    # context) sits all day, and no OOM
    trace = _trace(_device(_starting), _no_requests(), _no_events())
    # WHEN it is analysed, THEN it is a spike in the findings, not an incident
    findings = analyze(trace)
    assert any(s.metric == "device_used_bytes" for s in findings.spikes)
    assert findings.incidents == ()


def test_memory_of_unknown_capacity_is_never_pressure() -> None:
    # GIVEN the allocator's reserve rising by 30 GiB and falling back, with no device total
    rows = [
        {
            "ts": at(t),
            "metric": "torch_reserved_bytes",
            "pid": 7,
            "value": float((40 if 100 <= t < 110 else 10) * GiB),
        }
        for t in range(200)
    ]
    trace = _trace(rows, _requests(20, 60, 120), _no_events())
    # WHEN it is analysed, THEN no incident: without the device's size nothing says it was full
    findings = analyze(trace)
    assert any(s.metric == "torch_reserved_bytes" for s in findings.spikes)
    assert findings.incidents == ()


def test_a_kv_pool_rising_well_below_full_is_traffic_not_an_incident() -> None:
    # GIVEN a KV pool going from empty to 40 % and back while requests run
    usage = [
        {"ts": at(t), "metric": "kv_usage_ratio", "value": 0.4 if 100 <= t < 130 else 0.02}
        for t in range(200)
    ]
    trace = _trace(usage, _requests(10, 100, 110), _no_events())
    # WHEN it is analysed
    findings = analyze(trace)
    # THEN the rise is among the spikes but is no incident
    assert any(s.metric == "kv_used" for s in findings.spikes)
    assert findings.incidents == ()


def test_an_engine_failing_again_at_every_restart_is_one_incident() -> None:
    # GIVEN the same start-up refusal three times, 58 s apart (systemd restarting the engine):
    # the third is more than a window after the first, but each is within a window of the last
    refusal = {"kind": "startup_kv_insufficient", "requested_bytes": 16 * GiB, "free_bytes": GiB}
    evs = events(*[{**refusal, "ts": at(t)} for t in (46, 104, 162)])
    # WHEN the trace is analysed
    findings = analyze(_trace(_device(lambda t: 0, until=200), _no_requests(), evs))
    # THEN the restart loop is one incident, anchored on the first refusal
    assert [(i.cls, i.peak_ts) for i in findings.incidents] == [("startup_misfit", at(46))]


def test_a_refusal_reporting_the_oom_just_before_it_is_the_same_incident() -> None:
    # GIVEN TGI's warm-up: the shard's OOM, then the router's refusal of the same warm-up 85 ms
    # later; and, a minute on, another refusal (the launcher started the shard again)
    oom = {"kind": "oom", "requested_bytes": 2 * GiB, "free_bytes": GiB, "ts": at(10)}
    refusal = {"kind": "startup_kv_insufficient"}
    evs = events(
        oom,
        {**refusal, "ts": at(10) + timedelta(milliseconds=85)},
        {**refusal, "ts": at(70)},
    )
    findings = analyze(_trace(_device(lambda t: 0, until=100), _no_requests(), evs))
    # THEN the OOM and its report are one incident; the refusal after a restart is another
    assert [(i.anchor, i.peak_ts) for i in findings.incidents] == [
        ("oom", at(10)),
        ("startup", at(70)),
    ]
