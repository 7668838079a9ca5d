"""One call from options to a worksheet: what ``oomtrace budget`` runs, usable from code too."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from oomtrace.budget.architecture import explicit_architecture, load_architecture
from oomtrace.budget.kv import kv_spec
from oomtrace.budget.layers import ModelArchitecture
from oomtrace.budget.ledger import Ledger, build_ledger
from oomtrace.budget.worksheet import (
    RequestContract,
    Reserve,
    Worksheet,
    build_worksheet,
    resolve_weights,
)
from oomtrace.errors import UsageError
from oomtrace.units import format_bytes


@dataclass(frozen=True)
class BudgetRequest:
    """Everything a budget needs. The model is ``config`` (a config.json or model directory)
    or ``layers`` / ``kv_heads`` / ``head_dim`` (all full attention)."""

    device_bytes: int
    config: Path | None = None
    layers: int | None = None
    kv_heads: int | None = None
    head_dim: int | None = None
    reserve_bytes: int | None = None
    reserve_measured_bytes: int | None = None
    params: int | None = None
    weights_bytes: int | None = None
    weight_dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    mamba_ssm_cache_dtype: str = "auto"
    max_input_tokens: int | None = None
    max_new_tokens: int | None = None
    tokens: int | None = None
    block_size: int = 16
    tensor_parallel: int = 1
    max_num_batched_tokens: int = 2048
    concurrency: int | None = None
    ledger: Path | None = None


def _architecture(request: BudgetRequest) -> ModelArchitecture:
    shape = (request.layers, request.kv_heads, request.head_dim)
    given = [v is not None for v in shape]
    if request.config is not None:
        if any(given):
            raise UsageError("give either --config or --layers/--kv-heads/--head-dim, not both")
        return load_architecture(request.config)
    layers, kv_heads, head_dim = shape
    if layers is None or kv_heads is None or head_dim is None:
        if any(given):
            raise UsageError(
                "an explicit architecture needs all of --layers, --kv-heads and --head-dim"
            )
        raise UsageError(
            "no model: give --config (config.json or model directory) "
            "or --layers, --kv-heads and --head-dim"
        )
    return explicit_architecture(layers=layers, kv_heads=kv_heads, head_dim=head_dim)


def compute_budget(request: BudgetRequest) -> tuple[Worksheet, Ledger | None]:
    """The worksheet (and the admission ledger when ``request.ledger`` is set). Raises the
    typed errors of :mod:`oomtrace.errors` for unusable input; a budget that does not fit is a
    result here (see :func:`oomtrace.budget.worksheet.check_fits`)."""
    if request.device_bytes <= 0:
        raise UsageError(
            f"--device-memory {format_bytes(request.device_bytes)} must be more than 0 bytes; "
            "write e.g. 24GiB or 80GB"
        )
    contract = RequestContract.from_options(
        request.max_input_tokens, request.max_new_tokens, request.tokens
    )
    reserve = Reserve.choose(
        request.device_bytes, request.reserve_bytes, request.reserve_measured_bytes
    )
    arch = _architecture(request)
    spec = kv_spec(
        arch,
        kv_cache_dtype=request.kv_cache_dtype,
        tensor_parallel=request.tensor_parallel,
        mamba_ssm_cache_dtype=request.mamba_ssm_cache_dtype,
    )
    weights = resolve_weights(
        arch=arch,
        params=request.params,
        weights_bytes=request.weights_bytes,
        weight_dtype=request.weight_dtype,
        tensor_parallel=request.tensor_parallel,
    )
    worksheet = build_worksheet(
        arch=arch,
        device_bytes=request.device_bytes,
        weights=weights,
        reserve=reserve,
        spec=spec,
        contract=contract,
        block_size=request.block_size,
        max_num_batched_tokens=request.max_num_batched_tokens,
        concurrency=request.concurrency,
    )
    ledger = None
    if request.ledger is not None:
        ledger = build_ledger(
            request.ledger, spec, worksheet.available_cache_bytes, request.block_size
        )
    return worksheet, ledger
