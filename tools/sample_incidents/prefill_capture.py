"""Incident 2, the capture: what the collector wrote while the engine of
:mod:`tools.sample_incidents.prefill_oom` served and died (see that module for the story)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from collectors.nvml import NvmlSource
from collectors.prometheus import PrometheusSource
from collectors.torch_hook.source import TorchSource
from collectors.torch_hook.stats import TorchSnapshot
from collectors.writer import SegmentWriter
from tools.sample_incidents import capture_io as cap
from tools.sample_incidents import vllm_engine as ve
from tools.sample_incidents.prefill_oom import (
    AGENT_PID,
    AGENT_START,
    AGENT_STOP,
    ENGINE_HOST_PID,
    ENGINE_PID,
    GIB,
    GPU_BLOCKS,
    LOGITS_FP32,
    MODEL,
    NAME,
    NODE,
    NVML_TOTAL,
    OOM_AFTER_S,
    SERVER,
    START,
    T0,
    TORCH_TOTAL,
    Memory,
    death,
    settings,
    startup,
    workload,
)
from tools.sample_incidents.sim import NS, Run
from tools.sample_incidents.text import Filler
from tools.sample_incidents.vllm_lines import VllmLog, at

__all__ = ["NAME", "build"]


class Metrics:
    """``/metrics`` of the API server (vLLM 0.11 names and labels) at any instant."""

    def __init__(self, run: Run, up_ns: int, down_ns: int, scrapes_ns: list[int]) -> None:
        self.run, self.up_ns, self.down_ns = run, up_ns, down_ns
        self.created = (up_ns - 600_000_000) / 1e9
        self.epoch_t0 = epoch_ns(run.t0)
        served = [t - self.epoch_t0 for t in scrapes_ns if up_ns <= t < down_ns]
        self._points = {p.ts_ns: p for p in run.pool([t for t in served if t > 0])}
        self._finish = sorted(
            (f, i) for i in range(len(run.specs)) if (f := run.finish_ns(i)) is not None
        )

    def body(self, now_ns: int) -> str | None:
        if not self.up_ns <= now_ns < self.down_ns:
            return None
        run = self.run
        t = now_ns - self.epoch_t0
        point = self._points.get(t)
        blocks, running, waiting = (
            (point.blocks, point.running, point.waiting) if point else (0, 0, 0)
        )
        done = [i for f, i in self._finish if f <= t]
        lengths = sum(1 for i in done if run.specs[i].output >= run.specs[i].max_tokens)
        labels = f'engine="0",model_name="{MODEL}"'
        usage = blocks / GPU_BLOCKS
        gauges = (
            ("num_requests_running", "Number of requests in model execution batches.", running),
            ("num_requests_waiting", "Number of requests waiting to be processed.", waiting),
            ("kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", usage),
        )
        out: list[str] = []
        for name, help_, value in gauges:
            out += [
                f"# HELP vllm:{name} {help_}",
                f"# TYPE vllm:{name} gauge",
                f"vllm:{name}{{{labels}}} {float(value)!r}",
            ]
        counters = (
            ("num_preemptions", "Cumulative number of preemption from the engine.",
             run.preemptions_between(-1, t)),
            ("prompt_tokens", "Number of prefill tokens processed.", run.prefilled_between(-1, t)),
            ("generation_tokens", "Number of generation tokens processed.",
             run.generated_between(-1, t)),
        )  # fmt: skip
        for name, help_, value in counters:
            out += [
                f"# HELP vllm:{name}_total {help_}",
                f"# TYPE vllm:{name}_total counter",
                f"vllm:{name}_total{{{labels}}} {float(value)!r}",
                f"# HELP vllm:{name}_created {help_}",
                f"# TYPE vllm:{name}_created gauge",
                f"vllm:{name}_created{{{labels}}} {self.created!r}",
            ]
        success = 'vllm:request_success_total{{engine="0",finished_reason="{}",model_name="{}"}} {}'
        out += [
            "# HELP vllm:request_success_total Count of successfully processed requests.",
            "# TYPE vllm:request_success_total counter",
            success.format("stop", MODEL, float(len(done) - lengths)),
            success.format("length", MODEL, float(lengths)),
            success.format("abort", MODEL, 0.0),
            "# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.",
            "# TYPE vllm:time_to_first_token_seconds histogram",
            f"vllm:time_to_first_token_seconds_count{{{labels}}} {float(len(done))!r}",
            "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
            "# TYPE vllm:cache_config_info gauge",
            (
                'vllm:cache_config_info{block_size="16",cache_dtype="auto",'
                'calculate_kv_scales="False",cpu_offload_gb="0",enable_prefix_caching="False",'
                f'engine="0",gpu_memory_utilization="0.95",num_cpu_blocks="None",'
                f'num_gpu_blocks="{GPU_BLOCKS}",num_gpu_blocks_override="None",'
                'sliding_window="None",swap_space="4"} 1.0'
            ),
        ]
        return "\n".join(out) + "\n"


def build(out: Path) -> Run:
    filler = Filler(20250321)
    specs = workload(filler)
    run = Run(specs, settings(), T0)
    culprit = next(i for i, s in enumerate(specs) if s.prompt == 14_210)
    oom_ns = run.arrival_ns(culprit) + round(OOM_AFTER_S * NS)
    log = VllmLog(colour=True)
    startup(log)
    in_flight = ve.request_lines(
        log, run, filler, SERVER, until_ns=oom_ns, prompt_logprobs={specs[culprit].rid: 5}
    )
    ve.stats_lines(
        log, run, SERVER, first=at(START, 51.0), last=run.at(oom_ns), gpu_blocks=GPU_BLOCKS,
        where="loggers.py:123",
    )  # fmt: skip
    death(log, run, culprit, in_flight, oom_ns)
    capture = out / "capture"
    capture.mkdir(parents=True, exist_ok=True)
    write_capture(capture, run, log, filler, oom_ns)
    return run


def epoch_ns(ts: datetime) -> int:
    return (ts - EPOCH) // timedelta(microseconds=1) * 1000


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class Monotonic:
    """``time.monotonic_ns`` for the scraper: each scrape takes the next of ``durations``."""

    def __init__(self, clock: cap.Clock, durations: Iterator[int]) -> None:
        self.clock, self.durations = clock, durations
        self._started: int | None = None

    def __call__(self) -> int:
        if self._started is None:
            self._started = self.clock()
            return self._started
        started, self._started = self._started, None
        return started + next(self.durations)


def prometheus_poll(source: PrometheusSource, clock: cap.Clock) -> Callable[[], None]:
    return lambda: source.poll(clock())


def torch_hook(
    directory: Path,
    timeline: cap.Timeline,
    clock: cap.Clock,
    memory: Memory,
    oom_at: int,
) -> None:
    """The hook in the engine core process: it starts with the interpreter, reads the allocator
    every 100 ms once CUDA is up, records the OOM, and dies with the process (no close record)."""
    begin = memory.start_ns + 11_400_000_000
    peak = {"allocated": 0, "reserved": 0}

    def snap(now_ns: int) -> TorchSnapshot | None:
        stage = memory.stage(now_ns)
        if stage is None or now_ns < memory.start_ns + 12_000_000_000:
            return None
        allocated, reserved, _ = stage
        peak["allocated"] = max(peak["allocated"], allocated)
        peak["reserved"] = max(peak["reserved"], reserved)
        retries = (now_ns >= oom_at - 20_000_000) + (now_ns >= oom_at)
        return TorchSnapshot(
            allocated, peak["allocated"], reserved, peak["reserved"], int(retries),
            int(now_ns >= oom_at),
        )  # fmt: skip

    allocator = cap.ModelAllocator(clock, snap)
    state: dict[str, Any] = {}
    health = cap.Health("collector.torch", f"pid {ENGINE_PID}")

    def open_() -> None:
        writer = SegmentWriter(
            directory, node=NODE, stream=f"torch-{ENGINE_PID}", writer="torch_hook",
            clock_ns=clock, pid=ENGINE_PID,
        ).start()  # fmt: skip
        state["writer"] = writer
        state["source"] = TorchSource(
            allocator, writer, flush=writer.flush, clock_ns=clock, pid=ENGINE_PID
        )

    def poll() -> None:
        if "source" in state and clock() < memory.exit_ns:
            cap.polled(state["writer"], health, lambda: state["source"].poll(clock()), clock())

    def report() -> None:
        if "writer" in state and clock() < memory.exit_ns:
            state["writer"].append(health.record(clock()))

    def oom() -> None:
        for observer in allocator.observers:
            observer(0, LOGITS_FP32, TORCH_TOTAL, memory.free_at_oom())
        cap.keep_marker(directory, clock(), ENGINE_PID, "PyTorch OOM observer")

    def die() -> None:
        writer: SegmentWriter = state["writer"]
        writer.flush()
        writer.abandon_after_fork()  # the process is gone: nothing closes its segment

    timeline.at(begin, open_)
    timeline.every(begin + 37_000_000, memory.exit_ns, 100_000_000, poll)
    timeline.every(begin + NS, memory.exit_ns, NS, report)
    timeline.at(oom_at, oom)
    timeline.at(memory.exit_ns, die)


URL, LOG_PATH = "http://127.0.0.1:8000/metrics", "/var/log/vllm/vllm.log"
SOURCES = (
    ("collector.prometheus", URL, 1.0),
    ("collector.nvml", "nvml", 0.02),
    ("collector.log", LOG_PATH, 0.1),
)


def agent_writer(directory: Path, clock: cap.Clock) -> SegmentWriter:
    """The agent's writer, started, with its settings as its first ``info`` record."""
    agent = SegmentWriter(
        directory, node=NODE, stream=f"agent-{AGENT_PID}", writer="agent", clock_ns=clock,
        pid=AGENT_PID,
    ).start()  # fmt: skip
    agent.set_sticky("info:collector", {
        "k": "info", "ts": clock(), "src": "collector", "data": {
            "version": "0.1.0", "pid": AGENT_PID,
            "sources": [{"name": n, "target": t, "interval_s": i} for n, t, i in SOURCES],
            "nvml_write_interval_s": 0.1, "flush_interval_s": 0.5, "retain_s": 21600.0,
            "max_disk_bytes": 2 * GIB,
        }})  # fmt: skip
    return agent


