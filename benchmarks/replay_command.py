"""``oomtrace replay DIR --json`` as a whole command, each run in its own process, beside floors.

Cases:

1. Each sample incident's raw files (ingest, calibration and the replay in one command), with an
   empty user cache every run: what a first use costs. Floors: the interpreter importing numpy
   and Polars, and ``oomtrace ingest`` of the same files (the replay ingests them first).
2. A day of traffic as a trace directory (``analyze_data.py``: two million requests, 26 million
   memory samples), first with an empty user cache, then with it warm (the C kernel compiles
   nothing at run time: the two should match). Floor: reading the request columns and the samples
   of the metrics the replay reads.

Every case repeats (``--repeats``); the figures are medians. Outputs are cross-checked: every run
of a case prints the same JSON, and the sample incidents print the same JSON with the simulator
forced to plain Python and to C (``OOMTRACE_REPLAY_ENGINE``); the day's cold and warm runs
agree, and with ``--baseline`` this checkout's and the baseline's outputs (the run fails where
they differ). Wall seconds depend on the machine's load; CPU seconds (user + system, counted by the
kernel for the process) are the steadier figure on a shared machine.

    python benchmarks/replay_command.py                       # generates the day in a temp dir
    python benchmarks/replay_command.py --day /tmp/day        # an existing analyze_data.py trace
    python benchmarks/replay_command.py --skip-day            # the sample incidents only
    python benchmarks/replay_command.py --day /tmp/day --skip-samples --baseline /work/main \
        --baseline-python /path/to/its/venv/bin/python

``--baseline CHECKOUT`` also runs that checkout's ``oomtrace`` (another branch, a release) on the
day, warm, each of its runs right after one of this checkout's, and prints this / baseline: on a
shared machine only runs made side by side compare. ``--baseline-python`` runs it with another
interpreter (a checkout of before the C kernel needs numba installed).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_logs"
# The incidents whose files hold requests to replay (vllm-startup-misfit states no pool).
INCIDENTS = (
    "vllm-kv-exhaustion",
    "sglang-retraction",
    "vllm-prefill-oom",
    "vllm-foreign-process",
    "vllm-cpu-preemptions",
)
# The floor reads what the replay reads: the request columns it uses and its sample series.
READ_DAY = """
import sys, polars as pl
from oomtrace.replay.calibrate import SAMPLE_METRICS
from oomtrace.replay.load import REQUEST_COLUMNS
from oomtrace.schema import REQUIRED
day = sys.argv[1]
pl.read_parquet(
    day + "/requests.parquet", columns=[*REQUIRED["requests"], "clock", *REQUEST_COLUMNS]
)
kv = pl.col("metric").is_in(list(SAMPLE_METRICS))
pl.scan_parquet(day + "/samples.parquet").filter(kv).collect()
"""


def measured(
    argv: Sequence[str], env: dict[str, str] | None = None, cwd: Path = ROOT
) -> dict[str, Any]:
    """Run ``argv`` in ``cwd`` (``python -m`` imports from there first) in its own process: wall
    from start to exit, CPU and peak RSS (wait4)."""
    with tempfile.TemporaryFile("w+b") as out:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=cwd, stdout=out, env={**os.environ, **(env or {})})
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode:
            raise SystemExit(f"{' '.join(argv)} failed with exit code {proc.returncode}")
        out.seek(0)
        return {
            "wall_s": wall,
            "cpu_s": usage.ru_utime + usage.ru_stime,
            "peak_mib": usage.ru_maxrss / 1024,
            "stdout": out.read(),
        }


def repeated(
    argv: Sequence[str], repeats: int, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Medians of ``repeats`` runs, each with an empty user cache unless ``env`` names one; fails
    unless every run printed the same output."""
    runs = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as cache:
            runs.append(measured(argv, {"OOMTRACE_CACHE_DIR": cache, **(env or {})}))
    return medians(runs, " ".join(argv))


def medians(runs: list[dict[str, Any]], what: str = "") -> dict[str, Any]:
    """Medians of the runs' figures; fails unless every run printed the same output."""
    if len({r["stdout"] for r in runs}) != 1:
        raise SystemExit(f"{what}: the repeats printed different outputs")
    return {
        key: statistics.median(r[key] for r in runs) for key in ("wall_s", "cpu_s", "peak_mib")
    } | {"stdout": runs[0]["stdout"]}


def oomtrace(*args: str, python: str = sys.executable) -> list[str]:
    return [python, "-m", "oomtrace", *args]


def row(label: str, r: dict[str, Any], floor: dict[str, Any] | None) -> str:
    ratio = (
        f"{r['wall_s'] / floor['wall_s']:>6.2f} {r['cpu_s'] / floor['cpu_s']:>6.2f}"
        if floor
        else ""
    )
    return f"  {label:<38} {r['wall_s']:>7.2f} {r['cpu_s']:>7.2f} {r['peak_mib']:>8.0f} {ratio}"


HEADER = f"  {'':<38} {'wall s':>7} {'CPU s':>7} {'peak MiB':>8} {'wall/ CPU/ floor':>13}"


