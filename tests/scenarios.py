"""A deterministic scenario builder: canonical traces whose culprits are known by construction.

A :class:`ScenarioBuilder` holds requests (arrival, admission, prompt, decode), the engine's fixed
memory, other processes and allocator behaviour as plain functions of time; :meth:`build` samples
them into the canonical tables exactly as an engine and NVML would report them (KV blocks as whole
blocks per request, device memory as the sum of its parts). Each shape function returns a
:class:`Scenario` with the class and culprits the analysis must find.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from oomtrace.schema import conform, empty
from oomtrace.trace import Manifest, Trace
from oomtrace.units import GiB, MiB
from tests.factories import at

NODE = "node-a"
ENGINE_PID = 1000


@dataclass(frozen=True)
class Req:
    """One request: stored tokens are the prompt from admission, then one more per decode step."""

    id: str
    arrive: float
    admit: float
    prompt: int
    output: int
    max_tokens: int
    rate: float = 20.0
    prefill_s: float = 0.2
    finishes: bool = True
    first_token: bool = True
    preempt: tuple[float, float] | None = None

    @property
    def first_token_at(self) -> float:
        return self.admit + self.prefill_s

    @property
    def end(self) -> float:
        pause = self.preempt[1] - self.preempt[0] if self.preempt else 0.0
        return self.first_token_at + (self.output - 1) / self.rate + pause

    def tokens(self, t: float) -> int:
        """Ground truth: tokens stored at ``t`` (0 when not resident)."""
        if t < self.admit or (self.finishes and t >= self.end):
            return 0
        if self.preempt and self.preempt[0] <= t < self.preempt[1]:
            return 0
        if t < self.first_token_at or not self.first_token:
            return self.prompt
        decoding = t - self.first_token_at
        if self.preempt and t >= self.preempt[1]:
            decoding -= self.preempt[1] - self.preempt[0]
        return self.prompt + min(self.output, 1 + math.floor(decoding * self.rate))


@dataclass
class ScenarioBuilder:
    """Everything a scenario is made of; :meth:`build` turns it into a canonical trace."""

    duration: float
    pool_blocks: int = 1000
    block_size: int = 16
    bytes_per_block: int = 2 * MiB
    device_total: int = 80 * GiB
    weights: int = 16 * GiB
    non_torch: int = 512 * MiB
    slack: int = 128 * MiB
    sample_every: float = 1.0
    requests: list[Req] = field(default_factory=list)
    activations: Callable[[float], int] = lambda _t: 1 * GiB
    extra_peaks: list[tuple[float, int]] = field(default_factory=list)
    foreign: dict[int, Callable[[float], int]] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    preemptions: list[float] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def pool_bytes(self) -> int:
        return self.pool_blocks * self.bytes_per_block

    def add(self, *requests: Req) -> ScenarioBuilder:
        self.requests.extend(requests)
        return self

    def blocks(self, t: float) -> int:
        return sum(math.ceil(r.tokens(t) / self.block_size) for r in self.requests)

    def allocated(self, t: float) -> int:
        return self.weights + self.pool_bytes + self.activations(t)

    def oom(self, t: float, requested: int, **fields: Any) -> ScenarioBuilder:
        """An OOM at ``t``, with PyTorch's accounting computed from the scenario."""
        allocated = self.allocated(t)
        used = allocated + self.slack + self.non_torch + sum(f(t) for f in self.foreign.values())
        row = {
            "ts": at(t),
            "kind": "oom",
            "requested_bytes": requested,
            "total_bytes": self.device_total,
            "free_bytes": max(self.device_total - used, 0),
            "allocated_bytes": allocated,
            "reserved_unallocated_bytes": self.slack,
            "process_bytes": allocated + self.slack + self.non_torch,
            "detail": "CUDA out of memory.",
        }
        self.events.append({**row, **fields})
        return self

    def build(self) -> Trace:
        return Trace(self._samples(), self._requests(), self._events(), self._manifest())

    def _samples(self) -> pl.DataFrame:
        rows: list[dict[str, Any]] = []
        steps = int(self.duration / self.sample_every) + 1
        preempted = 0
        for i in range(steps):
            t = i * self.sample_every
            ts = at(t)
            used_blocks = self.blocks(t)
            preempted = sum(1 for p in self.preemptions if p <= t)
            running = sum(1 for r in self.requests if r.tokens(t) > 0)
            waiting = sum(1 for r in self.requests if r.arrive <= t < r.admit)
            allocated = self.allocated(t)
            peak = max(
                [allocated]
                + [
                    allocated + extra
                    for when, extra in self.extra_peaks
                    if t - self.sample_every < when <= t
                ]
            )
            reserved = allocated + self.slack
            engine = reserved + self.non_torch
            foreign = {pid: f(t) for pid, f in self.foreign.items()}
            engine_rows = [
                ("kv_blocks_used", used_blocks, None, None),
                ("kv_blocks_total", self.pool_blocks, None, None),
                ("kv_usage_ratio", used_blocks / self.pool_blocks, None, None),
                ("requests_running", running, None, None),
                ("requests_waiting", waiting, None, None),
                ("preemptions_total", preempted, None, None),
            ]
            memory_rows = [
                ("device_total_bytes", self.device_total, 0, None),
                ("device_used_bytes", engine + sum(foreign.values()), 0, None),
                ("torch_allocated_bytes", allocated, 0, ENGINE_PID),
                ("torch_allocated_peak_bytes", peak, 0, ENGINE_PID),
                ("torch_reserved_bytes", reserved, 0, ENGINE_PID),
                ("process_used_bytes", engine, 0, ENGINE_PID),
            ] + [("process_used_bytes", v, 0, pid) for pid, v in foreign.items() if v > 0]
            rows += [
                {
                    "ts": ts,
                    "source": "metrics",
                    "metric": m,
                    "value": float(v),
                    "device": d,
                    "pid": p,
                }
                for m, v, d, p in engine_rows
            ]
            rows += [
                {"ts": ts, "source": "nvml", "metric": m, "value": float(v), "device": d, "pid": p}
                for m, v, d, p in memory_rows
            ]
        frame = pl.DataFrame(rows, schema_overrides={"device": pl.Int32, "pid": pl.Int64})
        return conform("samples", frame.with_columns(node=pl.lit(NODE)))

    def _requests(self) -> pl.DataFrame:
        rows: list[dict[str, Any]] = []
        for r in self.requests:
            rows.append(
                {
                    "ts": at(r.arrive),
                    "request_id": r.id,
                    "event": "arrived",
                    "prompt_tokens": r.prompt,
                    "max_tokens": r.max_tokens,
                }
            )
            if r.admit <= self.duration:
                rows.append({"ts": at(r.admit), "request_id": r.id, "event": "admitted"})
            if r.first_token and r.first_token_at <= self.duration:
                rows.append(
                    {
                        "ts": at(r.first_token_at),
                        "request_id": r.id,
                        "event": "first_token",
                        "output_tokens": 1,
                    }
                )
            if r.preempt and r.preempt[0] <= self.duration:
                rows.append({"ts": at(r.preempt[0]), "request_id": r.id, "event": "preempted"})
                if r.preempt[1] <= self.duration:
                    rows.append({"ts": at(r.preempt[1]), "request_id": r.id, "event": "resumed"})
            if r.finishes and r.end <= self.duration:
                rows.append(
                    {
                        "ts": at(r.end),
                        "request_id": r.id,
                        "event": "finished",
                        "output_tokens": r.output,
                    }
                )
        if not rows:
            return empty("requests")
        frame = pl.DataFrame(rows).with_columns(node=pl.lit(NODE), source=pl.lit("engine-log"))
        return conform("requests", frame.sort("ts"))

    def _events(self) -> pl.DataFrame:
        rows = [{"device": 0, **e} for e in self.events]
        rows += [{"ts": at(t), "kind": "preemption", "device": None} for t in self.preemptions]
        if not rows:
            return empty("events")
        frame = pl.DataFrame(rows, schema_overrides={"device": pl.Int32})
        frame = frame.with_columns(node=pl.lit(NODE), source=pl.lit("engine-log"))
        return conform("events", frame.sort("ts"))

    def _manifest(self) -> Manifest:
        config = {
            "block_size": self.block_size,
            "num_gpu_blocks": self.pool_blocks,
            "available_kv_cache_bytes": self.pool_bytes,
            "model_weights_bytes": self.weights,
            "gpu_memory_utilization": 0.95,
            "max_model_len": 32768,
            **self.config,
        }
        return Manifest(nodes=[NODE], engine={"name": "vllm"}, engine_config=config)


