"""Findings and traces of one incident per class, in the analysis' published shape (the check's
figures, the OOM or refusal event as evidence, culprits with their step estimates, remedies), for
the report's tests."""

from __future__ import annotations

from typing import Any

from oomtrace.trace import Manifest, Trace
from oomtrace.units import GiB, MiB
from tests import factories
from tests.factories import at


def iso(seconds: float) -> str:
    return at(seconds).isoformat().replace("+00:00", "Z")


def transient_findings(step_bytes: list[int | None]) -> dict[str, Any]:
    """A prefill OOM as the analysis states it with the model's widths (``--config``): each
    request's step bytes, the first one's step made large by its ``prompt_logprobs``."""
    culprits = [
        {
            "rank": k + 1,
            "request_id": f"cmpl-{k:032x}-0",
            "share": 0.1,
            "bytes": 100 * MiB,
            "step_bytes": step,
            "step_tokens": 14_210 - 1000 * k,
            "step_parameter": "prompt_logprobs" if k == 0 else None,
            "reason": "in prefill at the OOM",
        }
        for k, step in enumerate(step_bytes)
    ]
    figures = {
        "parameter": "prompt_logprobs",
        "request_id": culprits[0]["request_id"],
        "requested_bytes": 4_982_833_152,
        "room_bytes": 836_543_079,
        "step_bytes": step_bytes[0],
        "step_bytes_per_token": None,
        "step_tokens": 14_210,
        "step_total_bytes": sum(s or 0 for s in step_bytes) if step_bytes[0] else None,
    }
    oom = {
        "table": "events",
        "ts": iso(60),
        "values": {
            "kind": "oom",
            "requested_bytes": 4_982_833_152,
            "free_bytes": 836_543_079,
            "total_bytes": 47_664_070_656,
            "reserved_unallocated_bytes": 65_011_712,
        },
    }
    incident = {
        "id": "I1",
        "class": "transient_peak",
        "start": iso(30),
        "window_start": iso(0),
        "peak_ts": iso(60),
        "observed_bytes": 46_827_527_577,
        "capacity_bytes": 47_664_070_656,
        "culprits": culprits,
        "evidence": [oom],
        "checks": [{"class": "transient_peak", "matched": True, "figures": figures}],
    }
    return {"findings_version": 1, "incidents": [incident]}


def foreign() -> tuple[dict[str, Any], Trace]:
    """The engine (pid 100) and a training job (pid 51377) that grows until the device is full."""
    rows = []
    for s in range(0, 121, 5):
        rows += [
            {"ts": at(s), "metric": "device_total_bytes", "value": float(40 * GiB)},
            {"ts": at(s), "metric": "process_used_bytes", "pid": 100, "value": float(33 * GiB)},
            {
                "ts": at(s),
                "metric": "process_used_bytes",
                "pid": 51377,
                "value": float(1 * GiB + s * 40 * MiB),
            },
        ]
    incident = {
        "id": "I1",
        "class": "foreign_memory",
        "start": iso(60),
        "window_start": iso(60),
        "peak_ts": iso(120),
        "device": 0,
        "capacity_bytes": 40 * GiB,
        "processes": [
            {"pid": 51377, "bytes": 5 * GiB, "growth_bytes": 2 * GiB, "name": "python train.py"}
        ],
    }
    return {"findings_version": 1, "incidents": [incident]}, Trace(factories.samples(*rows))


def leak() -> tuple[dict[str, Any], Trace]:
    """Memory that rises 100 MiB per idle period over an hour, busy in between."""
    rows = []
    for minute in range(61):
        busy = minute % 10 != 0
        rows += [
            {"ts": at(60 * minute), "metric": "device_total_bytes", "value": float(24 * GiB)},
            {
                "ts": at(60 * minute),
                "metric": "device_used_bytes",
                "value": float(18 * GiB + minute * 10 * MiB + (2 * GiB if busy else 0)),
            },
            {"ts": at(60 * minute), "metric": "requests_running", "value": 8.0 if busy else 0.0},
        ]
    incident = {
        "id": "I1",
        "class": "leak",
        "start": iso(0),
        "window_start": iso(3000),
        "peak_ts": iso(3600),
        "capacity_bytes": 24 * GiB,
        "checks": [
            {
                "class": "leak",
                "matched": True,
                "figures": {"rise_bytes_per_hour": 600 * MiB, "headroom_bytes": 5 * GiB},
            }
        ],
    }
    return {"findings_version": 1, "incidents": [incident]}, Trace(factories.samples(*rows))


def misfit() -> tuple[dict[str, Any], Trace]:
    """vLLM's refusal: max_model_len 131,072 needs 16 GiB of KV, 3.42 GiB were available."""
    refusal = {
        "table": "events",
        "ts": iso(49),
        "values": {
            "kind": "startup_kv_insufficient",
            "requested_bytes": 16 * GiB,
            "free_bytes": 3_672_197_038,
        },
    }
    incident = {
        "id": "I1",
        "class": "startup_misfit",
        "start": iso(0),
        "peak_ts": iso(49),
        "capacity_bytes": 23_034 * MiB,
        "evidence": [refusal],
    }
    remedies = [
        {
            "incident": "I1",
            "action": "set --max-model-len 28016",
            "setting": "--max-model-len",
            "value": "28016",
            "basis": "budget",
            "detail": "the 3.42 GiB the engine had hold 28,016 tokens of one request",
        }
    ]
    manifest = Manifest(
        nodes=["inference-03"],
        engine={"name": "vllm", "version": "0.10.2"},
        engine_config={
            "model_weights_bytes": 16_093_886_703,
            "gpu_memory_utilization": 0.9,
            "max_model_len": 131_072,
        },
    )
    findings = {"findings_version": 1, "incidents": [incident], "remedies": remedies}
    return findings, Trace(manifest=manifest)
