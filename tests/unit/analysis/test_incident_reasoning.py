"""The reasoning an on-call engineer applies to an incident, on canonical tables built in the
shapes the parsers produce (:mod:`tests.scenarios`): a leak judged against the headroom, a
saturated pool examined when it filled, a request without a finish still in the system, a busy
healthy day, processes nvidia-smi names by GPU UUID alone, and figures that never contradict
each other."""

from __future__ import annotations

import polars as pl

from oomtrace.analysis import analyze
from oomtrace.trace import Manifest, Trace
from oomtrace.units import GiB, MiB
from tests import scenarios
from tests.factories import at, events, samples
from tests.scenarios import Req, ScenarioBuilder

# 3. A leak smaller than a fixed share of the device, that ate the headroom the engine left.


def _leak_on_a_large_device() -> ScenarioBuilder:
    """An 80 GiB device the engine fills to 75.5 GiB when idle (weights, a 58.4 GiB pool, its
    context); 360 MiB more stays behind after each of ten busy periods: 3.5 GiB in all, below
    5 % of the device (4 GiB) but most of the 4.5 GiB the engine left."""
    b = ScenarioBuilder(
        duration=3000.0,
        pool_blocks=29_888,
        device_total=80 * GiB,
        weights=16 * GiB,
        sample_every=5.0,
    )
    for cycle in range(10):
        start = cycle * 300.0
        b.add(*scenarios._background(start, start + 150.0, 5.0, prefix=f"c{cycle}"))
    b.activations = lambda t: GiB // 2 + int(min(t // 300, 9) * 360 * MiB)
    b.oom(2990.0, GiB)
    return b


def test_a_leak_is_judged_against_the_headroom_not_the_device() -> None:
    findings = analyze(_leak_on_a_large_device().build())
    incident = findings.primary
    assert incident is not None
    assert incident.cls == "leak", incident.reason
    check = next(c for c in incident.checks if c.cls == "leak")
    rise, headroom = check.figure("rise_bytes"), check.figure("headroom_bytes")
    assert isinstance(rise, int)
    assert isinstance(headroom, int)
    # below the 4 GiB a share of the device would have asked, most of the headroom
    assert 5 * GiB // 2 < rise < 4 * GiB
    assert rise > headroom / 2
    assert "of the" in incident.reason
    assert "headroom the engine had left" in incident.reason
    # AND the remedy is the restart interval the trend allows
    (remedy,) = findings.remedies
    assert remedy.basis == "trend"
    assert remedy.action.startswith("restart the engine every ")


def test_a_level_that_rises_less_than_half_the_headroom_is_not_a_leak() -> None:
    b = _leak_on_a_large_device()
    b.activations = lambda t: GiB // 2 + int(min(t // 300, 9) * 60 * MiB)  # 540 MiB in all
    incident = analyze(b.build()).primary
    assert incident is not None
    assert incident.cls != "leak"
    check = next(c for c in incident.checks if c.cls == "leak")
    assert "below the" in check.reason


# 4. A saturated plateau is examined at the moment the pool filled.


def _plateau() -> tuple[ScenarioBuilder, float]:
    """An old request holds 5,000 tokens all along; at 200 s three requests of 3,000 tokens
    arrive and grow until the pool is full; the engine then preempts again and again for minutes
    while short requests churn."""
    b = ScenarioBuilder(duration=420.0)
    b.add(*scenarios._background(0.0, 420.0, 4.0))
    b.add(Req("old", 0.0, 0.0, 5_000, 5_000, 8_192, rate=2.0, finishes=False))
    b.add(
        *[
            Req(f"burst-{k}", 200.0 + k, 200.0 + k, 3_000, 3_000, 4_096, finishes=False)
            for k in (1, 2, 3)
        ]
    )
    full = next(t for t in range(200, 420) if b.blocks(t) >= 0.95 * b.pool_blocks)
    b.preemptions = [full + 0.5 + 3.0 * k for k in range(60)]
    return b, float(full)


