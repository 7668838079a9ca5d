"""A miniature of vLLM 0.32.0's v1 scheduler, with the same names the vLLM plugin reads.

Not a stub that returns canned steps: requests really queue, prefill in chunks under a token
budget, take blocks from a finite pool as they grow, are preempted last-in-first-out when the
pool runs dry (their blocks freed, their computed tokens reset, as ``Scheduler._preempt_request``
does), resume, and finish at ``max_tokens`` through ``_free_request``. The unit tests drive the
plugin's hooks with it, and ``benchmarks/vllm_plugin_overhead.py`` uses it as the synthetic
scheduler loop. Field names follow ``vllm/v1/core/sched/output.py``, ``scheduler.py``,
``kv_cache_manager.py``, ``single_type_kv_cache_manager.py`` and ``vllm/v1/request.py``.
"""

from __future__ import annotations

import enum
import math
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class RequestStatus(enum.Enum):
    WAITING = 1
    RUNNING = 2
    PREEMPTED = 3
    FINISHED_LENGTH_CAPPED = 4


class FinishReason(enum.IntEnum):
    STOP = 0
    LENGTH = 1

    def __str__(self) -> str:
        return self.name.lower()


@dataclass
class EngineCoreRequest:
    request_id: str
    prompt_token_ids: list[int]
    max_tokens: int
    external_req_id: str | None = None


class Request:
    def __init__(self, request_id: str, prompt_token_ids: list[int], max_tokens: int) -> None:
        self.request_id = request_id
        self.prompt_token_ids = prompt_token_ids
        self.num_prompt_tokens = len(prompt_token_ids)
        self.max_tokens = max_tokens
        self.arrival_time = time.time()
        self.num_computed_tokens = 0
        self.num_preemptions = 0
        self.status = RequestStatus.WAITING
        self._output_token_ids: list[int] = []

    @classmethod
    def from_engine_core_request(cls, request: EngineCoreRequest, block_hasher: Any) -> Request:
        return cls(request.request_id, request.prompt_token_ids, request.max_tokens)

    @property
    def num_tokens(self) -> int:
        return self.num_prompt_tokens + len(self._output_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self._output_token_ids)

    def get_finished_reason(self) -> FinishReason | None:
        if self.status is RequestStatus.FINISHED_LENGTH_CAPPED:
            return FinishReason.LENGTH
        return None


@dataclass
class NewRequestData:
    req_id: str


@dataclass
class CachedRequestData:
    req_ids: list[str]
    resumed_req_ids: set[str]
    new_block_ids: list[tuple[list[int], ...] | None]


@dataclass
class SchedulerOutput:
    scheduled_new_reqs: list[NewRequestData]
    scheduled_cached_reqs: CachedRequestData
    num_scheduled_tokens: dict[str, int]
    total_num_scheduled_tokens: int
    finished_req_ids: set[str]
    preempted_req_ids: set[str] | None = None


class BlockPool:
    def __init__(self, num_gpu_blocks: int) -> None:
        self.num_gpu_blocks = num_gpu_blocks
        self.free = num_gpu_blocks - 1  # vLLM keeps one null block out of the free queue

    def get_num_free_blocks(self) -> int:
        return self.free

    def get_usage(self) -> float:
        total = self.num_gpu_blocks - 1
        return 1.0 - self.free / total


@dataclass
class FullAttentionManager:
    block_size: int
    req_to_blocks: defaultdict[str, list[int]] = field(default_factory=lambda: defaultdict(list))


class KVCacheManager:
    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.block_pool = BlockPool(num_blocks)
        manager = FullAttentionManager(block_size)
        self.coordinator = type("Coordinator", (), {"single_type_managers": (manager,)})()
        self.manager = manager

    @property
    def usage(self) -> float:
        return self.block_pool.get_usage()

    def allocate(self, request_id: str, num_tokens: int) -> list[int] | None:
        """The blocks added (maybe none), or None when the pool cannot hold ``num_tokens``."""
        held = self.manager.req_to_blocks[request_id]
        need = max(math.ceil(num_tokens / self.manager.block_size) - len(held), 0)
        if need > self.block_pool.free:
            return None
        self.block_pool.free -= need
        added = list(range(len(held), len(held) + need))
        held.extend(added)
        return added

    def free(self, request_id: str) -> None:
        self.block_pool.free += len(self.manager.req_to_blocks.pop(request_id, []))