@dataclass(frozen=True)
class Scenario:
    """A trace with the facts the analysis must find."""

    name: str
    trace: Trace
    cls: str
    culprits: tuple[str, ...]
    peak_ts: float | None = None
    foreign_pid: int | None = None


def _background(start: float, stop: float, every: float, prefix: str = "bg") -> list[Req]:
    """Short requests arriving steadily: prompt 200, 100 tokens out at 20 tokens/s."""
    out = []
    t, i = start, 0
    while t < stop:
        out.append(Req(f"{prefix}-{i:03d}", t, t + 0.1, 200, 100, 256))
        t += every
        i += 1
    return out


def long_requests_growing() -> Scenario:
    """Three long generations grow together until the pool is full; a preemption storm follows."""
    b = ScenarioBuilder(duration=215.0)
    b.add(*_background(0.0, 215.0, 2.0))
    b.add(
        Req("long-1", 10.0, 10.0, 1000, 8000, 8192, finishes=False),
        Req("long-2", 12.0, 12.0, 1000, 8000, 8192, finishes=False),
        Req("long-3", 14.0, 14.0, 1000, 8000, 8192, finishes=False),
    )
    full = next(t for t in range(150, 215) if b.blocks(t) >= 0.96 * b.pool_blocks)
    b.duration = full + 5.0
    b.preemptions = [full + 0.4 * k for k in range(12)]
    return Scenario(
        "long_requests_growing",
        b.build(),
        "kv_exhaustion",
        ("long-1", "long-2", "long-3"),
        peak_ts=float(full),
    )


