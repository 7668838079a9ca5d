"""A small incident for report tests: a KV pool filling up over two minutes until a CUDA OOM,
as a canonical trace plus the findings document the analysis publishes for it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import polars as pl

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.trace import Manifest, Trace
from oomtrace.units import GiB, MiB
from tests import factories
from tests.factories import at

OOM_S = 120.0
CULPRITS = ("req-long-1", "req-long-2", "req-long-3")


def _iso(seconds: float) -> str:
    return at(seconds).isoformat().replace("+00:00", "Z")


def incident_trace(ids: tuple[str, ...] = CULPRITS, *, samples_per_s: int = 2) -> Trace:
    n = int(OOM_S * samples_per_s) + 1
    step = 1.0 / samples_per_s
    rows: list[dict[str, Any]] = []
    for i in range(n):
        t = i * step
        kv = int(2 * GiB + (16 * GiB) * (t / OOM_S) ** 2)
        rows += [
            {"ts": at(t), "metric": "device_total_bytes", "value": float(24 * GiB)},
            {"ts": at(t), "metric": "device_used_bytes", "value": float(20 * GiB)},
            {"ts": at(t), "metric": "torch_reserved_bytes", "value": float(19 * GiB)},
            {"ts": at(t), "metric": "torch_allocated_bytes", "value": float(kv + 9 * GiB)},
            {"ts": at(t), "metric": "requests_running", "value": float(3 + i % 4)},
            {"ts": at(t), "metric": "requests_waiting", "value": float(i // 40)},
        ]
    # one short peak between coarse samples, exactly at the OOM
    rows.append(
        {"ts": at(OOM_S), "metric": "device_used_peak_bytes", "value": float(23 * GiB + 900 * MiB)}
    )
    samples = factories.samples(*rows).sort("ts", maintain_order=True)
    lifecycle: list[dict[str, Any]] = []
    for k, rid in enumerate(ids):
        lifecycle += [
            {
                "ts": at(5 + k),
                "request_id": rid,
                "event": "arrived",
                "prompt_tokens": 6000 + 1000 * k,
                "max_tokens": 16000,
            },
            {
                "ts": at(6 + k),
                "request_id": rid,
                "event": "admitted",
                "prompt_tokens": 6000 + 1000 * k,
                "max_tokens": 16000,
            },
            {
                "ts": at(OOM_S),
                "request_id": rid,
                "event": "aborted",
                "output_tokens": 9000 - 1000 * k,
            },
        ]
    for j in range(20):
        rid = f"req-short-{j:02d}"
        lifecycle += [
            {
                "ts": at(10 + 5 * j),
                "request_id": rid,
                "event": "admitted",
                "prompt_tokens": 300,
                "max_tokens": 200,
            },
            {"ts": at(13 + 5 * j), "request_id": rid, "event": "finished", "output_tokens": 200},
        ]
    requests = factories.requests(*lifecycle).sort("ts", maintain_order=True)
    events = factories.events(
        {
            "ts": at(OOM_S),
            "kind": "oom",
            "requested_bytes": 1 * GiB,
            "total_bytes": 24 * GiB,
            "free_bytes": 120 * MiB,
            "detail": "CUDA out of memory. Tried to allocate 1.00 GiB",
        }
    )
    log = SourceDiagnostics(
        "incident/server.log", "vllm-log", "node-a", lines_read=1000, lines_recognised=990
    )
    log.skip("not relevant", 9, 'INFO:     127.0.0.1:5000 - "GET /metrics HTTP/1.1" 200 OK')
    log.skip("unparsed timestamp", 1, "garbled <b>line</b> | with pipe")
    log.note("year-less timestamps placed in 2025 (file modification time)")
    log.rows = {"requests": requests.height, "events": 1}
    smi = SourceDiagnostics(
        "incident/gpu.csv", "nvidia-smi-csv", "node-a", lines_read=241, lines_recognised=241
    )
    smi.rows = {"samples": samples.height}
    manifest = Manifest(
        nodes=["node-a"],
        engine={"name": "vllm", "version_family": "v1"},
        model={"name": "meta-llama/Llama-3.1-8B-Instruct"},
        engine_config={
            "model_weights_bytes": 15 * GiB,
            "available_kv_cache_bytes": 4 * GiB,
            "gpu_memory_utilization": 0.9,
            "block_size": 16,
            "num_gpu_blocks": 32768,
        },
        sources=[log, smi],
    )
    return Trace(samples, requests, events, manifest)


def incident_findings(ids: tuple[str, ...] = CULPRITS) -> dict[str, Any]:
    shares = (0.41, 0.33, 0.18)
    culprits = [
        {
            "request_id": rid,
            "share": shares[k],
            "tokens": 15000 - k * 1000 * 0,
            "blocks": 938,
            "bytes": int(shares[k] * 4 * GiB),
            "reason": f"resident at the spike with {15000} stored tokens; admitted {6 + k} s in",
        }
        for k, rid in enumerate(ids)
    ]
    incidents: list[dict[str, Any]] = [
        {
            "id": "I1",
            "class": "kv_exhaustion",
            "start": _iso(OOM_S - 60),
            "window_start": _iso(OOM_S - 60),
            "peak_ts": _iso(OOM_S),
            "peak_bytes": 23 * GiB + 900 * MiB,
            "capacity_bytes": 4 * GiB,
            "coverage": 0.92,
            "culprits": culprits,
            "evidence": [
                {
                    "table": "samples",
                    "ts": _iso(OOM_S),
                    "node": "gpu-node-1",
                    "source": "vllm-log:incident/server.log",
                    "values": {"metric": "kv_usage_ratio", "pool_share": 1.0, "value": 1.0},
                }
            ],
        },
        {
            "id": "I2",
            "class": "transient_peak",
            "start": _iso(20),
            "peak_ts": _iso(30),
            "peak_bytes": 21 * GiB,
            "coverage": 0.5,
            "culprits": [],
        },
    ]
    return {
        "findings_version": 1,
        "kv_model": {
            "pool_bytes": 4 * GiB,
            "statement": "engine statements",
            "bytes_per_token": 131072,
        },
        "remedies": [
            {
                "incident": "I1",
                "class": "kv_exhaustion",
                "action": "set --max-num-seqs 12",
                "setting": "--max-num-seqs",
                "value": "12",
                "basis": "replay",
                "detail": "the recorded traffic replayed with at most 12 requests running never "
                "filled the pool; the 99th percentile wait grows from 0.4 s to 2.1 s",
            },
            {
                "incident": "I1",
                "class": "kv_exhaustion",
                "action": "set --max-model-len 8192",
                "setting": "--max-model-len",
                "value": "8192",
                "basis": "replay",
                "detail": "refuses 3 of 23 requests",
            },
        ],
        "ledger": {
            "ts": _iso(OOM_S),
            "rows": [
                {
                    "request_id": rid,
                    "prompt_tokens": 6000 + 1000 * k,
                    "max_tokens": 16000,
                    "reserved_tokens": 22000 + 1000 * k,
                    "stored_tokens": 15000,
                    "stored_bytes": 15000 * 131072,
                }
                for k, rid in enumerate(ids)
            ],
            "resident_requests": 3,
            "stored_tokens": 45000,
            "stored_bytes": 45000 * 131072,
            "reserved_tokens": 69000,
            "pool_bytes": 4 * GiB,
            "remaining_bytes": 4 * GiB - 45000 * 131072,
        },
        "reconciliation": [
            {
                "item": "KV modelled vs observed",
                "modelled_bytes": 45000 * 131072,
                "observed_bytes": 4 * GiB,
                "note": "prefix sharing not visible in the log",
            },
        ],
        "gaps": [{"kind": "no KV usage series", "detail": "the log states no KV cache usage"}],
        "series": [
            {
                "series": "kv_used from kv_usage_ratio (vllm-log:incident/server.log)",
                "metric": "kv_used",
                "unit": "bytes",
                "source": "vllm-log:incident/server.log",
                "points": [
                    [_iso(s), min(4 * GiB, 480 * MiB + 58 * MiB * s)]
                    for s in range(0, int(OOM_S) + 1, 4)
                ],
            }
        ],
    } | {"incidents": [_with_window(i, ids) if k == 0 else i for k, i in enumerate(incidents)]}


def _with_window(incident: dict[str, Any], ids: tuple[str, ...]) -> dict[str, Any]:
    """The analysis' ``requests_in_window`` rows for the primary incident (ISO times)."""
    rows = [
        {
            "request_id": r["request_id"],
            "seg": 0,
            "from_ts": r["start"].isoformat().replace("+00:00", "Z"),
            "to_ts": r["end"].isoformat().replace("+00:00", "Z"),
            "tokens_from": 0,
            "tokens_to": r["stored_tokens"],
            "bytes_to": r["kv_bytes"],
            "end_basis": "stated",
            "culprit_rank": None,
        }
        for r in incident_lanes(ids).to_dicts()
    ]
    return {**incident, "requests_in_window": rows}


