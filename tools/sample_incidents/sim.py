"""What the engine did, from the replay simulator: every request's residencies and the pool.

The simulator (:mod:`oomtrace.replay`) is the engine model of these samples: arrivals, prompt and
output lengths, prefill and decode times go in; admissions, first tokens, preemptions, finishes
and the block level of the pool come out, exact to the nanosecond. The log writers then print
what a real engine prints about those moments, and nothing else.

Semantics (:mod:`oomtrace.replay.settings`): a residency that starts at ``start`` with ``g0`` output
tokens already produced ends its prefill at ``first``, produces one token then and one every
``decode_ns`` after; every produced token but the last is stored; the residency holds
``ceil(stored / block_size)`` blocks.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import polars as pl

from oomtrace.replay import ReplaySettings, kernel, runner, workload_from_frame

NS = 1_000_000_000


@dataclass(frozen=True)
class Spec:
    """One request as the client sent it and as the engine would serve it alone."""

    rid: str
    arrival_s: float
    prompt: int
    output: int
    max_tokens: int
    prefill_s: float
    decode_s: float


@dataclass(frozen=True)
class Residency:
    """One stay in the running batch: ``end_kind`` is ``preempted``, ``finished`` or ``open``
    (still running when the simulation was cut)."""

    start_ns: int
    first_ns: int
    g0: int
    end_ns: int
    end_kind: str
    produced_at_end: int


@dataclass(frozen=True)
class PoolPoint:
    """The pool read at an instant: blocks held just before it, running and waiting requests,
    and the highest level since the previous reading."""

    ts_ns: int
    blocks: int
    running: int
    waiting: int
    peak_blocks: int


class Run:
    """A simulated run of ``specs`` under ``settings``, starting at ``t0``."""

    def __init__(self, specs: list[Spec], settings: ReplaySettings, t0: datetime) -> None:
        self.specs = specs
        self.settings = settings
        self.t0 = t0
        self.index = {s.rid: i for i, s in enumerate(specs)}
        frame = pl.DataFrame(
            {
                "request_id": [s.rid for s in specs],
                "arrival_ns": [round(s.arrival_s * NS) for s in specs],
                "prompt_tokens": [s.prompt for s in specs],
                "output_tokens": [s.output for s in specs],
                "max_tokens": [s.max_tokens for s in specs],
                "prefill_ns": [max(1, round(s.prefill_s * NS)) for s in specs],
                "decode_ns_per_token": [max(1, round(s.decode_s * NS)) for s in specs],
            },
            schema_overrides=dict.fromkeys(("arrival_ns", "prompt_tokens"), pl.Int64),
        )
        self.workload = workload_from_frame(frame, t0=t0)
        order = self.workload.requests["request_id"].to_list()
        if order != [s.rid for s in specs]:
            raise ValueError("specs must be given in arrival order")
        self._decode = self.workload.requests["decode_ns_per_token"].to_list()
        raw = runner.simulate(self.workload, settings, record=True)
        self.raw_state = raw.state
        self.residencies = self._residencies(raw.log)
        self._spans = self._first_and_last()
        self.preemptions = sorted(
            (int(t), int(i))
            for t, i, k in zip(raw.log[0], raw.log[1], raw.log[2], strict=True)
            if k == kernel.LOG_PREEMPT
        )
        self.rejected = sorted(
            int(i) for i, k in zip(raw.log[1], raw.log[2], strict=True) if k == kernel.LOG_REJECT
        )

    # -- lifecycle ------------------------------------------------------------------------------

    def _residencies(self, log: Any) -> list[list[Residency]]:
        rows = sorted(
            zip(log[0].tolist(), log[1].tolist(), log[2].tolist(), log[3].tolist(), strict=True),
            key=lambda r: (r[1], r[0]),
        )
        out: list[list[Residency]] = [[] for _ in self.specs]
        open_: dict[int, tuple[int, int, int]] = {}
        produced: dict[int, int] = {}
        for t, i, kind, extra in rows:
            if kind == kernel.LOG_ADMIT:
                open_[i] = (t, extra, produced.get(i, 0))
            elif kind in (kernel.LOG_PREEMPT, kernel.LOG_FINISH):
                start, first, g0 = open_.pop(i)
                done = extra if kind == kernel.LOG_PREEMPT else self.specs[i].output
                produced[i] = done
                end_kind = "preempted" if kind == kernel.LOG_PREEMPT else "finished"
                out[i].append(Residency(start, first, g0, t, end_kind, done))
        for i, (start, first, g0) in open_.items():
            out[i].append(Residency(start, first, g0, -1, "open", -1))
        return out

    def ns(self, ts: datetime) -> int:
        return (ts - self.t0) // timedelta(microseconds=1) * 1000

    def at(self, t_ns: int) -> datetime:
        return self.t0 + timedelta(microseconds=t_ns // 1000)

    def arrival_ns(self, i: int) -> int:
        return round(self.specs[i].arrival_s * NS)

    def first_admission_ns(self, i: int) -> int | None:
        stays = self.residencies[i]
        return stays[0].start_ns if stays else None

    def finish_ns(self, i: int) -> int | None:
        stays = self.residencies[i]
        if stays and stays[-1].end_kind == "finished":
            return stays[-1].end_ns
        return None

    def first_token_ns(self, i: int) -> int | None:
        stays = self.residencies[i]
        return stays[0].first_ns if stays else None

    def residency_at(self, i: int, t_ns: int) -> Residency | None:
        for stay in self.residencies[i]:
            if stay.start_ns <= t_ns and (stay.end_ns < 0 or t_ns < stay.end_ns):
                return stay
        return None

    def produced(self, i: int, t_ns: int) -> int:
        """Output tokens request ``i`` has produced by ``t_ns`` (inclusive)."""
        done = 0
        for stay in self.residencies[i]:
            if stay.start_ns > t_ns:
                break
            if stay.end_ns >= 0 and stay.end_ns <= t_ns:
                done = stay.produced_at_end
                continue
            if t_ns < stay.first_ns:
                return stay.g0
            step = (t_ns - stay.first_ns) // self._decode[i]
            return int(min(stay.g0 + step + 1, self.specs[i].output))
        return done

    def stored(self, i: int, t_ns: int) -> int:
        """Tokens request ``i`` stores in the pool at ``t_ns`` (0 when not resident)."""
        stay = self.residency_at(i, t_ns)
        if stay is None:
            return 0
        spec = self.specs[i]
        return spec.prompt + min(self.produced(i, t_ns), spec.output - 1)

    def blocks(self, i: int, t_ns: int) -> int:
        size = self.settings.block_size
        return -(-self.stored(i, t_ns) // size)

    def residents(self, t_ns: int) -> list[int]:
        return [i for i in range(len(self.specs)) if self.residency_at(i, t_ns) is not None]

    def preemptions_between(self, t0_ns: int, t1_ns: int) -> int:
        """Preemptions in ``(t0_ns, t1_ns]``."""
        times = [t for t, _ in self.preemptions]
        return bisect.bisect_right(times, t1_ns) - bisect.bisect_right(times, t0_ns)

    def pool(self, probes_ns: list[int]) -> list[PoolPoint]:
        """The pool at each (sorted) instant."""
        probes = np.asarray(probes_ns, dtype=np.int64)
        raw = runner.simulate(self.workload, self.settings, probes)
        return [
            PoolPoint(int(t), int(row[0]), int(row[1]), int(row[2]), int(row[3]))
            for t, row in zip(probes_ns, raw.series, strict=True)
        ]

    # -- throughput -------------------------------------------------------------------------------

    def _active(self, t0_ns: int, t1_ns: int) -> list[int]:
        """The requests resident at some moment of ``[t0_ns, t1_ns]``: the only ones whose
        figures change in it (a request produces nothing before its first admission or after
        its last residency ends)."""
        starts, ends = self._spans
        return np.flatnonzero((starts >= 0) & (starts <= t1_ns) & (ends >= t0_ns)).tolist()

    def _first_and_last(self) -> tuple[np.ndarray, np.ndarray]:
        """Per request: its first admission and the end of its last residency (far in the
        future while one is open; -1 for a request never admitted)."""
        never, open_ = -1, 2**62
        starts = [stays[0].start_ns if stays else never for stays in self.residencies]
        ends = [
            (open_ if any(s.end_ns < 0 for s in stays) else max(s.end_ns for s in stays))
            if stays
            else never
            for stays in self.residencies
        ]
        return np.asarray(starts, np.int64), np.asarray(ends, np.int64)

    def generated_between(self, t0_ns: int, t1_ns: int) -> int:
        """Output tokens produced in ``(t0_ns, t1_ns]`` (recomputed ones are not produced again)."""
        return sum(
            self.produced(i, t1_ns) - self.produced(i, t0_ns) for i in self._active(t0_ns, t1_ns)
        )

    def prefilled_between(self, t0_ns: int, t1_ns: int) -> int:
        """Prompt tokens (recomputations included) whose prefill ended in ``(t0_ns, t1_ns]``."""
        total = 0
        for i in self._active(t0_ns, t1_ns):
            for stay in self.residencies[i]:
                if t0_ns < stay.first_ns <= t1_ns:
                    total += self.specs[i].prompt + stay.g0
        return total
