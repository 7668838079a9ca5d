"""Hypothesis strategies: small random workloads and settings with many ties and tight pools."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from oomtrace.replay import ReplaySettings, Workload, workload_from_arrays

# times on a quarter-second grid so that arrivals, block boundaries and finishes collide often
_QUARTERS = st.integers(min_value=0, max_value=24).map(lambda q: q / 4)


@st.composite
def workloads(draw: Any, max_requests: int = 12) -> Workload:
    n = draw(st.integers(min_value=1, max_value=max_requests))
    arrivals = sorted(draw(st.lists(_QUARTERS, min_size=n, max_size=n)))
    prompts = draw(st.lists(st.integers(0, 24), min_size=n, max_size=n))
    outputs = draw(st.lists(st.integers(1, 24), min_size=n, max_size=n))
    extra = draw(st.lists(st.integers(0, 8), min_size=n, max_size=n))
    prefill = draw(st.lists(st.sampled_from([0.25, 0.5, 1.0, 2.0]), min_size=n, max_size=n))
    decode = draw(st.lists(st.sampled_from([0.1, 0.25, 0.5, 1.0]), min_size=n, max_size=n))
    return workload_from_arrays(
        arrivals,
        prompts,
        outputs,
        prefill_s=prefill,
        decode_s_per_token=decode,
        max_tokens=[o + e for o, e in zip(outputs, extra, strict=True)],
    )


@st.composite
def settings(draw: Any, policy: str | None = None) -> ReplaySettings:
    return ReplaySettings(
        kv_blocks=draw(st.integers(1, 40)),
        block_size=draw(st.sampled_from([1, 2, 4, 8])),
        policy=policy or draw(st.sampled_from(["on-demand", "reserve"])),
        max_num_seqs=draw(st.sampled_from([None, 1, 2, 3, 5])),
        max_num_batched_tokens=draw(st.sampled_from([None, 4, 16, 64])),
        max_waiting=draw(st.sampled_from([None, None, 0, 1, 4])),
    )
