"""What a replay is asked: the admission settings, and what each means to the simulated engine.

The simulated engine, precisely (both simulators implement exactly this):

* A request arrives, joins the tail of the waiting queue, and is admitted first come, first
  served: the head is admitted while the running count is below ``max_num_seqs``, its blocks fit
  the free pool, and (with ``max_num_batched_tokens``) its prefill chunk fits the prefill budget;
  a head that does not fit blocks the queue, as in vLLM's V1 scheduler.
* ``reserve``: admission holds ``ceil((prompt + max_tokens) / block_size)`` blocks until finish.
* ``on-demand``: admission holds the blocks of the tokens to prefill (the prompt; after a
  preemption, prompt plus the tokens already produced). After its prefill a request produces one
  output token every ``decode_ns_per_token``; each produced token except the last is stored,
  taking a new block whenever it starts one. When a token finds no free block the newest running
  request is preempted (all its blocks freed, its output so far kept, back to the head of the
  queue to be recomputed), repeatedly until the tokens fit: vLLM V1's recompute preemption. A
  recompute prefill takes the request's prefill time scaled by (prompt + produced) / prompt.
* A request finishes when it produces its last token and frees everything at once.
* A request that could never fit the pool alone is rejected on arrival; with ``max_waiting`` an
  arrival that finds the queue full after the admission pass is rejected.
* At one instant: finishes first, then the tokens produced at that instant (and any pool
  exhaustion), then prefill ends, then arrivals in arrival order; an admission pass follows each.
  With ``max_num_batched_tokens`` each prefill holds ``min(tokens to prefill, budget)`` tokens
  of the budget from admission to the end of its prefill (chunked prefill, simplified: decode
  tokens do not count against the budget).

The pool's *level* is the number of blocks held. The *peak* is the highest level, read just
before each release and, at an exhaustion, the whole pool. *Overflow* means the pool ran dry:
under ``on-demand`` every overflow preempts; under ``reserve`` it cannot happen.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal

from oomtrace.errors import UsageError

Policy = Literal["on-demand", "reserve"]
POLICIES: Final[tuple[Policy, ...]] = ("on-demand", "reserve")


@dataclass(frozen=True)
class ReplaySettings:
    """The admission settings one replay runs under."""

    kv_blocks: int
    block_size: int = 16
    policy: Policy = "on-demand"
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    max_waiting: int | None = None
    kv_bytes_per_token: int | None = None

    def __post_init__(self) -> None:
        checks = {
            "--kv-blocks": (self.kv_blocks, 1),
            "--block-size": (self.block_size, 1),
            "--max-num-seqs": (self.max_num_seqs, 1),
            "--max-num-batched-tokens": (self.max_num_batched_tokens, 1),
            "--max-waiting": (self.max_waiting, 0),
            "--kv-bytes-per-token": (self.kv_bytes_per_token, 1),
        }
        for name, (value, least) in checks.items():
            if value is not None and value < least:
                raise UsageError(f"{name} {value} is below {least}; give {least} or more")
        if self.policy not in POLICIES:
            raise UsageError(f"--policy {self.policy!r}: choose one of {', '.join(POLICIES)}")

    @property
    def block_bytes(self) -> int | None:
        if self.kv_bytes_per_token is None:
            return None
        return self.kv_bytes_per_token * self.block_size

    def to_json(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "kv_blocks": self.kv_blocks,
            "block_size": self.block_size,
            "max_num_seqs": self.max_num_seqs,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "max_waiting": self.max_waiting,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "kv_pool_bytes": None
            if self.block_bytes is None
            else self.block_bytes * self.kv_blocks,
        }


def blocks_from_budget(
    *,
    device_bytes: int,
    weights_bytes: int,
    reserve_bytes: int,
    kv_bytes_per_token: int,
    block_size: int,
) -> int:
    """KV blocks that fit what is left of the device after weights and the runtime reserve."""
    left = device_bytes - weights_bytes - reserve_bytes
    block_bytes = kv_bytes_per_token * block_size
    if left < block_bytes:
        raise UsageError(
            f"--device-memory leaves {left:,} B after --weights and --reserve, less than one KV "
            f"block ({block_bytes:,} B); give more device memory or less weights/reserve"
        )
    return left // block_bytes