def log_tail(
    directory: Path, agent: SegmentWriter, clock: cap.Clock, log: VllmLog
) -> Callable[[], None]:
    """The log tail's poll: a gap until vLLM creates its log, then a record per poll with new
    lines (the first flagged as backlog), and a keep marker at the OOM line."""
    written = [(epoch_ns(ts), line) for ts, line in log.timed_lines()]
    logfile = cap.LogFile(LOG_PATH, dev=66306, ino=1_835_271, lines=written)
    state = {"opened": False}

    def tail() -> None:
        now = clock()
        if now < written[0][0]:
            raise FileNotFoundError(f"{LOG_PATH} does not exist (yet)")
        record = logfile.read(now, "collector.log")
        if record is None:
            return
        if not state["opened"]:
            state["opened"] = True
            record["bl"] = 1
        agent.append(record)
        if any("out of memory" in line for line in record["lines"]):
            cap.keep_marker(directory, now, AGENT_PID, "OOM line in vllm.log")

    return tail


def ticker(
    agent: SegmentWriter, health: cap.Health, poll: Callable[[], None], clock: cap.Clock
) -> Callable[[], None]:
    """One source runner's tick, bound to its source."""
    return lambda: cap.polled(agent, health, poll, clock())


def write_capture(directory: Path, run: Run, log: VllmLog, filler: Filler, oom_ns: int) -> None:
    """The agent's and the hook's segments, driven on one clock from agent start to stop."""
    start, stop = epoch_ns(AGENT_START), epoch_ns(AGENT_STOP)
    oom_at = epoch_ns(run.t0) + oom_ns
    memory = Memory(oom_at, epoch_ns(START))
    clock = cap.Clock(start)
    agent = agent_writer(directory, clock)
    health = {name: cap.Health(name, target) for name, target, _ in SOURCES}
    timeline = cap.Timeline(clock)
    scrapes = list(range(start + 312_000_000, stop, NS))
    metrics = Metrics(run, epoch_ns(at(START, 41.0)), oom_at + 900_000_000, scrapes)
    durations = iter([2_000_000 + filler.jitter_us(100, 2_400) * 1000 for _ in scrapes])
    prometheus = PrometheusSource(
        cap.ModelFetcher(URL, clock, metrics.body), agent, monotonic_ns=Monotonic(clock, durations)
    )

    def device(now_ns: int) -> tuple[int, int, list[tuple[int, int]]]:
        engine = memory.process_bytes(now_ns)
        procs = [(ENGINE_HOST_PID, engine)] if memory.stage(now_ns) is not None else []
        return NVML_TOTAL - TORCH_TOTAL + engine, NVML_TOTAL, procs

    nvml_api = cap.ModelNvml(
        clock, device, uuid="GPU-5f3a9c1e-7b2d-4e8a-9c61-0d4b2e7f1a38", name="NVIDIA L40S"
    )
    nvml = NvmlSource(agent, write_interval_s=0.1, nvml=nvml_api)
    tail = log_tail(directory, agent, clock, log)
    polls: list[tuple[str, int, int, Callable[[], None]]] = [
        ("collector.prometheus", scrapes[0], NS, prometheus_poll(prometheus, clock)),
        ("collector.nvml", start + 4_000_000, 20_000_000, lambda: nvml.poll(clock())),
        ("collector.log", start + 9_000_000, 100_000_000, tail),
    ]
    for name, first, step, poll in polls:
        timeline.every(first, stop, step, ticker(agent, health[name], poll, clock))

    def report_health() -> None:
        for h in health.values():
            agent.append(h.record(clock()))

    timeline.every(start + NS, stop, NS, report_health)
    torch_hook(directory, timeline, clock, memory, oom_at)
    timeline.run()
    clock.now_ns = stop
    for h in health.values():
        if h.gap_start is not None:
            agent.append(h.gap(stop))
            h.gap_start = None
        agent.append(h.record(stop))
    agent.close("SIGTERM")
