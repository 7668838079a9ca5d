"""What the vLLM plugin costs a scheduler step at 256 running requests (target: under 2 %).

    python benchmarks/vllm_plugin_overhead.py synthetic [--steps 3000]
    python benchmarks/vllm_plugin_overhead.py real      # needs .ci/vllm-env (built once)

**synthetic**: the miniature of vLLM's v1 scheduler in ``tests/vllm_fakes.py`` (real queues,
chunked prefill, a block pool, preemption) holding 256 running requests, stepped side by side in
one process with the plugin off and on (alternating blocks of steps, so drift hits both). Per
step: the scheduler's own time, the plugin's time on the scheduler's thread (its hooks), and the
CPU time of the plugin's writing thread. The miniature has no model, so its step is far shorter
than any real engine's: the plugin's share of it is an upper bound.

**real**: ``vllm serve`` (0.32.0 CPU build, the tiny dummy Llama, ``--max-num-seqs 256``, a pool
big enough for all) run twice on loopback with the same load, 256 requests of 64 prompt and 384
output tokens sent at once: once without the plugin, once with it. Reported side by side: the
load's wall time and vLLM's own mean time per output token (``/metrics``), and, from the
plugin's ``vllm_cost`` record, its time on the scheduler thread and its thread's CPU time per
step against the step time. On 2 shared cores the wall times of two runs differ by a few percent
for reasons of their own; the plugin's self-measured share is the figure to read.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RUNNING = 256


# -- synthetic --------------------------------------------------------------------------------


def synthetic(steps: int, block: int = 50) -> dict[str, Any]:
    from collectors.vllm_plugin.recorder import EngineRecorder
    from collectors.vllm_plugin.settings import PluginSettings
    from tests import vllm_fakes as fakes

    def loaded() -> fakes.Scheduler:
        # room for every request: 256 x (64 prompt + 4096 output) tokens of 16-token blocks
        scheduler = fakes.Scheduler(
            num_blocks=RUNNING * 270, block_size=16, max_num_seqs=RUNNING,
            max_num_batched_tokens=8192,
        )  # fmt: skip
        for i in range(RUNNING):
            scheduler.add_request(fakes.Request(f"cmpl-{i:016x}-0-{i:08x}", [5] * 64, 100_000))
        for _ in range(3):  # prefill done: every request decodes one token per step
            scheduler.step()
        return scheduler

    with tempfile.TemporaryDirectory() as tmp:
        recorder = EngineRecorder(PluginSettings(directory=Path(tmp), node="bench")).start()
        off, on = loaded(), loaded()
        off_ns: list[int] = []
        on_ns: list[int] = []
        for _ in range(steps // block):
            for _ in range(block):
                start = time.perf_counter_ns()
                off.update_from_output(off.schedule())
                off_ns.append(time.perf_counter_ns() - start)
            for _ in range(block):
                start = time.perf_counter_ns()
                output = on.schedule()
                recorder.on_schedule(on, output)
                on.update_from_output(output)
                on_ns.append(time.perf_counter_ns() - start)
        recorder.flush()
        thread_ns = recorder.drain_ns
        hook_ns = recorder.hook_ns
        recorder.close()
        written = sum(p.stat().st_size for p in Path(tmp).iterdir())
    n = len(on_ns)
    return {
        "running": len(on.running),
        "steps": n,
        "step_off_us": statistics.median(off_ns) / 1e3,
        "step_on_us": statistics.median(on_ns) / 1e3,
        "hook_us_per_step": hook_ns / n / 1e3,
        "thread_cpu_us_per_step": thread_ns / n / 1e3,
        "bytes_per_step": written / n,
    }


def print_synthetic(result: dict[str, Any]) -> None:
    off, on = result["step_off_us"], result["step_on_us"]
    plugin = result["hook_us_per_step"] + result["thread_cpu_us_per_step"]
    print(f"synthetic scheduler, {result['running']} running, {result['steps']} steps per side")
    print(
        f"  step (scheduler only)    off {off:8.1f} us   on {on:8.1f} us   on/off x{on / off:.3f}"
    )
    print(
        f"  plugin per step          hooks {result['hook_us_per_step']:.1f} us + writer thread "
        f"{result['thread_cpu_us_per_step']:.1f} us CPU = {plugin:.1f} us; "
        f"{result['bytes_per_step']:.0f} bytes written"
    )
    print(f"  share of this step (no model: an upper bound)  {100 * plugin / off:.1f} %")


# -- real server ------------------------------------------------------------------------------


def real(output_tokens: int) -> dict[str, Any]:
    from tools import vllm_server as vs

    env = vs.vllm_environment()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        python = vs.server_environment(env, Path(tmp, "server-env"))
        for name, plugin in (("off", False), ("on", True)):
            work = Path(tmp, name)
            work.mkdir()
            results[name] = _serve_once(vs, python, work, plugin, output_tokens)
    return results


def _serve_once(vs: Any, python: Path, work: Path, plugin: bool, output_tokens: int) -> Any:
    capture = work / "capture"
    pool = ("--num-gpu-blocks-override", "1100", "--kv-cache-memory-bytes", str(160 << 20),
            "--max-num-seqs", str(RUNNING), "--max-num-batched-tokens", "8192")  # fmt: skip
    server = vs.VllmServer(
        python, work / "model", work / "vllm.log", capture if plugin else None,
        vs.free_port(), log_requests=False, extra_args=pool,
    )  # fmt: skip
    server.start()
    try:
        start = time.monotonic()
        vs.send_load(
            server, longs=0, shorts=RUNNING, short_shape=(64, output_tokens), stagger_s=0.0
        )
        wall = time.monotonic() - start
        metrics = server.metrics()
    finally:
        server.stop()
    tpot = _histogram_mean(metrics, "vllm:request_time_per_output_token_seconds")
    out: dict[str, Any] = {"wall_s": wall, "tpot_ms": tpot * 1e3}
    if plugin:
        out["cost"] = _last_cost(capture)
        out["max_running"] = _max_running(capture)
    return out


def _histogram_mean(text: str, name: str) -> float:
    total = count = 0.0
    for line in text.splitlines():
        if line.startswith(name + "_sum"):
            total += float(line.rsplit(" ", 1)[1])
        elif line.startswith(name + "_count"):
            count += float(line.rsplit(" ", 1)[1])
    return total / count if count else float("nan")


def _capture_records(capture: Path) -> list[dict[str, Any]]:
    from collectors.format import decode

    lines = [
        line for p in sorted(capture.glob("*.oseg")) for line in p.read_bytes().split(b"\n")
        if line
    ]  # fmt: skip
    return [decode(line) for line in lines]


def _last_cost(capture: Path) -> dict[str, Any]:
    costs = [r for r in _capture_records(capture) if r["k"] == "vllm_cost"]
    return costs[-1]


def _max_running(capture: Path) -> int:
    return max(r["run"] for r in _capture_records(capture) if r["k"] == "vllm_step")


def print_real(result: dict[str, Any]) -> None:
    off, on = result["off"], result["on"]
    cost = on["cost"]
    steps = cost["steps"]
    step_ms = cost["step_ns"] / steps / 1e6
    hook_us = cost["hook_ns"] / steps / 1e3
    thread_us = cost["thread_cpu_ns"] / steps / 1e3
    print(f"real vLLM 0.32.0 (CPU build), {on['max_running']} running at most, {steps} steps")
    print(
        f"  load wall time          off {off['wall_s']:7.1f} s   on {on['wall_s']:7.1f} s   "
        f"on/off x{on['wall_s'] / off['wall_s']:.3f}"
    )
    print(
        f"  mean time per token     off {off['tpot_ms']:7.2f} ms  on {on['tpot_ms']:7.2f} ms  "
        f"on/off x{on['tpot_ms'] / off['tpot_ms']:.3f}"
    )
    print(
        f"  plugin per step         hooks {hook_us:.1f} us + writer thread {thread_us:.1f} us "
        f"CPU, against a {step_ms:.2f} ms step: {100 * (hook_us + thread_us) / 1e3 / step_ms:.2f} %"
    )
    print(f"  dropped {cost['dropped']}, errors {cost['errors']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", choices=["synthetic", "real", "both"])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--output-tokens", type=int, default=384)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.mode in ("synthetic", "both"):
        result = synthetic(args.steps)
        print(json.dumps(result)) if args.json else print_synthetic(result)
    if args.mode in ("real", "both"):
        result = real(args.output_tokens)
        print(json.dumps(result)) if args.json else print_real(result)


if __name__ == "__main__":
    main()
