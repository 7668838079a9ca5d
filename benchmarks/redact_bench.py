"""CPU cost of capture-time redaction on one 8 MiB line, side by side with a peer, in one run.

    python benchmarks/redact_bench.py [--mib 8] [--repeat 3]

The log tail redacts every line before it is buffered, so the cost of one line must stay a small
multiple of what the tail spends on that line anyway: decoding its bytes and encoding the
checksummed ``log`` record that carries it (:func:`collectors.format.encode`), the peer.
Each shape is one line of ``--mib`` MiB in an engine's real request-log layout:

* ``vllm prompt``: vLLM's ``Received request ...: prompt: '<8 MiB>', params: ...``;
* ``vllm token ids``: the same request with its ``prompt_token_ids: [...]`` list;
* ``sglang batch``: ``Receive: obj=GenerateReqInput(text=['...', '...', ...])`` (many strings);
* ``tgi input``: TGI's DEBUG ``Input: <raw text>`` (no quotes);
* ``no prompt``: an 8 MiB line without any prompt key (the fast path).

Reported per shape: CPU seconds of ``redact_line`` (best of ``--repeat``), of the peer, and the
ratio redact / peer.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from functools import partial

from collectors.format import encode
from collectors.redact import redact_line

HEAD = "INFO 03-11 06:18:50 [logger.py:39] "
PARAMS = ", params: SamplingParams(n=1, temperature=0.0, max_tokens=7)"


def shapes(size: int) -> dict[str, str]:
    words = ("the quick brown fox jumps over the lazy dog " * (size // 44 + 1))[:size]
    ids = ", ".join(str(1000 + i % 30000) for i in range(size // 6))
    batch = ", ".join(f"'item {i} {words[:40]}'" for i in range(size // 52))
    return {
        "vllm prompt": f"{HEAD}Received request cmpl-1-0: prompt: {words!r}{PARAMS}.",
        "vllm token ids": f"{HEAD}Received request cmpl-1-0: prompt_token_ids: [{ids}]{PARAMS}.",
        "sglang batch": f"[2025-03-03 17:53:04] Receive: obj=GenerateReqInput(text=[{batch}])",
        "tgi input": (
            "2024-11-03T14:51:27.393883Z DEBUG generate{parameters=GenerateParameters}: "
            f"text_generation_router::server: router/src/server.rs:295: Input: {words}"
        ),
        "no prompt": HEAD + "Avg generation throughput: 1.0 tokens/s " + "x" * size,
    }


def carry(raw: bytes) -> bytes:
    """What the tail does with a line besides redacting it: decode, then encode its record."""
    return encode({"k": "log", "lines": [raw.decode("utf-8", "backslashreplace")]})


def cpu_seconds(work: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        work()
        best = min(best, time.process_time() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"one line of {args.mib} MiB, best of {args.repeat}; CPU seconds")
    print(f"{'shape':<16}{'redact':>10}{'peer':>10}{'ratio':>8}")
    for name, line in shapes(args.mib << 20).items():
        raw = line.encode()
        redact = cpu_seconds(partial(redact_line, line), args.repeat)
        peer = cpu_seconds(partial(carry, raw), args.repeat)
        print(f"{name:<16}{redact:>10.3f}{peer:>10.4f}{redact / peer:>8.1f}")


if __name__ == "__main__":
    main()
