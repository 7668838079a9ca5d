"""Overhead of the Prometheus sampling loop, side by side with a naive peer, in one run.

    python benchmarks/collector_overhead.py [--seconds 10] [--rates 10,50,100]

A loopback server (its own process) serves a full-size vLLM 0.11 exposition (every V1 metric
family with its real buckets, ``_created`` series, process and GC metrics) rendered once by
``prometheus_client``. Each measured loop runs in its own process for ``--seconds`` at each rate:

* ``oomtrace``: the collector's own code path (``HttpFetcher`` on a kept-alive connection,
  family filtering, ``SegmentWriter`` with its flusher thread, ``SourceRunner`` scheduling);
* ``naive``: what a quick script does: ``urllib.request.urlopen`` per scrape, parse every scrape
  with ``prometheus_client.parser``, keep the same families, append them as JSON lines.

Reported per loop: CPU share of one core during the window (user + system), peak resident memory,
the lateness of each poll against its slot (jitter p50/p99) and the slots missed because a poll
ran into them (the collector skips those and starts its next poll on its own slot; the naive loop
polls late instead). Every loop runs twice in the same run: on the machine as it is (``quiet``),
and beside one busy process per CPU (``loaded``, plain Python spinning at the default priority:
what an engine's tokenizer or a batch job sharing the node does), where lateness is mostly the
operating system's wait for a free CPU. The ratios
are peer / oomtrace (above 1 means the collector is cheaper). Last, the whole agent at its default
rates (Prometheus 10 Hz, log tail 10 Hz, health 1 Hz) is measured the same way. Server-side cost
(the engine rendering its exposition on every scrape) is reported separately: a 10 Hz scrape makes
the engine's API server do that work ten times a second.
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def full_vllm_exposition() -> bytes:
    """vLLM 0.11 V1 ``/metrics`` after some traffic (names, labels and buckets as vLLM's
    ``vllm/v1/metrics/loggers.py`` declares them, docs/formats/prometheus.md; values made up),
    rendered by prometheus_client."""
    from prometheus_client import (
        CollectorRegistry,
        Counter,
        Gauge,
        Histogram,
        gc_collector,
        generate_latest,
        platform_collector,
        process_collector,
    )

    reg = CollectorRegistry()
    process_collector.ProcessCollector(registry=reg)
    platform_collector.PlatformCollector(registry=reg)
    gc_collector.GCCollector(registry=reg)
    labels = ["model_name", "engine"]
    values = (MODEL, "0")
    for name, value in [
        ("num_requests_running", 48),
        ("num_requests_waiting", 17),
        ("kv_cache_usage_perc", 0.9871),
        ("gpu_cache_usage_perc", 0.9871),
    ]:
        Gauge(f"vllm:{name}", name, labels, registry=reg).labels(*values).set(value)
    for name, value in [
        ("num_preemptions", 12),
        ("prompt_tokens", 1843211),
        ("generation_tokens", 27453),
        ("prefix_cache_queries", 9e6),
        ("prefix_cache_hits", 4e6),
        ("gpu_prefix_cache_queries", 9e6),
        ("gpu_prefix_cache_hits", 4e6),
    ]:
        Counter(f"vllm:{name}", name, labels, registry=reg).labels(*values).inc(value)
    success = Counter(
        "vllm:request_success", "finished", [*labels, "finished_reason"], registry=reg
    )
    for reason, count in [("stop", 951), ("length", 40), ("abort", 3), ("error", 0)]:
        success.labels(*values, reason).inc(count)
    seconds = [
        0.001,
        0.005,
        0.01,
        0.02,
        0.04,
        0.06,
        0.08,
        0.1,
        0.25,
        0.5,
        0.75,
        1.0,
        2.5,
        5.0,
        7.5,
        10.0,
        20.0,
        40.0,
        80.0,
        160.0,
        640.0,
        2560.0,
    ]
    tokens = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000]
    steps = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
    histograms = {
        "iteration_tokens_total": steps,
        "time_to_first_token_seconds": seconds,
        "time_per_output_token_seconds": seconds[:18],
        "inter_token_latency_seconds": seconds[:18],
        "e2e_request_latency_seconds": seconds,
        "request_queue_time_seconds": seconds,
        "request_inference_time_seconds": seconds,
        "request_prefill_time_seconds": seconds,
        "request_decode_time_seconds": seconds,
        "request_prompt_tokens": tokens,
        "request_generation_tokens": tokens,
        "request_params_max_tokens": tokens,
        "request_max_num_generation_tokens": tokens,
        "request_params_n": [1, 2, 5, 10, 20],
    }
    for i, (name, buckets) in enumerate(histograms.items()):
        h = Histogram(f"vllm:{name}", name, labels, buckets=buckets, registry=reg).labels(*values)
        for k in range(200):
            h.observe(buckets[(k * 7 + i) % len(buckets)] * 0.9)
    info = Gauge(
        "vllm:cache_config_info",
        "CacheConfig",
        [
            "block_size",
            "cache_dtype",
            "enable_prefix_caching",
            "engine",
            "gpu_memory_utilization",
            "num_gpu_blocks",
            "num_cpu_blocks",
            "sliding_window",
            "swap_space",
            "cpu_offload_gb",
        ],
        registry=reg,
    )
    info.labels("16", "auto", "True", "0", "0.9", "27000", "0", "None", "4", "0").set(1)
    return bytes(generate_latest(reg))


def render_cost_ms(repeats: int = 50) -> float:
    """What the engine pays per scrape to render this exposition (prometheus_client)."""
    started = time.perf_counter()
    for _ in range(repeats):
        full_vllm_exposition()
    return (time.perf_counter() - started) / repeats * 1e3


# -- the loopback server (its own process) --------------------------------------------------------


def serve(body_file: Path, port_file: Path) -> None:
    body = body_file.read_bytes()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            return

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    port_file.write_text(str(httpd.server_address[1]))
    httpd.serve_forever()


# -- measured loops (each in its own process) -----------------------------------------------------


def _usage() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def worker_oomtrace(url: str, rate: float, seconds: float, out: Path) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    from collectors.prometheus import HttpFetcher, PrometheusSource
    from collectors.schedule import Schedule, SourceRunner
    from collectors.writer import SegmentWriter

    lateness: list[float] = []
    writer = SegmentWriter(out, node="bench", stream="agent-bench", writer="agent").start()
    source = PrometheusSource(HttpFetcher(url, timeout_s=1.0, max_bytes=16 << 20), writer)
    stop = threading.Event()
    runner = SourceRunner(source, Schedule(1.0 / rate), writer, stop, on_tick=lateness.append)
    cpu0, wall0 = _usage(), time.monotonic()
    runner.start()
    time.sleep(seconds)
    stop.set()
    runner.join(5.0)
    writer.close()
    return _result(cpu0, wall0, lateness, runner.samples, runner.errors, runner.misses)


def worker_naive(url: str, rate: float, seconds: float, out: Path) -> dict[str, Any]:
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    sys.path.insert(0, str(ROOT))
    from collectors.prometheus_families import KEEP

    interval, lateness, samples, errors = 1.0 / rate, [], 0, 0
    cpu0, wall0 = _usage(), time.monotonic()
    due = wall0
    with (out / "naive.jsonl").open("a", encoding="utf-8") as sink:
        while time.monotonic() - wall0 < seconds:
            lateness.append(time.monotonic() - due)
            try:
                with urllib.request.urlopen(url, timeout=1.0) as response:
                    text = response.read().decode()
                kept = [
                    (s.name, s.labels, s.value)
                    for family in text_string_to_metric_families(text)
                    for s in family.samples
                    if s.name in KEEP
                ]
                sink.write(json.dumps({"ts": time.time_ns(), "samples": kept}) + "\n")
                sink.flush()
                samples += 1
            except OSError:
                errors += 1
            due += interval
            time.sleep(max(0.0, due - time.monotonic()))
    return _result(cpu0, wall0, lateness, samples, errors)


def worker_agent(url: str, seconds: float, out: Path) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT))
    from collectors.agent import Agent
    from collectors.config import build_config

    log = out / "engine.log"
    log.write_text("INFO 01-01 00:00:00 [api_server.py:1] started\n")
    lateness: list[float] = []
    config = build_config(out=str(out / "capture"), prometheus=[url], logs=[str(log)])
    agent = Agent(config, on_tick=lateness.append)
    cpu0, wall0 = _usage(), time.monotonic()
    agent.start()
    time.sleep(seconds)
    summary = agent.stop()
    polls = sum(s.samples for s in summary.sources)
    misses = sum(s.misses for s in summary.sources)
    return _result(cpu0, wall0, lateness, polls, sum(s.errors for s in summary.sources), misses)


def _result(
    cpu0: float,
    wall0: float,
    lateness: list[float],
    samples: int,
    errors: int,
    misses: int | None = None,
) -> dict[str, Any]:
    """``misses``: slots skipped because a poll ran into them (None: a loop that never skips,
    it polls late instead)."""
    wall = time.monotonic() - wall0
    quantiles = (
        statistics.quantiles([x * 1e3 for x in lateness], n=100)
        if len(lateness) > 2
        else [0.0] * 99
    )
    return {
        "cpu_share": (_usage() - cpu0) / wall,
        "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "jitter_p50_ms": quantiles[49],
        "jitter_p99_ms": quantiles[98],
        "samples": samples,
        "errors": errors,
        "misses": misses,
    }


# -- orchestration -----------------------------------------------------------------------------


SPIN = "while True: pass"
CONDITIONS = ("quiet", "loaded")


def _run_worker(args: list[str], condition: str = "quiet") -> dict[str, Any]:
    """One measured loop in its own process; ``loaded``: beside one spinning process per CPU."""
    spinners = []
    if condition == "loaded":
        spinners = [
            subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(os.cpu_count() or 1)
        ]
    try:
        out = subprocess.run(
            [sys.executable, __file__, *args], capture_output=True, text=True, check=True, cwd=ROOT
        )
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rates", default="10,50,100")
    parser.add_argument("--serve", nargs=2, type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--worker", choices=["oomtrace", "naive", "agent"], help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--rate", type=float, default=10.0, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(*args.serve)
        return
    if args.worker:
        run = {"oomtrace": worker_oomtrace, "naive": worker_naive}.get(args.worker)
        result = (
            run(args.url, args.rate, args.seconds, args.out)
            if run
            else worker_agent(args.url, args.seconds, args.out)
        )
        print(json.dumps(result))
        return
    compare([float(r) for r in args.rates.split(",")], args.seconds)


def compare(rates: list[float], seconds: float) -> None:
    body = full_vllm_exposition()
    lines = body.count(b"\n")
    print(
        f"exposition: {len(body)} bytes, {lines} lines; engine-side render cost "
        f"{render_cost_ms():.2f} ms per scrape (prometheus_client)"
    )
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, {seconds:g} s per loop\n")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "body").write_bytes(body)
        server = subprocess.Popen(
            [sys.executable, __file__, "--serve", str(tmp / "body"), str(tmp / "port")]
        )
        try:
            while not (tmp / "port").exists() or not (tmp / "port").read_text():
                time.sleep(0.05)
            url = f"http://127.0.0.1:{(tmp / 'port').read_text()}/metrics"
            _table(url, rates, seconds, tmp)
            print("\nwhole agent at default rates (prometheus 10 Hz, log tail 10 Hz, health 1 Hz):")
            for condition in CONDITIONS:
                out = tmp / f"agent-{condition}"
                out.mkdir()
                worker = ["--worker", "agent", "--url", url, "--seconds", str(seconds)]
                agent = _run_worker([*worker, "--out", str(out)], condition)
                print(
                    f"  {condition:>6}: {agent['cpu_share'] * 100:.2f}% of one core, "
                    f"{agent['rss_mib']:.1f} MiB peak RSS, tick lateness p50 "
                    f"{agent['jitter_p50_ms']:.2f} ms p99 {agent['jitter_p99_ms']:.2f} ms, "
                    f"{agent['misses']} slots missed"
                )
        finally:
            server.terminate()
            server.wait()


def _table(url: str, rates: list[float], seconds: float, tmp: Path) -> None:
    columns = [("rate", 6), ("loop", 9), ("machine", 7), ("CPU %", 7), ("RSS MiB", 8)]
    columns += [("p50 ms", 8), ("p99 ms", 8), ("scrapes", 8), ("missed", 7)]
    print(" ".join(f"{name:>{width}}" for name, width in columns))
    ratios = []
    for rate in rates:
        results = {}
        for condition in CONDITIONS:
            for impl in ("oomtrace", "naive"):
                out = tmp / f"{impl}-{rate:g}-{condition}"
                out.mkdir()
                worker = ["--worker", impl, "--url", url, "--rate", str(rate)]
                worker += ["--seconds", str(seconds), "--out", str(out)]
                results[impl, condition] = r = _run_worker(worker, condition)
                print(
                    f"{rate:>4g}Hz {impl:>9} {condition:>7} {r['cpu_share'] * 100:7.2f} "
                    f"{r['rss_mib']:8.1f} {r['jitter_p50_ms']:8.2f} {r['jitter_p99_ms']:8.2f} "
                    f"{r['samples']:8d} {'-' if r['misses'] is None else r['misses']:>7}"
                )
        ours, peer = results["oomtrace", "quiet"], results["naive", "quiet"]
        ratios.append(
            (
                rate,
                peer["cpu_share"] / ours["cpu_share"],
                peer["rss_mib"] / ours["rss_mib"],
                *(
                    (results["naive", c]["jitter_p99_ms"] + 1e-3)
                    / (results["oomtrace", c]["jitter_p99_ms"] + 1e-3)
                    for c in CONDITIONS
                ),
            )
        )
    print("\nratios naive / oomtrace (above 1: the collector is cheaper or steadier)")
    for rate, cpu, rss, quiet, loaded in ratios:
        print(
            f"{rate:>4g}Hz  CPU x{cpu:.1f}  RSS x{rss:.2f}  jitter p99 x{quiet:.1f} quiet, "
            f"x{loaded:.1f} loaded"
        )


if __name__ == "__main__":
    main()
