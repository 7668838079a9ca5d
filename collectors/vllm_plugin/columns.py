"""The vLLM plugin's records read back, column-wise (standard library only).

:func:`collectors.segments.read_capture` hands every ``vllm_*`` record here; the analyzer's
ingest turns each group into a frame in one call (``pl.DataFrame(group.as_dict())``). Rows carry
the writing ``stream`` (one engine-core or API-server process: step numbers and engine ids are
unique within it) and the segment's node. A request's blocks are rows of ``blocks``: one per
change a step reported, and one per request in every snapshot (``snapshot`` true), so the state
at any step is the latest row per request at or before it, where ``lifecycle`` has not released
it since. A step's block row holds the request's stored (computed) tokens; a snapshot row its
computed tokens, its tokens so far and its prompt. Times are integer ns since the epoch, UTC.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from collectors.vllm_plugin import records


class _Columns:
    """Parallel lists, one per dataclass field."""

    def as_dict(self) -> dict[str, list[Any]]:
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]

    def __len__(self) -> int:
        return len(getattr(self, fields(self)[0].name))  # type: ignore[arg-type]

    def _append(self, **values: Any) -> None:
        for name, value in values.items():
            getattr(self, name).append(value)


@dataclass
class _Keyed(_Columns):
    """Every group's first columns: when, on which node, from which process's stream."""

    ts_ns: list[int] = field(default_factory=list)
    node: list[str] = field(default_factory=list)
    stream: list[str] = field(default_factory=list)


@dataclass
class StepColumns(_Keyed):
    step: list[int] = field(default_factory=list)
    running: list[int] = field(default_factory=list)
    waiting: list[int] = field(default_factory=list)
    free_blocks: list[int | None] = field(default_factory=list)
    usage: list[float | None] = field(default_factory=list)
    scheduled_tokens: list[int] = field(default_factory=list)
    scheduled_requests: list[int] = field(default_factory=list)


@dataclass
class LifecycleColumns(_Keyed):
    """One row per request event a step reported: ``new``, ``resumed``, ``preempted`` (with the
    blocks and tokens it held just before), ``finished``, ``idle`` (running, not scheduled).
    ``tokens`` is the step's scheduled tokens for the others, where not one."""

    step: list[int] = field(default_factory=list)
    engine_id: list[str] = field(default_factory=list)
    event: list[str] = field(default_factory=list)
    blocks: list[int | None] = field(default_factory=list)
    tokens: list[int | None] = field(default_factory=list)


@dataclass
class BlockColumns(_Keyed):
    step: list[int] = field(default_factory=list)
    engine_id: list[str] = field(default_factory=list)
    blocks: list[int] = field(default_factory=list)
    computed_tokens: list[int | None] = field(default_factory=list)
    tokens: list[int | None] = field(default_factory=list)
    prompt_tokens: list[int | None] = field(default_factory=list)
    snapshot: list[bool] = field(default_factory=list)


@dataclass
class SnapshotColumns(_Keyed):
    step: list[int] = field(default_factory=list)
    running: list[int] = field(default_factory=list)
    waiting: list[int] = field(default_factory=list)
    free_blocks: list[int | None] = field(default_factory=list)


@dataclass
class RequestColumns(_Keyed):
    """Admissions (``vllm_req``) and releases (``vllm_fin``) of the engine core, one row each."""

    engine_id: list[str] = field(default_factory=list)
    api_id: list[str] = field(default_factory=list)
    prompt_tokens: list[int | None] = field(default_factory=list)
    max_tokens: list[int | None] = field(default_factory=list)
    arrival_ns: list[int | None] = field(default_factory=list)
    output_tokens: list[int | None] = field(default_factory=list)
    preemptions: list[int | None] = field(default_factory=list)
    blocks: list[int | None] = field(default_factory=list)
    finish_reason: list[str | None] = field(default_factory=list)


@dataclass
class DoneColumns(_Keyed):
    """The API server's figures of finished requests (``vllm_done``)."""

    api_id: list[str] = field(default_factory=list)
    finish_reason: list[str | None] = field(default_factory=list)
    prompt_tokens: list[int | None] = field(default_factory=list)
    generated_tokens: list[int | None] = field(default_factory=list)
    preemptions: list[int | None] = field(default_factory=list)
    max_tokens: list[int | None] = field(default_factory=list)
    queue_ns: list[int | None] = field(default_factory=list)
    prefill_ns: list[int | None] = field(default_factory=list)
    decode_ns: list[int | None] = field(default_factory=list)
    e2e_ns: list[int | None] = field(default_factory=list)


