"""Ingest's peak memory on hostile and large inputs, beside a process that only imports it.

    python benchmarks/ingest_memory.py [--bomb 4GiB] [--line 100MiB] [--log 1GB] [--dense 256MiB]

Each input is generated in a temporary directory and ingested by ``python -m oomtrace ingest``
in its own process; the peak resident memory comes from ``wait4`` (the same as ``/usr/bin/time
-v``). The peer is a process that imports ``oomtrace.ingest`` and exits: what every ingest costs
before it reads a byte. Inputs:

* ``bomb``: a gzip of about 27 MB that expands to ``--bomb`` of valid vLLM stats lines;
* ``line``: a vLLM log whose one request line is ``--line`` long;
* ``log``: a realistic vLLM V1 log of ``--log`` (``benchmarks/ingest_bench.py``'s generator:
  request lines, stats, tracebacks), the size of a busy server's day;
* ``dense``: ``--dense`` of nothing but stats lines, the input that gives the most rows per byte
  (eight samples a line): the worst case per byte read.

Reported per input: exit code, wall seconds, peak MiB, peak / peer, and the first line of output
(the refusal or the row counts). ``--max-input-size`` passes through to ingest; an ingest still
running after ``--limit-s`` is killed and its peak so far reported.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path

from oomtrace.units import parse_bytes

STATS = (
    "INFO 03-11 {h:02d}:{m:02d}:{s:02d} [loggers.py:80] Engine 000: Avg prompt throughput: "
    "{p}.5 tokens/s, Avg generation throughput: 0.7 tokens/s, Running: {r} reqs, Waiting: 0 reqs, "
    "GPU KV cache usage: {k}.0%, Prefix cache hit rate: 0.0%\n"
)


def stats_line(n: int) -> str:
    h, rest = divmod(n % 86400, 3600)
    return STATS.format(h=h, m=rest // 60, s=rest % 60, p=n % 97, r=n % 13, k=n % 100)


def write_bomb(path: Path, size: int) -> None:
    """``size`` bytes of stats lines through one gzip stream: a block of lines that fits in
    deflate's 32 KiB window, repeated, which it shrinks about 150 times."""
    block = "".join(stats_line(n) for n in range(24)).encode()
    compress = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    with path.open("wb") as out:
        for _ in range(size // len(block) + 1):
            out.write(compress.compress(block))
        out.write(compress.flush())


def write_line(path: Path, size: int) -> None:
    with path.open("w", encoding="utf-8") as out:
        out.write(stats_line(1))
        out.write(
            "INFO 03-11 00:00:02 [logger.py:39] Received request cmpl-1-0: prompt: '"
            + "x" * size
            + "', params: SamplingParams(max_tokens=7)\n"
        )
        out.write(stats_line(3))


def write_log(path: Path, size: int) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.ingest_bench import generate  # only with --log

    generate(path, size)


def write_dense(path: Path, size: int) -> None:
    with path.open("w", encoding="utf-8") as out:
        written, n = 0, 0
        while written < size:
            line = stats_line(n)
            out.write(line)
            written, n = written + len(line), n + 1


def measured(command: list[str], limit_s: float) -> tuple[int, float, int, str]:
    """Exit code, wall seconds, peak RSS bytes (wait4) and first output line of ``command``,
    which is killed after ``limit_s`` (its peak so far is still reported)."""
    start = time.monotonic()
    with tempfile.TemporaryFile() as output:
        proc = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
        killer = threading.Timer(limit_s, proc.kill)
        killer.start()
        _, status, usage = os.wait4(proc.pid, 0)
        killer.cancel()
        wall = time.monotonic() - start
        output.seek(0)
        text = output.read().decode("utf-8", "replace")
    first = next((line for line in text.splitlines() if line.strip()), "")
    if wall >= limit_s:
        first = f"(killed after {limit_s:.0f} s) {first}"
    return os.waitstatus_to_exitcode(status), wall, usage.ru_maxrss * 1024, first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bomb", default="4GiB")
    parser.add_argument("--line", default="100MiB")
    parser.add_argument("--log", default="1GB", help="0 to skip")
    parser.add_argument("--dense", default="256MiB", help="0 to skip")
    parser.add_argument("--max-input-size", default=None)
    parser.add_argument("--limit-s", type=float, default=600.0, help="kill an ingest after this")
    args = parser.parse_args()
    inputs: list[tuple[str, str, Callable[[Path, int], None], str]] = [
        ("bomb", "vllm.log.gz", write_bomb, args.bomb),
        ("line", "vllm.log", write_line, args.line),
        ("log", "vllm.log", write_log, args.log),
        ("dense", "vllm.log", write_dense, args.dense),
    ]
    extra = ["--max-input-size", args.max_input_size] if args.max_input_size else []
    _, _, peer, _ = measured([sys.executable, "-c", "import oomtrace.ingest"], args.limit_s)
    print(f"peer (import only): {peer / 2**20:.0f} MiB")
    print(
        f"{'input':<8}{'file MiB':>10}{'exit':>6}{'wall s':>8}{'peak MiB':>10}{'/ peer':>8}  output"
    )
    for name, file_name, write, size_text in inputs:
        if size_text == "0":
            continue
        size = parse_bytes(size_text)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / file_name
            write(path, size)
            command = [sys.executable, "-m", "oomtrace", "ingest", str(path), "-o", f"{tmp}/t"]
            code, wall, peak, first = measured([*command, *extra], args.limit_s)
            on_disk = path.stat().st_size / 2**20
            print(
                f"{name:<8}{on_disk:>10.1f}{code:>6}{wall:>8.1f}{peak / 2**20:>10.0f}"
                f"{peak / peer:>8.1f}\n        {first[:110]}"
            )


if __name__ == "__main__":
    main()
