"""The engine-side recorder: cheap captures on the scheduler's thread, records on its own.

The scheduler thread only copies what a step changed into a tuple and appends it to a bounded
in-memory queue (:meth:`EngineRecorder.on_schedule`); it never encodes, never waits on a lock
held by I/O and never touches the disk. When the queue is full the step is dropped and counted,
the count goes into the capture as a ``drop`` record, and the next step carries a full snapshot
so that the requests' blocks are exact again. A thread of the recorder drains the queue every
``drain_interval_s`` (100 ms), turns captures into records (steps carry only the blocks that
changed), appends them to a :class:`collectors.writer.SegmentWriter` and has it write them out
(a killed engine core loses at most that interval); the writer rotates crash-safe segments and
drops (and counts) rather than block when the disk is slow or full.

Whatever goes wrong inside the recorder is logged once and never reaches vLLM: the engine keeps
serving without its recorder rather than stop.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from collectors.format import Record
from collectors.vllm_plugin import capture, records
from collectors.vllm_plugin.capture import Admission, Release, StepCapture
from collectors.vllm_plugin.records import LOGGER_NAME
from collectors.vllm_plugin.settings import PluginSettings

# a child of vLLM's logger: lines appear in the server's log, in its format and level
logger = logging.getLogger(LOGGER_NAME)

Item = StepCapture | Admission | Release


class EngineRecorder:
    """One per engine-core process."""

    def __init__(
        self,
        settings: PluginSettings,
        *,
        clock_ns: Callable[[], int] = time.time_ns,
        info: dict[str, Any] | None = None,
    ) -> None:
        self.settings = settings
        self.pid = os.getpid()
        self._clock_ns = clock_ns
        self.missing = capture.Missing()
        self.writer = settings.writer_for(f"vllm-{self.pid}", clock_ns=clock_ns)
        self._info: dict[str, Any] = {
            "plugin": records.PLUGIN_NAME,
            "record_version": records.RECORD_VERSION,
            "pid": self.pid,
            "snapshot_interval_s": settings.snapshot_interval_s,
            "queue_max": settings.queue_max,
            **(info or {}),
        }
        self._queue: deque[Item] = deque()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.broken = False
        # scheduler-thread state
        self._step = 0
        self._blocks_of: Callable[[str], int] | None = None
        self._blocks_owner: object = None
        self._last_snapshot = self._last_preempt_snapshot = 0
        self._snapshot_due = True
        self._last_step_start = 0
        self._last_running = 0
        self.dropped = self.errors = 0
        self.hook_ns = self.step_ns = self.drain_ns = 0
        self.steps = 0
        # recorder-thread state: the blocks each resident request held at its last record
        self._blocks: dict[str, int] = {}
        self._api: dict[str, str] = {}
        self._drops_reported = 0
        self._last_cost = 0

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> EngineRecorder:
        """Open the first segment and start the recorder thread (``OSError`` when the
        directory cannot be created or written)."""
        self.writer.start()
        self.writer.set_sticky("info", self._info_record())
        self._thread = threading.Thread(target=self._run, name="oomtrace-vllm", daemon=True)
        self._thread.start()
        return self

    def close(self, why: str = "stop") -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self.broken = True  # later hook calls record nothing
        if self._thread is not None:
            self._thread.join(5.0)
        self._drain()
        self._write_cost()
        self.writer.close(why)

    def flush(self) -> None:
        """Write every capture queued so far, now (the recorder thread does this on its own)."""
        self._drain()
        self.writer.flush()

    def abandon_after_fork(self) -> None:
        self.broken = True
        self.writer.abandon_after_fork()

    def _info_record(self) -> Record:
        return {
            "k": "info",
            "ts": self._clock_ns(),
            "src": records.ENGINE_SOURCE,
            "data": dict(self._info),
        }

    def describe(self, **data: Any) -> None:
        """Add to the sticky ``info`` record (engine settings, hooks found)."""
        self._info.update(data)
        self.writer.set_sticky("info", self._info_record())

    def _fail(self, where: str, err: BaseException) -> None:
        self.errors += 1
        self.missing(
            f"cannot read {where} from this vLLM ({type(err).__name__}: {err})",
            "recording without it",
        )

    def _push(self, item: Item) -> None:
        if self.broken:
            return
        if len(self._queue) >= self.settings.queue_max:
            self.dropped += 1
            self._snapshot_due = True  # the mirror of blocks is stale: resynchronise
            return
        self._queue.append(item)

    # -- scheduler thread -------------------------------------------------------------------

    def on_schedule(self, scheduler: Any, output: Any) -> None:
        """After ``Scheduler.schedule`` returned ``output``. Never raises."""
        start = time.perf_counter_ns()
        try:
            if self._last_step_start and self._last_running:
                self.step_ns += start - self._last_step_start
            self._last_step_start = start
            self._step += 1
            item = self._capture_step(scheduler, output)
            self._last_running = item.running
            self.steps += 1
            self._push(item)
        except Exception as err:  # noqa: BLE001 - vLLM must never see the recorder fail
            self._fail("a scheduler step", err)
        self.hook_ns += time.perf_counter_ns() - start

    def _blocks_counter(self, scheduler: Any) -> Callable[[str], int] | None:
        if self._blocks_owner is not scheduler:
            self._blocks_owner = scheduler
            try:
                self._blocks_of = capture.block_counter(scheduler)
            except AttributeError as err:
                self._blocks_of = None
                self.missing(
                    f"no per-request block table in this vLLM's KV cache manager ({err})",
                    "per-request blocks are not recorded",
                )
        return self._blocks_of

    def _capture_step(self, scheduler: Any, output: Any) -> StepCapture:
        ts = self._clock_ns()
        tokens = output.num_scheduled_tokens
        total = int(output.total_num_scheduled_tokens)
        # a pure decode step schedules one token per request: then the map need not be copied
        scheduled = dict(tokens) if total != len(tokens) else None
        new = [req.req_id for req in output.scheduled_new_reqs]
        cached = output.scheduled_cached_reqs
        blocks_of = self._blocks_counter(scheduler)
        requests = getattr(scheduler, "requests", None) or {}
        blocks = (
            {
                rid: (blocks_of(rid), capture.stored_tokens(requests, rid))
                for rid in capture.grown_ids(new, cached, tokens)
            }
            if blocks_of is not None
            else {}
        )
        running, waiting = capture.request_counts(scheduler)
        try:
            free, usage = capture.pool_state(scheduler)
        except AttributeError as err:
            free = usage = None
            self.missing(f"no KV block pool figures ({err})", "pool usage is not recorded")
        preempted = {
            rid: capture.held_tokens(requests, rid)
            for rid in getattr(output, "preempted_req_ids", None) or ()
        }
        idle = capture.idle_ids(scheduler.running, tokens) if len(tokens) < running else []
        snapshot = None
        if (
            self._snapshot_due
            or ts - self._last_snapshot >= self.settings.snapshot_interval_s * 1e9
            or (
                preempted
                and ts - self._last_preempt_snapshot
                >= self.settings.preempt_snapshot_interval_s * 1e9
            )
        ):
            snapshot = capture.snapshot_rows(scheduler.running, blocks_of)
            self._last_snapshot = ts
            self._last_preempt_snapshot = ts if preempted else self._last_preempt_snapshot
            self._snapshot_due = False
        return StepCapture(
            ts,
            self._step,
            running,
            waiting,
            free,
            usage,
            total,
            len(tokens),
            scheduled,
            blocks,
            new,
            capture.resumed_ids(cached),
            preempted,
            list(output.finished_req_ids),
            idle,
            snapshot,
        )

    def on_admit(self, request: Any, api_id: str) -> None:
        """A request entered the scheduler (``Scheduler.add_request``). Never raises."""
        start = time.perf_counter_ns()
        try:
            self._push(capture.admission_of(request, self._clock_ns(), api_id))
        except Exception as err:  # noqa: BLE001
            self._fail("an admitted request", err)
        self.hook_ns += time.perf_counter_ns() - start

    def on_release(self, scheduler: Any, request: Any) -> None:
        """A finished request is about to be freed (``Scheduler._free_request``). Never
        raises."""
        start = time.perf_counter_ns()
        try:
            blocks_of = self._blocks_counter(scheduler)
            self._push(capture.release_of(request, self._clock_ns(), blocks_of))
        except Exception as err:  # noqa: BLE001
            self._fail("a finished request", err)
        self.hook_ns += time.perf_counter_ns() - start

    # -- recorder thread --------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.wait(self.settings.drain_interval_s):
            self._drain()
            # write(2) now rather than at the writer's next flush: vLLM stops an engine core
            # with SIGKILL moments after SIGTERM, and what is only buffered is lost
            self.writer.flush()
            if self._clock_ns() - self._last_cost >= self.settings.cost_interval_s * 1e9:
                self._write_cost()

    def _drain(self) -> None:
        start = time.thread_time_ns()
        try:
            while self._queue:
                item = self._queue.popleft()
                if isinstance(item, StepCapture):
                    self._write_step(item)
                elif isinstance(item, Admission):
                    self._write_admission(item)
                else:
                    self._write_release(item)
            if self.dropped > self._drops_reported:
                self.writer.append(
                    {
                        "k": "drop",
                        "ts": self._clock_ns(),
                        "src": records.ENGINE_SOURCE,
                        "n": self.dropped - self._drops_reported,
                        "why": "the plugin's step queue was full",
                    }
                )
                self._drops_reported = self.dropped
        except Exception as err:  # noqa: BLE001 - a recorder bug must not kill the thread
            self._fail("a capture while writing it", err)
        self.drain_ns += time.thread_time_ns() - start

    @staticmethod
    def _head(kind: str, step: StepCapture) -> Record:
        """What a step and a snapshot record both state about the step."""
        rec: Record = {
            "k": kind,
            "ts": step.ts,
            "src": records.ENGINE_SOURCE,
            "n": step.step,
            "run": step.running,
            "wait": step.waiting,
        }
        if step.free_blocks is not None:
            rec["free"] = step.free_blocks
        return rec

    def _write_step(self, step: StepCapture) -> None:
        rec = self._head(records.STEP, step)
        rec["tok"] = step.total_tokens
        if step.usage is not None:
            rec["use"] = round(step.usage, 6)
        chunks = {rid: n for rid, n in (step.scheduled or {}).items() if n != 1}
        rec["one"] = step.num_scheduled - len(chunks)
        mirror = self._blocks
        if chunks:
            rec["sch"] = chunks
        for key, ids in (("new", step.new), ("res", step.resumed), ("idle", step.idle)):
            if ids:
                rec[key] = ids
        if step.preempted:
            # [blocks it held, tokens it held]: vLLM has freed both by the time it reports
            rec["pre"] = {rid: [mirror.pop(rid, 0), n] for rid, n in step.preempted.items()}
        if step.finished:
            rec["fin"] = step.finished
            for rid in step.finished:
                mirror.pop(rid, None)
        changed = {
            rid: [n, stored] for rid, (n, stored) in step.blocks.items() if mirror.get(rid) != n
        }
        if changed:
            mirror.update((rid, pair[0]) for rid, pair in changed.items())
            # [blocks, stored tokens]: a new block's worth of tokens reached
            rec["blk"] = changed
        self.writer.append(rec)
        if step.snapshot is not None:
            self._write_snapshot(step)

    def _write_snapshot(self, step: StepCapture) -> None:
        rows = step.snapshot or []
        self._blocks = {row[0]: row[1] for row in rows}
        snap = self._head(records.SNAPSHOT, step)
        # [engine id, blocks, computed tokens, tokens (prompt + output), prompt tokens]
        snap["req"] = [list(row) for row in rows]
        # sticky: a new segment starts with the latest snapshot, so it can be read alone
        self.writer.set_sticky("snapshot", snap)

    def _write_admission(self, adm: Admission) -> None:
        self._api[adm.engine_id] = adm.api_id
        rec: Record = {
            "k": records.REQUEST,
            "ts": adm.ts,
            "src": records.ENGINE_SOURCE,
            "id": adm.engine_id,
            "api": adm.api_id,
            "pt": adm.prompt_tokens,
        }
        if adm.max_tokens is not None:
            rec["mt"] = adm.max_tokens
        if adm.arrival_ns is not None:
            rec["arr"] = adm.arrival_ns
        self.writer.append(rec)

    def _write_release(self, rel: Release) -> None:
        rec: Record = {
            "k": records.FINISHED,
            "ts": rel.ts,
            "src": records.ENGINE_SOURCE,
            "id": rel.engine_id,
            "api": self._api.pop(rel.engine_id, None) or capture.api_id_from_suffix(rel.engine_id),
            "blk": rel.blocks,
        }
        for key, value in (
            ("why", rel.reason),
            ("pt", rel.prompt_tokens),
            ("ot", rel.output_tokens),
            ("pre", rel.preemptions),
        ):
            if value is not None:
                rec[key] = value
        self._blocks.pop(rel.engine_id, None)
        self.writer.append(rec)

    def _write_cost(self) -> None:
        self._last_cost = self._clock_ns()
        self.writer.append(
            {
                "k": records.COST,
                "ts": self._last_cost,
                "src": records.ENGINE_SOURCE,
                "steps": self.steps,
                "step_ns": self.step_ns,
                "hook_ns": self.hook_ns,
                "thread_cpu_ns": self.drain_ns,
                "dropped": self.dropped,
                "errors": self.errors,
            }
        )