@dataclass
class KVCacheSpec:
    block_size: int
    page_size_bytes: int


@dataclass
class KVCacheGroupSpec:
    layer_names: list[str]
    kv_cache_spec: KVCacheSpec


@dataclass
class KVCacheConfig:
    num_blocks: int
    kv_cache_groups: list[KVCacheGroupSpec]


def vllm_config(block_size: int, num_blocks: int) -> Any:
    """The parts of ``VllmConfig`` the plugin describes: what the engine runs with."""

    def namespace(**values: Any) -> Any:
        return type("Config", (), values)()

    return namespace(
        model_config=namespace(
            model="tiny-llama", dtype="torch.float32", max_model_len=4096
        ),
        cache_config=namespace(
            cache_dtype="auto", block_size=block_size, num_gpu_blocks=num_blocks,
            enable_prefix_caching=True,
        ),
        scheduler_config=namespace(max_num_seqs=256, max_num_batched_tokens=2048),
    )  # fmt: skip


class Scheduler:
    """FCFS with chunked prefill and recompute preemption, as vLLM's v1 scheduler. Its KV
    cache is a tiny Llama's: 2 layers of blocks of ``block_size`` tokens, 4 bytes x 2 KV heads
    x 32 dims x 2 (K and V) per token and layer."""

    def __init__(
        self,
        *,
        num_blocks: int = 40,
        block_size: int = 16,
        max_num_seqs: int = 256,
        max_num_batched_tokens: int = 2048,
    ) -> None:
        self.kv_cache_manager = KVCacheManager(num_blocks, block_size)
        page = block_size * 2 * 32 * 2 * 4
        self.kv_cache_config = KVCacheConfig(
            num_blocks, [KVCacheGroupSpec(["layers.0", "layers.1"], KVCacheSpec(block_size, page))]
        )
        self.vllm_config = vllm_config(block_size, num_blocks)
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.running: list[Request] = []
        self.waiting: deque[Request] = deque()
        self.requests: dict[str, Request] = {}
        self.finished_req_ids: set[str] = set()
        self._preempted: set[str] = set()

    def add_request(self, request: Request) -> None:
        self.waiting.append(request)
        self.requests[request.request_id] = request

    def get_request_counts(self) -> tuple[int, int]:
        return len(self.running), len(self.waiting)

    def schedule(self) -> SchedulerOutput:
        budget = self.max_num_batched_tokens
        scheduled: dict[str, int] = {}
        added: dict[str, list[int]] = {}
        new: list[NewRequestData] = []
        resumed: set[str] = set()
        preempted: list[Request] = []
        index = 0
        while index < len(self.running) and budget > 0:
            request = self.running[index]
            tokens = min(budget, max(request.num_tokens - request.num_computed_tokens, 1))
            while (
                blocks := self.kv_cache_manager.allocate(
                    request.request_id, request.num_computed_tokens + tokens
                )
            ) is None:
                victim = self.running.pop()
                self._preempt(victim)
                preempted.append(victim)
                if victim is request:
                    break
            else:
                scheduled[request.request_id] = tokens
                added[request.request_id] = blocks
                budget -= tokens
                index += 1
                continue
            break
        while not preempted and self.waiting and budget > 0:
            if len(self.running) >= self.max_num_seqs:
                break
            request = self.waiting[0]
            tokens = min(budget, request.num_tokens - request.num_computed_tokens)
            blocks = self.kv_cache_manager.allocate(request.request_id, tokens)
            if blocks is None:
                break
            added[request.request_id] = blocks
            self.waiting.popleft()
            if request.status is RequestStatus.PREEMPTED:
                resumed.add(request.request_id)
            else:
                new.append(NewRequestData(request.request_id))
            request.status = RequestStatus.RUNNING
            self.running.append(request)
            scheduled[request.request_id] = tokens
            budget -= tokens
        new_ids = {n.req_id for n in new}
        cached = [r for r in scheduled if r not in new_ids]
        output = SchedulerOutput(
            scheduled_new_reqs=new,
            scheduled_cached_reqs=CachedRequestData(
                cached, resumed, [(added[r],) if added[r] else None for r in cached]
            ),
            num_scheduled_tokens=scheduled,
            total_num_scheduled_tokens=sum(scheduled.values()),
            finished_req_ids=self.finished_req_ids,
            preempted_req_ids=self._preempted,
        )
        for request_id, tokens in scheduled.items():
            self.requests[request_id].num_computed_tokens += tokens
        self.finished_req_ids, self._preempted = set(), set()
        return output

    def _preempt(self, request: Request) -> None:
        self.kv_cache_manager.free(request.request_id)
        request.status = RequestStatus.PREEMPTED
        request.num_computed_tokens = 0
        request.num_preemptions += 1
        self.waiting.appendleft(request)
        self._preempted.add(request.request_id)

    def update_from_output(self, output: SchedulerOutput) -> None:
        """One token for every request whose prompt is computed; finish at ``max_tokens``."""
        for request_id in output.num_scheduled_tokens:
            request = self.requests[request_id]
            if request.num_computed_tokens >= request.num_tokens:
                request._output_token_ids.append(7)
                if request.num_output_tokens >= request.max_tokens:
                    request.status = RequestStatus.FINISHED_LENGTH_CAPPED
                    self.running.remove(request)
                    self._free_request(request)

    def _free_request(self, request: Request) -> None:
        self.finished_req_ids.add(request.request_id)
        self.kv_cache_manager.free(request.request_id)
        del self.requests[request.request_id]

    def shutdown(self) -> None:
        """Nothing of its own to release (vLLM's shuts down its connectors)."""

    def step(self) -> SchedulerOutput:
        output = self.schedule()
        self.update_from_output(output)
        return output