def test_a_saturated_pool_is_examined_when_it_filled() -> None:
    b, full = _plateau()
    incident = analyze(b.build()).primary
    assert incident is not None
    assert incident.cls == "kv_exhaustion"
    # THEN the moment is the fill, not the fullest reading minutes later
    assert incident.peak_ts == at(full)
    # AND the culprits are those whose growth filled it: the burst, not the old request that
    # held the most without growing
    assert [c.request_id for c in incident.culprits[:3]] == ["burst-1", "burst-2", "burst-3"]
    old = next(c for c in incident.culprits if c.request_id == "old")
    assert old.tokens is not None
    assert all(old.tokens > (c.tokens or 0) for c in incident.culprits[:3])
    assert "while the pool filled" in incident.culprits[0].reason


# 5. A request without a finish, where the source states finishes, was still in the system.


def test_a_request_the_log_never_finished_is_still_resident_at_the_end() -> None:
    b = ScenarioBuilder(duration=120.0, pool_blocks=2_000)
    b.add(*scenarios._background(0.0, 120.0, 2.0))
    # 500 tokens and 100 more to write at 20 a second: its contract is spent by 6 s
    b.add(Req("stuck", 1.0, 1.0, 500, 100, 100, finishes=False))
    b.oom(118.0, 2 * GiB)
    findings = analyze(b.build())
    incident = findings.primary
    assert incident is not None
    resident = [row.request_id for row in incident.ledger.rows]
    assert "stuck" in resident
    ends = [g for g in findings.gaps if g.kind == "no_end"]
    assert any("until the trace ends" in g.detail for g in ends)


# 7. A healthy day reports no incident.


def test_a_busy_healthy_day_reports_no_incident() -> None:
    # GIVEN an hour of steady traffic on an engine at 93 % of its device (utilisation 0.9 and
    # its context), the pool never above 60 %, no OOM and no preemption, the allocator sampled
    b = ScenarioBuilder(
        duration=3600.0, pool_blocks=30_000, device_total=80 * GiB, sample_every=5.0
    )
    b.add(*scenarios._background(0.0, 3600.0, 1.5))
    b.activations = lambda t: GiB + (2 * GiB if int(t) % 60 < 20 else 0)  # batches come and go
    findings = analyze(b.build())
    # THEN nothing is an incident, and nothing is to be remedied
    assert findings.incidents == ()
    assert findings.remedies == ()


# 2. A process nvidia-smi names by GPU UUID alone, on a node with one GPU.


