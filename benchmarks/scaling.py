"""How ingest, analyze and report scale with the length of the trace: 1/4, 1/2 and a whole day.

For each fraction of a day, each command runs as its own process (wall from start to exit, CPU
seconds and peak resident memory as the kernel counted them):

* ``oomtrace ingest LOG --out DIR``: a vLLM V1 log of that fraction of 1 GB (the day of
  ``ingest_log.py``'s generator: request lines, stats every 10 s, an OOM traceback);
* ``oomtrace analyze DIR --json``: that fraction of ``analyze_data.py``'s day (two million
  requests, 100 Hz memory samples: 26 million rows);
* ``oomtrace report DIR -o report.html``: the same trace, analysed and rendered.

The last column is the CPU time scaled to a whole day: flat means the cost grows in proportion
to the trace; ``--fractions`` picks the sizes (e.g. ``0.25 0.5`` where a day does not
fit the time at hand).

    python benchmarks/scaling.py                    # the README's table
    python benchmarks/scaling.py --fractions 0.25 0.5
    python benchmarks/scaling.py --commands analyze  # one command's rows
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay_command import measured, oomtrace

HERE = Path(__file__).resolve().parent

DAY_LOG_BYTES = 10**9
DAY_REQUESTS = 2_000_000


def generated(code: str) -> None:
    """Run a generator in its own process: a child forked from a parent that holds the generated
    frames would count the parent's memory as its own peak."""
    subprocess.run([sys.executable, "-c", code], cwd=HERE, check=True, stdout=subprocess.DEVNULL)


COMMANDS = ("ingest", "analyze", "report")


def one_size(
    fraction: float, tmp: Path, commands: tuple[str, ...] = COMMANDS
) -> dict[str, dict[str, Any]]:
    log, ingested = tmp / f"vllm-{fraction}.log", tmp / f"ingested-{fraction}"
    trace = tmp / f"day-{fraction}"
    out = {}
    if "ingest" in commands:
        generated(
            "from pathlib import Path; from ingest_log import generate; "
            f"generate(Path({str(log)!r}), {int(DAY_LOG_BYTES * fraction)})"
        )
        out["ingest"] = measured(oomtrace("ingest", str(log), "--out", str(ingested)))
        log.unlink()
    if "analyze" in commands or "report" in commands:
        generated(
            "from pathlib import Path; from analyze_data import generate; "
            f"generate(Path({str(trace)!r}), requests={int(DAY_REQUESTS * fraction)}, "
            f"hours={24 * fraction}, hz=100)"
        )
    if "analyze" in commands:
        out["analyze"] = measured(oomtrace("analyze", str(trace), "--json"))
    if "report" in commands:
        out["report"] = measured(oomtrace("report", str(trace), "-o", str(tmp / "report.html")))
    return out


def table(results: dict[float, dict[str, dict[str, Any]]]) -> str:
    header = (
        f"{'command':<8} {'of a day':>8} {'wall s':>7} {'CPU s':>7} {'peak MiB':>8} "
        f"{'CPU s per day':>13}"
    )
    lines = [header]
    for command in COMMANDS:
        for fraction, by in results.items():
            if command not in by:
                continue
            r = by[command]
            lines.append(
                f"{command:<8} {fraction:>8.2f} {r['wall_s']:>7.1f} {r['cpu_s']:>7.1f} "
                f"{r['peak_mib']:>8.0f} {r['cpu_s'] / fraction:>13.1f}"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fractions", type=float, nargs="+", default=[0.25, 0.5, 1.0])
    parser.add_argument("--commands", nargs="+", choices=COMMANDS, default=list(COMMANDS))
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs")
    results: dict[float, Any] = {}
    for fraction in args.fractions:
        with tempfile.TemporaryDirectory() as tmp:
            results[fraction] = one_size(fraction, Path(tmp), tuple(args.commands))
        print(f"  {fraction} of a day done", flush=True)
    print(table(results))
    # the parent stays small, so that no child's peak counts memory it inherited
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"this process's own peak: {own:.0f} MiB")


if __name__ == "__main__":
    main()