@dataclass
class VllmRecords:
    """Everything the vLLM plugin wrote in one capture. ``engines`` maps each engine-core stream
    to its latest ``info`` data (settings the engine ran with, pool, hooks); ``cost`` each
    stream to its latest ``vllm_cost`` record."""

    steps: StepColumns = field(default_factory=StepColumns)
    lifecycle: LifecycleColumns = field(default_factory=LifecycleColumns)
    blocks: BlockColumns = field(default_factory=BlockColumns)
    snapshots: SnapshotColumns = field(default_factory=SnapshotColumns)
    admitted: RequestColumns = field(default_factory=RequestColumns)
    released: RequestColumns = field(default_factory=RequestColumns)
    done: DoneColumns = field(default_factory=DoneColumns)
    engines: dict[str, dict[str, Any]] = field(default_factory=dict)
    cost: dict[str, dict[str, Any]] = field(default_factory=dict)
    # (stream, ts) of snapshots already read: the sticky one repeats at each segment's start
    _seen_snapshots: set[tuple[str, int]] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(len(self.steps) or len(self.admitted) or len(self.done))

    def add(self, node: str, stream: str, rec: Mapping[str, Any]) -> None:
        """One record of a ``vllm_*`` kind (``KeyError``/``TypeError`` when a field is bad)."""
        kind = rec["k"]
        ts = int(rec["ts"])
        if kind == records.STEP:
            self._step(node, stream, ts, rec)
        elif kind == records.SNAPSHOT:
            self._snapshot(node, stream, ts, rec)
        elif kind == records.REQUEST:
            self.admitted._append(
                ts_ns=ts, node=node, stream=stream, engine_id=str(rec["id"]),
                api_id=str(rec["api"]), prompt_tokens=rec.get("pt"), max_tokens=rec.get("mt"),
                arrival_ns=rec.get("arr"), output_tokens=None, preemptions=None, blocks=None,
                finish_reason=None,
            )  # fmt: skip
        elif kind == records.FINISHED:
            self.released._append(
                ts_ns=ts, node=node, stream=stream, engine_id=str(rec["id"]),
                api_id=str(rec["api"]), prompt_tokens=rec.get("pt"), max_tokens=None,
                arrival_ns=None, output_tokens=rec.get("ot"), preemptions=rec.get("pre"),
                blocks=rec.get("blk"), finish_reason=rec.get("why"),
            )  # fmt: skip
        elif kind == records.DONE:
            self.done._append(
                ts_ns=ts, node=node, stream=stream, api_id=str(rec["api"]),
                finish_reason=rec.get("why"), prompt_tokens=rec.get("pt"),
                generated_tokens=rec.get("gt"), preemptions=rec.get("pre"),
                max_tokens=rec.get("mt"), queue_ns=rec.get("queue_ns"),
                prefill_ns=rec.get("prefill_ns"), decode_ns=rec.get("decode_ns"),
                e2e_ns=rec.get("e2e_ns"),
            )  # fmt: skip
        elif kind == records.COST:
            self.cost[stream] = dict(rec)

    def _step(self, node: str, stream: str, ts: int, rec: Mapping[str, Any]) -> None:
        step = int(rec["n"])
        chunks: Mapping[str, int] = rec.get("sch", {})
        self.steps._append(
            ts_ns=ts, node=node, stream=stream, step=step, running=int(rec["run"]),
            waiting=int(rec["wait"]), free_blocks=rec.get("free"), usage=rec.get("use"),
            scheduled_tokens=int(rec["tok"]),
            scheduled_requests=int(rec.get("one", 0)) + len(chunks),
        )  # fmt: skip
        life = self.lifecycle
        for event, key in (("finished", "fin"), ("new", "new"), ("resumed", "res")):
            for rid in rec.get(key, ()):
                life._append(
                    ts_ns=ts, node=node, stream=stream, step=step, engine_id=str(rid),
                    event=event, blocks=None, tokens=chunks.get(rid),
                )  # fmt: skip
        for rid, (held, tokens) in rec.get("pre", {}).items():
            life._append(
                ts_ns=ts, node=node, stream=stream, step=step, engine_id=str(rid),
                event="preempted", blocks=int(held), tokens=int(tokens) if tokens >= 0 else None,
            )  # fmt: skip
        for rid in rec.get("idle", ()):
            life._append(
                ts_ns=ts, node=node, stream=stream, step=step, engine_id=str(rid),
                event="idle", blocks=None, tokens=None,
            )  # fmt: skip
        for rid, (held, stored) in rec.get("blk", {}).items():
            self.blocks._append(
                ts_ns=ts, node=node, stream=stream, step=step, engine_id=str(rid),
                blocks=int(held), computed_tokens=int(stored) if stored >= 0 else None,
                tokens=None, prompt_tokens=None, snapshot=False,
            )  # fmt: skip

    def _snapshot(self, node: str, stream: str, ts: int, rec: Mapping[str, Any]) -> None:
        if (stream, ts) in self._seen_snapshots:
            return
        self._seen_snapshots.add((stream, ts))
        step = int(rec["n"])
        self.snapshots._append(
            ts_ns=ts, node=node, stream=stream, step=step, running=int(rec["run"]),
            waiting=int(rec["wait"]), free_blocks=rec.get("free"),
        )  # fmt: skip
        for rid, held, computed, tokens, prompt in rec["req"]:
            self.blocks._append(
                ts_ns=ts, node=node, stream=stream, step=step, engine_id=str(rid),
                blocks=int(held), computed_tokens=int(computed), tokens=int(tokens),
                prompt_tokens=int(prompt), snapshot=True,
            )  # fmt: skip