def samples_case(repeats: int) -> None:
    startup = repeated([sys.executable, "-c", "import numpy, polars"], repeats)
    print(f"sample incidents: raw files, empty user cache every run, {repeats} runs each")
    print(HEADER)
    print(row("floor: python importing numpy, polars", startup, None))
    for name in INCIDENTS:
        folder = str(SAMPLES / name)
        with tempfile.TemporaryDirectory() as out:
            ingest = repeated(oomtrace("ingest", folder, "--out", out, "--force"), repeats)
        replay = repeated(oomtrace("replay", folder, "--json"), repeats)
        forced = {
            engine: measured(
                oomtrace("replay", folder, "--json"), {"OOMTRACE_REPLAY_ENGINE": engine}
            )["stdout"]
            for engine in ("python", "compiled")
        }
        agree = forced["python"] == forced["compiled"] == replay["stdout"]
        print(f"  {name}")
        print(row("oomtrace ingest (floor)", ingest, startup))
        print(row("oomtrace replay --json", replay, ingest))
        print(
            f"    replay / start-up floor: wall {replay['wall_s'] / startup['wall_s']:.2f}, CPU "
            f"{replay['cpu_s'] / startup['cpu_s']:.2f}; python and C agree: {agree}"
        )
        if not agree:
            raise SystemExit(f"{name}: the plain Python and C simulators disagree")


def day_case(
    day: Path, repeats: int, baseline: Path | None = None, baseline_python: str = sys.executable
) -> None:
    floor = repeated([sys.executable, "-c", READ_DAY, str(day)], repeats)
    argv = oomtrace("replay", str(day), "--json")
    their_argv = oomtrace("replay", str(day), "--json", python=baseline_python)
    cold = repeated(argv, 1)  # an empty user cache: once
    loads = []
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as other:
        ours_env = {"OOMTRACE_CACHE_DIR": cache}
        theirs_env = {"OOMTRACE_CACHE_DIR": other, "PYTHONPATH": str(baseline)}
        measured(argv, ours_env)  # fills the cache
        if baseline is not None:
            measured(their_argv, theirs_env, baseline)  # fills the baseline's own cache
        runs: dict[str, list[dict[str, Any]]] = {"ours": [], "theirs": []}
        for _ in range(repeats):
            loads.append(os.getloadavg()[0])
            runs["ours"].append(measured(argv, ours_env))
            if baseline is not None:
                runs["theirs"].append(measured(their_argv, theirs_env, baseline))
    warm, theirs = (medians(runs[k]) if runs[k] else None for k in ("ours", "theirs"))
    assert warm is not None
    print(
        f"a day: {day} ({repeats} runs warm, one cold; load average "
        f"{min(loads):.1f}-{max(loads):.1f} at the runs)"
    )
    for k, run in enumerate(runs["ours"]):
        pair = f"  run {k + 1}: this {run['wall_s']:.2f} s wall / {run['cpu_s']:.2f} CPU s"
        if runs["theirs"]:
            other_run = runs["theirs"][k]
            pair += f", baseline {other_run['wall_s']:.2f} / {other_run['cpu_s']:.2f}"
        print(f"{pair} (load {loads[k]:.1f})")
    print(HEADER)
    print(row("floor: read requests and KV samples", floor, None))
    print(row("replay --json, empty cache", cold, floor))
    print(row("replay --json, cache warm", warm, floor))
    agree = cold["stdout"] == warm["stdout"]
    print(f"  cold and warm outputs agree: {agree}")
    if not agree:
        raise SystemExit("the day's cold and warm replays disagree")
    if theirs is not None:
        print(row(f"baseline {baseline}, cache warm", theirs, floor))
        print(
            f"  this / baseline: wall {warm['wall_s'] / theirs['wall_s']:.2f}, CPU "
            f"{warm['cpu_s'] / theirs['cpu_s']:.2f}, peak "
            f"{warm['peak_mib'] / theirs['peak_mib']:.2f}; outputs agree: "
            f"{warm['stdout'] == theirs['stdout']}"
        )
        if warm["stdout"] != theirs["stdout"]:
            raise SystemExit(f"the day's replay differs from the baseline's ({baseline})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--day", type=Path, help="an existing analyze_data.py trace directory")
    parser.add_argument("--skip-day", action="store_true")
    parser.add_argument("--skip-samples", action="store_true")
    parser.add_argument("--baseline", type=Path, help="another checkout to run on the day too")
    parser.add_argument(
        "--baseline-python", default=sys.executable, help="the interpreter to run the baseline"
    )
    args = parser.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    if not args.skip_samples:
        samples_case(args.repeats)
    if args.skip_day:
        return
    if args.day is not None:
        day_case(args.day, args.repeats, args.baseline, args.baseline_python)
        return
    with tempfile.TemporaryDirectory() as tmp:
        # generated in its own process: a child forked from a parent holding the generated frames
        # would count them in its peak
        generator = Path(__file__).resolve().parent / "analyze_data.py"
        subprocess.run([sys.executable, str(generator), "--out", f"{tmp}/day"], check=True)
        day_case(Path(tmp) / "day", args.repeats, args.baseline, args.baseline_python)


if __name__ == "__main__":
    main()