def incident_lanes(ids: tuple[str, ...] = CULPRITS) -> pl.DataFrame:
    rows: list[dict[str, Any]] = []
    for k, rid in enumerate(ids):
        rows.append(
            {
                "request_id": rid,
                "start": at(6 + k),
                "end": at(OOM_S),
                "state": "resident",
                "stored_tokens": 15000,
                "kv_bytes": 15000 * 131072,
            }
        )
    rows.extend(
        {
            "request_id": f"req-short-{j:02d}",
            "start": at(10 + 5 * j),
            "end": at(13 + 5 * j),
            "state": "resident",
            "stored_tokens": 500,
            "kv_bytes": 512 * 131072,
        }
        for j in range(20)
    )
    return pl.DataFrame(
        rows,
        schema={
            "request_id": pl.String,
            "start": pl.Datetime("ns", "UTC"),
            "end": pl.Datetime("ns", "UTC"),
            "state": pl.String,
            "stored_tokens": pl.Int64,
            "kv_bytes": pl.Int64,
        },
    )


def modelled_series() -> pl.DataFrame:
    """The analysis' KV series: modelled every 2 s, observed every 4 s (from the log)."""
    rows = [
        (at(s), "KV modelled", "", float(min(4 * GiB, 512 * MiB + 60 * MiB * s)))
        for s in range(0, int(OOM_S) + 1, 2)
    ] + [
        (
            at(s),
            "KV observed",
            "vllm-log:incident/server.log",
            float(min(4 * GiB, 480 * MiB + 58 * MiB * s)),
        )
        for s in range(0, int(OOM_S) + 1, 4)
    ]
    return pl.DataFrame(
        rows,
        schema={
            "ts": pl.Datetime("ns", "UTC"),
            "series": pl.String,
            "source": pl.String,
            "value": pl.Float64,
        },
        orient="row",
    )


__all__ = ["incident_findings", "incident_lanes", "incident_trace", "modelled_series", "timedelta"]
