"""The memory one request's share of an engine step needs, estimated from its parameters.

A transient peak is an allocation inside one forward step (not the KV pool) that did not fit.
What a request adds to its step, in a decoder-only transformer as vLLM and SGLang run it:

* **activations**: every scheduled token passes the MLP, whose gate and up projections are the
  widest tensor of the step (``tokens x 2 x intermediate_size`` in the model's dtype: vLLM's
  ``MergedColumnParallelLinear``); a prefill schedules the uncached prompt, cut into chunks of
  ``max_num_batched_tokens`` where chunked prefill is on, a decode one token per sequence;
* **logits over the vocabulary**: one row per position whose logits are computed, in the model's
  dtype, then as float32 log-probabilities (``vocab x (dtype + 4)`` bytes a row): normally one
  row per sequence sampled (``n``, or ``best_of`` where larger), but **every prompt position** of
  the chunk when the request asks for ``prompt_logprobs`` (vLLM's ``_get_prompt_logprobs_dict``);
  top ``logprobs`` are taken from the same float32 rows.

The widths come from the model's ``config.json`` (:class:`ModelDims`, ``--config``). Without
them the bytes are unknown and requests are ranked by token equivalents: a vocabulary-wide logit
row counts as :data:`ROW_TOKENS` scheduled tokens, the smallest ratio ``vocab x (dtype + 4) / (2
x intermediate x dtype)`` among common architectures (Mistral-7B 3.3, Llama-2-7B 4.4, Qwen2.5-7B
12, Llama-3-8B 13.4), so that a prompt-logprobs chunk is never ranked below a plain prompt it
outweighs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import polars as pl

from oomtrace.budget import load_architecture
from oomtrace.budget.dtypes import MODEL_DTYPE_BYTES

ROW_TOKENS: Final = 3
FLOAT32: Final = 4


@dataclass(frozen=True)
class ModelDims:
    """The widths that size a step: vocabulary, MLP (``intermediate_size``), the activation
    dtype's bytes, and where they come from."""

    vocab: int
    intermediate: int
    dtype_bytes: int
    source: str

    @classmethod
    def from_config(
        cls, config: Mapping[str, Any], dtype_bytes: int, source: str
    ) -> ModelDims | None:
        """From a Hugging Face ``config.json`` (its text model's part); None when a width is
        missing."""
        vocab, inner = config.get("vocab_size"), config.get("intermediate_size")
        if not isinstance(vocab, int) or not isinstance(inner, int) or vocab < 1 or inner < 1:
            return None
        return cls(vocab, inner, dtype_bytes, source)

    def token_bytes(self) -> int:
        return 2 * self.intermediate * self.dtype_bytes

    def row_bytes(self) -> int:
        return self.vocab * (self.dtype_bytes + FLOAT32)


@dataclass(frozen=True)
class StepEstimate:
    """One request's share of the step that failed: the tokens it scheduled, the logit rows it
    asked for, the parameter that makes it large (``prompt_logprobs``, ``n``, ``best_of``,
    ``logprobs``; None for a plain request) and the estimated bytes (None without model dims).
    ``weight`` ranks requests: bytes when known, else token equivalents."""

    request_id: str
    step_tokens: int
    logit_rows: int
    parameter: str | None
    bytes: int | None
    weight: float
    in_prefill: bool


def estimate_steps(
    candidates: pl.DataFrame, *, chunk: int | None, dims: ModelDims | None
) -> tuple[StepEstimate, ...]:
    """Estimates for ``candidates`` (``request_id, in_prefill, prompt_tokens, cached_tokens,
    n, best_of, logprobs, prompt_logprobs``; nulls where not stated), heaviest first. ``chunk``
    is the prefill budget of one step (``max_num_batched_tokens``; None: the whole prompt)."""
    out = []
    for row in candidates.iter_rows(named=True):
        sequences = max(row.get("n") or 1, row.get("best_of") or 1)
        prefill = bool(row["in_prefill"])
        if prefill:
            uncached = max((row["prompt_tokens"] or 0) - (row.get("cached_tokens") or 0), 1)
            tokens = min(uncached, chunk) if chunk else uncached
        else:
            tokens = sequences
        parameter = None
        rows = sequences
        if prefill and row.get("prompt_logprobs") is not None:
            rows, parameter = tokens, "prompt_logprobs"
        elif row.get("best_of") and row["best_of"] > 1 and row["best_of"] >= (row.get("n") or 1):
            parameter = "best_of"
        elif sequences > 1:
            parameter = "n"
        elif row.get("logprobs") is not None:
            parameter = "logprobs"
        size = None if dims is None else tokens * dims.token_bytes() + rows * dims.row_bytes()
        weight = float(size) if size is not None else float(tokens + rows * ROW_TOKENS)
        out.append(StepEstimate(row["request_id"], tokens, rows, parameter, size, weight, prefill))
    return tuple(sorted(out, key=lambda e: (-e.weight, e.request_id)))


def model_dims(config: Path) -> ModelDims | None:
    """The widths of the model in ``config`` (a config.json or its directory), through the
    budget's reader (its errors are those of ``--config``)."""
    arch = load_architecture(config)
    dtype = MODEL_DTYPE_BYTES.get(arch.dtype or "bfloat16", 2)
    return ModelDims.from_config(arch.config or {}, dtype, f"{arch.name} config.json")
