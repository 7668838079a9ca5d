"""GPU memory budgets for serving a model: architecture from config.json, KV and state bytes,
weights, the worksheet and the admission ledger (``docs/kv-math.md``).

Names are loaded on first use, so that importing the CLI's option choices (``budget.dtypes``)
does not load Polars.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oomtrace import lazy

if TYPE_CHECKING:
    from oomtrace.budget.architecture import load_architecture
    from oomtrace.budget.kv import KVGroup, KVSpec, StateGroup, kv_spec
    from oomtrace.budget.layers import AttentionLayer, ModelArchitecture, RecurrentLayer
    from oomtrace.budget.plan import BudgetRequest, compute_budget
    from oomtrace.budget.vllm_reservation import EngineView, vllm_view

_EXPORTS = {
    "AttentionLayer": "oomtrace.budget.layers",
    "BudgetRequest": "oomtrace.budget.plan",
    "EngineView": "oomtrace.budget.vllm_reservation",
    "KVGroup": "oomtrace.budget.kv",
    "KVSpec": "oomtrace.budget.kv",
    "ModelArchitecture": "oomtrace.budget.layers",
    "RecurrentLayer": "oomtrace.budget.layers",
    "StateGroup": "oomtrace.budget.kv",
    "compute_budget": "oomtrace.budget.plan",
    "kv_spec": "oomtrace.budget.kv",
    "load_architecture": "oomtrace.budget.architecture",
    "vllm_view": "oomtrace.budget.vllm_reservation",
}
__all__ = [
    "AttentionLayer",
    "BudgetRequest",
    "EngineView",
    "KVGroup",
    "KVSpec",
    "ModelArchitecture",
    "RecurrentLayer",
    "StateGroup",
    "compute_budget",
    "kv_spec",
    "load_architecture",
    "vllm_view",
]


__getattr__ = lazy.exports("oomtrace.budget", _EXPORTS)
