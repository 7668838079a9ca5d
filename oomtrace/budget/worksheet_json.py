"""The budget worksheet for machines: the stable JSON document behind ``oomtrace budget --json``
(sorted keys when dumped, every figure in bytes or tokens). The terminal form is
:mod:`oomtrace.terminal.worksheet_text`."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from oomtrace.budget.kv import KVSpec
from oomtrace.budget.layers import ModelArchitecture
from oomtrace.budget.ledger import Ledger
from oomtrace.budget.worksheet import Worksheet

SCHEMA = "oomtrace.budget/1"


def _model_json(arch: ModelArchitecture) -> dict[str, Any]:
    return {
        "name": arch.name,
        "model_type": arch.model_type,
        "family": arch.family,
        "source": None if arch.source is None else str(arch.source),
        "layers": arch.num_layers,
        "dtype": arch.dtype,
        "dtype_source": arch.dtype_source,
        "context_tokens": arch.context_tokens,
    }


def _spec_json(spec: KVSpec) -> dict[str, Any]:
    states = {"conv": spec.conv_state_dtype, "ssm": spec.ssm_state_dtype}
    return {
        "kv_cache_dtype": spec.kv_dtype,
        "kv_element_bytes": spec.kv_element_bytes,
        "kv_bytes_per_token": spec.kv_bytes_per_token,
        "unbounded_kv_bytes_per_token": spec.unbounded_kv_bytes_per_token,
        "state_bytes_per_sequence": spec.state_bytes_per_sequence,
        "state_dtypes": states if spec.state_groups else None,
        "kv_groups": [asdict(g) for g in spec.groups],
        "state_groups": [asdict(g) for g in spec.state_groups],
        "tensor_parallel": spec.tensor_parallel,
    }


def to_json(ws: Worksheet, ledger: Ledger | None = None) -> dict[str, Any]:
    """The stable document behind ``--json`` (every figure in bytes or tokens)."""
    w, target = ws.weights, ws.concurrency
    concurrency = None
    if target is not None:
        shortfall = ws.concurrency_shortfall_bytes
        concurrency = {"target": target, "fits": shortfall == 0, "shortfall_bytes": shortfall}
    return {
        "schema": SCHEMA,
        "model": _model_json(ws.arch),
        "device_bytes": ws.device_bytes,
        "weights_bytes": w.per_gpu_bytes,
        "weights_total_bytes": w.total_bytes,
        "weights_basis": w.basis,
        "weights_params": w.params,
        "weights_dtype": w.dtype,
        "weights_by_dtype": dict(w.by_dtype),
        "reserve_bytes": ws.reserve.bytes,
        "reserve_kind": ws.reserve.kind,
        "reserve_basis": ws.reserve.basis,
        "available_cache_bytes": ws.available_cache_bytes,
        **_spec_json(ws.spec),
        "stored_tokens_per_sequence": ws.contract.stored_tokens,
        "max_input_tokens": ws.contract.max_input_tokens,
        "max_new_tokens": ws.contract.max_new_tokens,
        "block_size": ws.block_size,
        "sequence_bytes": ws.sequence_bytes,
        "max_sequences": ws.max_sequences,
        "fits": ws.fits,
        "concurrency": concurrency,
        "vllm": asdict(ws.engine),
        "assumptions": ws.assumptions(),
        "ledger": None if ledger is None else _ledger_json(ledger),
    }


def _ledger_json(ledger: Ledger) -> dict[str, Any]:
    return {
        "source": str(ledger.source),
        "requests": ledger.rows.height,
        "total_reserved_bytes": ledger.total_bytes,
        "available_bytes": ledger.available_bytes,
        "remaining_bytes": ledger.remaining_bytes,
        "admitted_in_order": ledger.admitted,
        "never_fit_alone": ledger.never_fit["request_id"].to_list(),
        "left_out": [
            {"reason": g.reason, "count": g.count, "example": g.example} for g in ledger.gaps
        ],
        "rows": ledger.rows.to_dicts(),
    }
