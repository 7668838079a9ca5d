"""SGLang log ingest speed: oomtrace's vectorised parser against a straightforward per-line Python
regex parser that extracts the same batch-line fields, in the same run, each in its own process
(so that peak RSS is its own). Reports MB/s, the ratio, and peak memory.

    python benchmarks/sglang_ingest.py --mb 200
"""

from __future__ import annotations

import argparse
import random
import re
import resource
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

# The baseline does what the parser does, line by line: SGLang's prefix (with any outer prefix),
# its time, the rank tag, the message kind, and the same batch-line fields.
PREFIX = re.compile(
    r"^(.*?)\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?:\.(\d{3}))?((?: [A-Z][A-Z_]*\d+)*)\] ?(.*)$"
)
FIELDS = {
    "running": re.compile(r"#running-req: (\d+)"),
    "queued": re.compile(r"#queue-req: (\d+)"),
    "usage": re.compile(r"(?:^|, )token usage: ([0-9.]+)"),
    "full_usage": re.compile(r"full token usage: ([0-9.]+)"),
    "swa_usage": re.compile(r"swa token usage: ([0-9.]+)"),
    "tokens": re.compile(r", #token: (\d+)"),
    "full_tokens": re.compile(r"#full token: (\d+)"),
    "gen": re.compile(r"gen throughput \(token/s\): ([0-9.]+)"),
    "input": re.compile(r"input throughput \(token/s\): ([0-9.]+)"),
    "hit_rate": re.compile(r"cache hit rate: ([0-9.]+)%"),
}


def generate(path: Path, megabytes: int) -> None:
    rng = random.Random(7)
    t = datetime(2025, 3, 14, 2, 0, 0)
    target = megabytes * 1_000_000
    written = 0
    with path.open("w") as out:
        while written < target:
            t += timedelta(seconds=1)
            stamp = t.strftime("%Y-%m-%d %H:%M:%S")
            lines = [
                (
                    f"[{stamp} TP0] Decode batch, #running-req: {rng.randint(1, 500)}, #token: "
                    f"{rng.randint(1000, 400000)}, token usage: {rng.random():.2f}, "
                    "cuda graph: True, "
                    f"gen throughput (token/s): {rng.uniform(100, 9000):.2f}, #queue-req: "
                    f"{rng.randint(0, 50)}\n"
                ),
                (
                    f'[{stamp}] INFO:     127.0.0.1:{rng.randint(1000, 65000)} - "POST '
                    '/v1/chat/completions HTTP/1.1" 200 OK\n'
                ),
                (
                    f"[{stamp} TP0] Prefill batch, #new-seq: 1, "
                    f"#new-token: {rng.randint(1, 8000)}, "
                    f"#cached-token: 0, token usage: {rng.random():.2f}, #running-req: "
                    f"{rng.randint(1, 500)}, #queue-req: {rng.randint(0, 50)}, cuda graph: False, "
                    f"input throughput (token/s): {rng.uniform(100, 9000):.2f}\n"
                ),
            ]
            block = "".join(lines)
            out.write(block)
            written += len(block)


def run_oomtrace(path: Path) -> int:
    from oomtrace.diagnostics import SourceDiagnostics
    from oomtrace.ingest.parser_api import ParseContext
    from oomtrace.ingest.sglang.log_parser import PARSER
    from oomtrace.ingest.text.input_file import InputFile

    result = PARSER.parse(
        InputFile(path, path.name), ParseContext(), SourceDiagnostics("b", "s", "n")
    )
    return 0 if result.samples is None else result.samples.height


def run_baseline(path: Path) -> int:
    rows = 0
    with path.open(encoding="utf-8", errors="replace") as lines:
        for line in lines:
            match = PREFIX.match(line.rstrip("\n"))
            if match is None:
                continue
            message = match.group(5)
            if not message.startswith(("Prefill batch", "Decode batch")):
                continue
            datetime.strptime(match.group(2), "%Y-%m-%d %H:%M:%S")
            for pattern in FIELDS.values():
                found = pattern.search(message)
                if found is not None:
                    float(found.group(1))
                    rows += 1
    return rows


def child(which: str, path: Path) -> None:
    start, cpu_start = time.perf_counter(), time.process_time()
    rows = run_oomtrace(path) if which == "oomtrace" else run_baseline(path)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{seconds:.3f} {cpu:.3f} {peak_mib:.0f} {rows}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=200, help="size of the generated log (MB)")
    parser.add_argument("--child", choices=["oomtrace", "baseline"])
    parser.add_argument("--path", type=Path)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.path)
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sglang.log"
        generate(path, args.mb)
        size_mb = path.stat().st_size / 1e6
        results = {}
        for which in ("oomtrace", "baseline"):
            out = subprocess.run(
                [sys.executable, __file__, "--child", which, "--path", str(path)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.split()
            results[which] = (float(out[0]), float(out[1]), float(out[2]), int(out[3]))
        for which, (seconds, cpu, peak, rows) in results.items():
            print(
                f"{which:9} {size_mb / seconds:7.1f} MB/s wall  {size_mb / cpu:7.1f} MB/s per CPU "
                f"second  peak RSS {peak:5.0f} MiB  values {rows:,}"
            )
        wall = results["baseline"][0] / results["oomtrace"][0]
        cpu = results["baseline"][1] / results["oomtrace"][1]
        print(
            f"log {size_mb:.0f} MB; oomtrace is {wall:.1f}x the per-line regex baseline in wall "
            f"time, {cpu:.1f}x in CPU time"
        )


if __name__ == "__main__":
    main()