def prefill_peak() -> Scenario:
    """A 24,000-token prompt in prefill needs a large activation buffer: the allocation fails while
    the KV pool has room."""
    b = ScenarioBuilder(duration=120.0, pool_blocks=4000, device_total=30 * GiB)
    b.add(*_background(0.0, 120.0, 1.0))
    b.add(Req("huge-prompt", 99.5, 100.0, 24000, 500, 1000, finishes=False, first_token=False))
    b.extra_peaks.append((100.8, 5 * GiB))
    b.oom(100.8, 6 * GiB)
    return Scenario("prefill_peak", b.build(), "transient_peak", ("huge-prompt",), peak_ts=100.8)


def admission_burst() -> Scenario:
    """Thirty 1,000-token prompts admitted within two seconds fill the pool."""
    b = ScenarioBuilder(duration=126.0, pool_blocks=2200)
    b.add(*_background(0.0, 126.0, 3.0))
    burst = [
        Req(f"burst-{i:02d}", 120.0 + i * 0.05, 120.0 + i * 0.06, 1000, 400, 512, finishes=False)
        for i in range(30)
    ]
    b.add(*burst)
    b.preemptions = [124.0 + k for k in range(4)]
    return Scenario(
        "admission_burst", b.build(), "kv_exhaustion", tuple(r.id for r in burst), peak_ts=None
    )


def foreign_process() -> Scenario:
    """Another process on the GPU grows until the engine's next allocation fails."""
    b = ScenarioBuilder(duration=110.0, pool_blocks=28500)
    b.add(*_background(0.0, 110.0, 2.0))
    b.foreign[4242] = lambda t: 0 if t < 50 else GiB + int((t - 50) * 90 * MiB)
    b.oom(110.0, GiB, process_bytes=None)
    return Scenario(
        "foreign_process", b.build(), "foreign_memory", (), peak_ts=110.0, foreign_pid=4242
    )


def slow_leak() -> Scenario:
    """Memory that is not given back after each busy period climbs until a normal step fails."""
    b = ScenarioBuilder(
        duration=3000.0,
        pool_blocks=3000,
        device_total=24 * GiB,
        weights=14 * GiB,
        bytes_per_block=2 * MiB,
        sample_every=5.0,
    )
    cycles = 10
    for c in range(cycles):
        b.add(*_background(c * 300.0, c * 300.0 + 150.0, 5.0, prefix=f"c{c}"))

    def activations(t: float) -> int:
        return GiB // 2 + int(min(t // 300, cycles - 1) * 300 * MiB)

    b.activations = activations
    b.oom(2990.0, 1 * GiB)
    return Scenario("slow_leak", b.build(), "leak", (), peak_ts=2990.0)


def fragmentation() -> Scenario:
    """The allocator holds far more reserved-but-free memory than the allocation that failed."""
    b = ScenarioBuilder(duration=60.0, slack=6 * GiB, device_total=28 * GiB)
    b.add(*_background(0.0, 60.0, 2.0))
    b.oom(55.0, 3 * GiB)
    return Scenario("fragmentation", b.build(), "fragmentation", (), peak_ts=55.0)


def startup_misfit() -> Scenario:
    """The engine refuses to start: one request of max_model_len does not fit the cache."""
    b = ScenarioBuilder(duration=20.0, pool_blocks=100)
    b.events.append({"ts": at(0.0), "kind": "engine_start"})
    b.events.append(
        {
            "ts": at(15.0),
            "kind": "startup_kv_insufficient",
            "requested_bytes": 4 * GiB,
            "free_bytes": 200 * MiB,
            "detail": "To serve at least one request ...",
        }
    )
    return Scenario("startup_misfit", b.build(), "startup_misfit", (), peak_ts=15.0)


SHAPES: dict[str, Callable[[], Scenario]] = {
    "long_requests_growing": long_requests_growing,
    "prefill_peak": prefill_peak,
    "admission_burst": admission_burst,
    "foreign_process": foreign_process,
    "slow_leak": slow_leak,
    "fragmentation": fragmentation,
    "startup_misfit": startup_misfit,
}
