"""Reconciliations compare two series only while both exist."""

from __future__ import annotations

from oomtrace.analysis.index import SeriesIndex
from oomtrace.analysis.observed_series import BYTES_METRICS
from oomtrace.analysis.reconcile import memory_reconciliations
from tests.factories import at, samples

GiB = 1 << 30


def test_device_memory_after_the_engine_died_is_not_compared_with_its_last_allocator_sample() -> (
    None
):
    # GIVEN an engine holding 40 GiB (NVML 41 GiB with its context) whose process dies at t=10 s:
    # NVML goes on sampling an empty device, the hook's last sample stays at 40 GiB
    rows = [
        {"ts": at(t), "pid": 7, "metric": "torch_reserved_bytes", "value": float(40 * GiB)}
        for t in range(11)
    ]
    rows += [
        {"ts": at(t + 0.05), "metric": "device_used_bytes", "value": float(used)}
        for t, used in enumerate([41 * GiB] * 11 + [GiB // 2] * 3)
    ]
    index = SeriesIndex.from_samples(samples(*rows), BYTES_METRICS, unit="bytes")
    # WHEN device memory is reconciled with the allocator
    (recon,), _ = memory_reconciliations(index)
    # THEN only the moments both were sampled count: 1 GiB outside PyTorch, never a negative gap
    assert recon.points == 10
    assert recon.max_gap == GiB
