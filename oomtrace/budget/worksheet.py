"""The budget worksheet: device memory - weights - runtime reserve = cache; bytes per sequence for
the request contract; concurrency bound = floor(cache / bytes per sequence). Every figure keeps
the assumption it rests on, so the rendering can print it beside the number.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Literal

from oomtrace.budget.dtypes import ASSUMED_MODEL_DTYPE, weight_bytes_per_param
from oomtrace.budget.kv import KVSpec
from oomtrace.budget.layers import ModelArchitecture
from oomtrace.budget.vllm_reservation import EngineView, vllm_view
from oomtrace.budget.weights import checkpoint_tensors, count_dense_parameters
from oomtrace.errors import ConfigError, DoesNotFitError, UsageError
from oomtrace.units import format_bytes

ReserveKind = Literal["provisional", "measured"]
DEFAULT_RESERVE_FRACTION = Fraction(1, 10)


@dataclass(frozen=True)
class Reserve:
    """Runtime reserve (activations, workspaces, CUDA graphs, NCCL, allocator slack). A
    provisional figure is a default or a guess; a measured one came from a real run."""

    bytes: int
    kind: ReserveKind
    basis: str

    @classmethod
    def choose(cls, device: int, guess: int | None, measured: int | None) -> Reserve:
        if guess is not None and measured is not None:
            raise UsageError("give either --reserve (a guess) or --reserve-measured, not both")
        if measured is not None:
            return cls(measured, "measured", "from a real run (--reserve-measured)")
        if guess is not None:
            return cls(
                guess,
                "provisional",
                "your estimate (--reserve); measure it, then pass --reserve-measured",
            )
        default = int(device * DEFAULT_RESERVE_FRACTION)
        return cls(
            default,
            "provisional",
            "default 10% of device memory; measure it, then pass --reserve-measured",
        )


@dataclass(frozen=True)
class RequestContract:
    """How many tokens one sequence may store: input + max new tokens, or a stated total."""

    stored_tokens: int
    max_input_tokens: int | None = None
    max_new_tokens: int | None = None

    @classmethod
    def from_options(
        cls, max_input: int | None, max_new: int | None, tokens: int | None
    ) -> RequestContract:
        if tokens is not None and (max_input is not None or max_new is not None):
            raise UsageError("give either --tokens or --max-input with --max-new, not both")
        if tokens is not None:
            return cls(tokens)
        if max_input is None or max_new is None:
            missing = "--max-new" if max_input is not None else "--max-input"
            if max_input is None and max_new is None:
                raise UsageError(
                    "no request contract: give --max-input N --max-new N "
                    "(stored tokens = input + new) or --tokens N"
                )
            raise UsageError(f"{missing} is missing: stored tokens = --max-input + --max-new")
        if max_input + max_new == 0:
            raise UsageError("--max-input + --max-new is 0 tokens; a sequence stores at least 1")
        return cls(max_input + max_new, max_input, max_new)

    def describe(self) -> str:
        if self.max_input_tokens is None or self.max_new_tokens is None:
            return "stated with --tokens"
        return (
            f"= {self.max_input_tokens:,} input + {self.max_new_tokens:,} max new "
            "(--max-input + --max-new)"
        )


@dataclass(frozen=True)
class Weights:
    """Weight bytes on one GPU, and where the figure came from."""

    total_bytes: int
    per_gpu_bytes: int
    basis: str
    params: int | None = None
    dtype: str | None = None
    by_dtype: tuple[tuple[str, int], ...] = ()


def _per_gpu(total: int, tp: int) -> int:
    return -(-total // tp)


def resolve_weights(
    *,
    arch: ModelArchitecture | None,
    params: int | None,
    weights_bytes: int | None,
    weight_dtype: str,
    tensor_parallel: int,
) -> Weights:
    """Weights from ``--weights-bytes``, ``--params`` x bytes per weight, the checkpoint's
    safetensors headers, or the exact count of a dense decoder's config, in that order."""
    if params is not None and weights_bytes is not None:
        raise UsageError("give either --params or --weights-bytes, not both")
    tp = tensor_parallel
    if weights_bytes is not None:
        basis = f"{format_bytes(weights_bytes)} stated with --weights-bytes"
        return Weights(weights_bytes, _per_gpu(weights_bytes, tp), basis)
    model_dtype = (arch.dtype if arch else None) or ASSUMED_MODEL_DTYPE
    dtype, per_param = weight_bytes_per_param(weight_dtype, model_dtype)
    label = dtype
    if weight_dtype == "auto" and (arch is None or arch.dtype is None):
        label = f"{dtype}, assumed: pass --weight-dtype"
    if params is not None:
        total = int(-(-params * per_param // 1))
        return Weights(
            total,
            _per_gpu(total, tp),
            f"{params:,} params (--params) x {_b(per_param)} ({label})",
            params,
            dtype,
        )
    if arch is None or arch.source is None:
        raise UsageError("no weights: give --params (e.g. 7e9 or 7B) or --weights-bytes")
    from_checkpoint = _checkpoint_weights(arch.source.parent, weight_dtype, tp)
    if from_checkpoint is not None:
        return from_checkpoint
    count = count_dense_parameters(arch.model_type, arch.config)
    # A multimodal checkpoint also loads a vision tower, which its text config does not count.
    if count is None or arch.multimodal:
        raise ConfigError(
            f"cannot count the weights of {arch.name} (model_type {arch.model_type}) from "
            "config.json alone; pass --params (e.g. 671B), --weights-bytes, or a --config "
            "directory holding the checkpoint's *.safetensors files"
        )
    total = int(-(-count * per_param // 1))
    basis = f"{count:,} params (exact, from config.json) x {_b(per_param)} ({label})"
    return Weights(total, _per_gpu(total, tp), basis, count, dtype)


def _checkpoint_weights(directory: Path, weight_dtype: str, tp: int) -> Weights | None:
    """Weights from the safetensors beside the config, when there are any."""
    tensors = checkpoint_tensors(directory)
    if tensors is None or tensors.total_bytes == 0:
        return None
    if weight_dtype != "auto":
        raise UsageError(
            f"--weight-dtype {weight_dtype} applies to a parameter count, but the checkpoint's "
            f"tensors already give the bytes ({format_bytes(tensors.total_bytes)}); "
            "drop it or pass --params"
        )
    basis = f"checkpoint tensors ({tensors.source})"
    total = tensors.total_bytes
    return Weights(total, _per_gpu(total, tp), basis, by_dtype=tensors.by_dtype)


def _b(per_param: Fraction) -> str:
    return f"{per_param} B" if per_param.denominator == 1 else f"{float(per_param):g} B"


@dataclass(frozen=True)
class Worksheet:
    """The result: every quantity of the budget with the inputs it came from."""

    device_bytes: int
    weights: Weights
    reserve: Reserve
    spec: KVSpec
    contract: RequestContract
    block_size: int
    sequence_bytes: int
    available_cache_bytes: int
    max_sequences: int
    engine: EngineView
    arch: ModelArchitecture
    concurrency: int | None = None

    @property
    def fits(self) -> bool:
        """Room for at least one sequence (and for the target concurrency, when given)."""
        return self.max_sequences >= max(1, self.concurrency or 1)

    @property
    def concurrency_shortfall_bytes(self) -> int:
        target = max(1, self.concurrency or 1)
        return max(0, target * self.sequence_bytes - self.available_cache_bytes)

    def assumptions(self) -> list[str]:
        """What the figures rest on: the architecture's notes, a contract longer than the
        model's context, and the KV rule's assumptions."""
        notes: list[str] = []
        notes += list(self.arch.notes)
        context = self.arch.context_tokens
        if context is not None and self.contract.stored_tokens > context:
            notes.append(
                f"{self.contract.stored_tokens:,} stored tokens exceed the model's context of "
                f"{context:,}: the formula still applies, the model may not"
            )
        notes += list(self.spec.assumptions)
        return notes


def build_worksheet(
    *,
    arch: ModelArchitecture,
    device_bytes: int,
    weights: Weights,
    reserve: Reserve,
    spec: KVSpec,
    contract: RequestContract,
    block_size: int = 16,
    max_num_batched_tokens: int = 2048,
    concurrency: int | None = None,
) -> Worksheet:
    if device_bytes <= 0:
        raise UsageError(
            f"--device-memory {format_bytes(device_bytes)} must be more than 0 bytes; "
            "write e.g. 24GiB or 80GB"
        )
    if reserve.bytes >= device_bytes:
        flag = "--reserve-measured" if reserve.kind == "measured" else "--reserve"
        raise UsageError(
            f"{flag} {format_bytes(reserve.bytes)} is not less than --device-memory "
            f"{format_bytes(device_bytes)}; the reserve is part of the device, give a smaller one"
        )
    available = device_bytes - weights.per_gpu_bytes - reserve.bytes
    per_sequence = spec.peak_sequence_bytes(contract.stored_tokens, block_size)
    max_sequences = max(0, available) // per_sequence if per_sequence else 0
    engine = vllm_view(
        spec,
        contract.stored_tokens,
        available,
        block_size=block_size,
        max_num_batched_tokens=max_num_batched_tokens,
    )
    return Worksheet(
        device_bytes=device_bytes,
        weights=weights,
        reserve=reserve,
        spec=spec,
        contract=contract,
        block_size=block_size,
        sequence_bytes=per_sequence,
        available_cache_bytes=available,
        max_sequences=max_sequences,
        engine=engine,
        arch=arch,
        concurrency=concurrency,
    )


def check_fits(ws: Worksheet) -> None:
    """Raise :class:`DoesNotFitError` (exit 1) saying by how much, when the weights and reserve
    leave no cache, one sequence does not fit, or the target concurrency does not."""
    n = ws.contract.stored_tokens
    fmt = format_bytes
    if ws.available_cache_bytes <= 0:
        raise DoesNotFitError(
            f"does not fit: weights {fmt(ws.weights.per_gpu_bytes)} + reserve "
            f"{fmt(ws.reserve.bytes)} leave {fmt(ws.available_cache_bytes)} of "
            f"{fmt(ws.device_bytes)} for the cache; use more GPUs (--tensor-parallel), "
            "smaller weights or a smaller reserve"
        )
    if ws.max_sequences == 0:
        raise DoesNotFitError(
            f"does not fit: one sequence of {n:,} tokens needs {fmt(ws.sequence_bytes)}, only "
            f"{fmt(ws.available_cache_bytes)} is left for the cache; short by "
            f"{fmt(ws.sequence_bytes - ws.available_cache_bytes)}"
        )
    if ws.concurrency is not None and ws.max_sequences < ws.concurrency:
        raise DoesNotFitError(
            f"--concurrency {ws.concurrency} does not fit: {ws.concurrency} sequences of {n:,} "
            f"tokens need {fmt(ws.concurrency * ws.sequence_bytes)}, "
            f"{fmt(ws.available_cache_bytes)} is available; short by "
            f"{fmt(ws.concurrency_shortfall_bytes)} (fits {ws.max_sequences})"
        )
