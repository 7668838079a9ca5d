"""The samples table split into series in one streaming pass, by exact integer keys."""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from oomtrace.analysis import samples as smp
from oomtrace.analysis.observed_series import SERIES_KEYS
from oomtrace.schema import empty
from tests.factories import at, samples

METRICS = ["device_used_bytes", "process_used_bytes", "torch_reserved_bytes"]


@st.composite
def tables(draw: st.DrawFn) -> pl.DataFrame:
    rows = [
        {
            "ts": at(draw(st.integers(0, 50))),
            "node": draw(st.sampled_from(["a", "b"])),
            "source": draw(st.sampled_from(["nvml", "smi", "torch", "dcgm", "prom", "log"])),
            "device": draw(st.none() | st.integers(0, 3)),
            "pid": draw(st.none() | st.sampled_from([7, 4242, 2**40])),
            "metric": draw(st.sampled_from([*METRICS, "kv_blocks_used"])),
            "value": float(draw(st.integers(0, 10**12))),
        }
        for _ in range(draw(st.integers(0, 40)))
    ]
    return samples(*rows) if rows else empty("samples")


def _plain(frame: pl.DataFrame) -> dict[tuple[Any, ...], pl.DataFrame]:
    """The split written plainly: one group per key, each sorted by time (stably)."""
    wanted = frame.filter(pl.col("metric").is_in(METRICS))
    parts = wanted.partition_by(SERIES_KEYS, as_dict=True, include_key=False, maintain_order=True)
    return {k: p.select("ts", "value").sort("ts", maintain_order=True) for k, p in parts.items()}


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(frame=tables(), chunk=st.integers(1, 7))
def test_the_split_equals_one_group_per_series_across_batches(
    frame: pl.DataFrame, chunk: int
) -> None:
    # GIVEN any samples, streamed in batches of a few rows
    got = smp.split_series(frame.lazy(), METRICS, chunk_rows=chunk)
    # THEN every series holds exactly its own rows, in time order
    expected = _plain(frame)
    assert set(got) == set(expected)
    for key, part in expected.items():
        assert_frame_equal(got[key], part)


def test_more_keys_than_the_packed_code_holds_are_split_exactly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN more processes than the code has room for
    frame = samples(
        *[
            {"ts": at(i), "metric": "process_used_bytes", "pid": 100 + i % 5, "value": float(i)}
            for i in range(20)
        ]
    )
    monkeypatch.setattr(smp, "_BITS", {**smp._BITS, "pid": 2})
    # WHEN split, THEN the series are still one per process
    got = smp.split_series(frame.lazy(), METRICS)
    assert sorted(k[3] for k in got) == [100, 101, 102, 103, 104]
    assert [p.height for p in got.values()] == [4] * 5


def test_series_sampled_together_share_their_times_and_others_keep_their_own() -> None:
    # GIVEN two memory series sampled at the same moments and a third at other moments
    rows = [
        {"ts": at(t), "node": "a", "source": "torch", "metric": m, "value": float(t)}
        for t in range(5)
        for m in ("torch_reserved_bytes", "device_used_bytes")
    ] + [
        {
            "ts": at(t + 0.5),
            "node": "a",
            "source": "nvml",
            "metric": "process_used_bytes",
            "value": 1.0,
        }
        for t in range(5)
    ]
    # WHEN the table is split into series
    got = smp.split_series(samples(*rows).lazy(), METRICS)
    # THEN each series has its own times, and the two sampled together hold one time column
    times = {key[4]: frame["ts"] for key, frame in got.items()}
    assert times["device_used_bytes"].to_list() == [at(t) for t in range(5)]
    assert times["process_used_bytes"].to_list() == [at(t + 0.5) for t in range(5)]
    assert times["torch_reserved_bytes"].to_list() == times["device_used_bytes"].to_list()
    together = [times[m].to_numpy() for m in ("torch_reserved_bytes", "device_used_bytes")]
    assert np.shares_memory(*together)
    assert not np.shares_memory(times["process_used_bytes"].to_numpy(), together[0])