def test_a_process_listed_by_uuid_alone_is_on_the_only_gpu() -> None:
    # GIVEN device memory of GPU 0 and a compute-apps row whose GPU nvidia-smi named by UUID
    # only (no index: device null), and an OOM on GPU 0
    rows = [
        {"ts": at(t), "metric": "device_total_bytes", "value": float(24 * GiB)} for t in (0, 60)
    ]
    rows += [
        {"ts": at(t), "metric": "device_used_bytes", "value": float((20 + t // 20) * GiB)}
        for t in range(0, 61, 2)
    ]
    rows += [
        {
            "ts": at(t),
            "metric": "process_used_bytes",
            "device": None,
            "pid": 7321,
            "value": float((1 + t // 20) * GiB),
        }
        for t in range(0, 61, 2)
    ]
    rows += [
        {"ts": at(t), "metric": "process_used_bytes", "pid": 100, "value": float(19 * GiB)}
        for t in range(0, 61, 2)
    ]
    oom = events(
        {
            "ts": at(60),
            "kind": "oom",
            "requested_bytes": GiB,
            "total_bytes": 24 * GiB,
            "free_bytes": 256 * MiB,
            "pid": 100,
        }
    )
    trace = Trace(samples=samples(*rows), events=oom)
    incident = analyze(trace).primary
    # THEN that process is the other one on GPU 0
    assert incident is not None
    assert incident.cls == "foreign_memory", incident.reason
    assert [p.pid for p in incident.processes] == [7321]


# 8. Figures never contradict each other.


def test_explained_never_exceeds_what_the_engine_stated() -> None:
    # GIVEN requests the engine preempted without naming them (vLLM V1's log), so the model
    # keeps them resident past the moment the pool was full
    scenario = scenarios.long_requests_growing()
    findings = analyze(scenario.trace)
    for incident in findings.incidents:
        assert incident.explained_bytes is not None
        assert incident.observed_bytes is not None
        assert incident.explained_bytes <= incident.observed_bytes
        assert incident.coverage is not None
        assert incident.coverage <= 1.0
        assert (incident.unexplained_bytes or 0) >= 0
        ledger = incident.ledger
        assert ledger.remaining_bytes is None or ledger.remaining_bytes >= 0
        assert ledger.remaining_observed_bytes is None or ledger.remaining_observed_bytes >= 0
    pool = findings.kv_model["pool_bytes"]
    modelled = findings.series.filter(pl.col("metric") == "modelled_kv_bytes")
    assert modelled["value"].max() <= pool
    for recon in findings.reconciliation:
        if "agree" in recon.interpretation and recon.max_gap is not None:
            assert abs(recon.max_gap) <= 0.1 * pool or ", but " in recon.interpretation


# 2. An engine that refused to start because another process held memory.


def _refused(*rows: dict[str, object]) -> Trace:
    """vLLM V1's refusal as its parser gives it, from vllm#16118's numbers: "Free memory on device
    (59.32/79.15 GiB) on startup is less than desired GPU memory utilization (0.9, 71.24 GiB)"."""
    refusal = events(
        {
            "ts": at(30),
            "kind": "startup_memory_insufficient",
            "free_bytes": round(59.32 * GiB),
            "total_bytes": round(79.15 * GiB),
            "requested_bytes": round(71.24 * GiB),
            "detail": "59.32 GiB of 79.15 GiB free at start-up, less than the 71.24 GiB asked "
            "for (gpu_memory_utilization 0.9): other processes hold the rest",
        },
        *rows,
    )
    return Trace(events=refusal)


def test_a_start_up_refused_for_others_memory_is_foreign_memory() -> None:
    # GIVEN only the refusal: 19.83 GiB of the device in use before the engine loaded anything
    findings = analyze(_refused())
    incident = findings.primary
    # THEN another process is the cause (not a misfit of the engine's own settings)
    assert incident is not None
    assert incident.cls == "foreign_memory", incident.reason
    assert incident.reason.startswith(
        "at start-up, 19.83 GiB of device memory was held outside the engine's process"
    )
    assert "the engine's start-up lacked 11.92 GiB" in incident.reason
    (move,) = [r for r in findings.remedies if r.basis == "process"]
    assert move is findings.remedies[0]
    assert move.action == "move the other processes off GPU 0"
    assert move.detail == (
        "it held 19.83 GiB when the engine started; the start-up was short of 11.92 GiB, which "
        "that memory would have covered"
    )


def test_a_start_up_refusal_names_the_process_nvidia_smi_saw() -> None:
    # GIVEN nvidia-smi's compute-apps row for the process holding the memory, with its name
    rows = [
        {"ts": at(t), "metric": "process_used_bytes", "pid": 8801, "value": float(19 * GiB)}
        for t in (0, 10, 20, 30)
    ]
    named = {"ts": at(0), "kind": "process", "pid": 8801, "detail": "python3 train.py"}
    config = {"gpu_memory_utilization": 0.9}  # what the refusal states
    manifest = Manifest(engine={"name": "vllm"}, engine_config=config)
    trace = Trace(samples=samples(*rows), events=_refused(named).events, manifest=manifest)
    findings = analyze(trace)
    incident = findings.primary
    # THEN the remedy says which process to move, by pid and name
    assert incident is not None
    assert incident.cls == "foreign_memory", incident.reason
    assert [(p.pid, p.name) for p in incident.processes] == [(8801, "python3 train.py")]
    assert findings.remedies[0].action == "move process 8801 (python3 train.py) off GPU 0"
    # or the share that leaves it room: (79.15 - 19) / 79.15 GiB less 1 % for contexts
    assert findings.remedies[1].action == "or set --gpu-memory-utilization 0.75 to share the GPU"