def recorded_run(
    directory: Path,
    shapes: list[tuple[int, int]],
    *,
    num_blocks: int = 24,
    block_size: int = 16,
    settings: Any = None,
) -> list[str]:
    """Requests of ``(prompt, output)`` tokens through a scheduler recorded by the vLLM plugin's
    recorder (its hooks' calls, made directly) into ``directory``; the API ids, in order."""
    from collectors.vllm_plugin.hooks import _engine_description
    from collectors.vllm_plugin.recorder import EngineRecorder
    from collectors.vllm_plugin.settings import PluginSettings

    recorder = EngineRecorder(
        settings or PluginSettings(directory=directory, node="node-a", snapshot_interval_s=0.02)
    ).start()

    class Recorded(Scheduler):
        def add_request(self, request: Request) -> None:
            super().add_request(request)
            recorder.on_admit(request, request.request_id.rsplit("-", 1)[0])

        def _free_request(self, request: Request) -> None:
            recorder.on_release(self, request)
            super()._free_request(request)

    scheduler = Recorded(num_blocks=num_blocks, block_size=block_size, max_num_batched_tokens=256)
    recorder.describe(**_engine_description(scheduler))
    api_ids = [f"cmpl-{i:04d}-0" for i in range(len(shapes))]
    for api_id, (prompt, out) in zip(api_ids, shapes, strict=True):
        scheduler.add_request(
            Request(f"{api_id}-{abs(hash(api_id)) % 16**8:08x}", [5] * prompt, out)
        )
        time.sleep(0.001)
    while scheduler.requests:
        output = scheduler.schedule()
        recorder.on_schedule(scheduler, output)
        scheduler.update_from_output(output)
        time.sleep(0.0005)  # steps a real engine's distance apart
        recorder.flush()
    recorder.on_schedule(scheduler, scheduler.schedule())  # the step reporting the last finish
    recorder.close()
    return api_ids
