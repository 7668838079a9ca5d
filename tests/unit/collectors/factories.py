"""Small factories for collector tests: an in-memory sink, a loopback metrics server, real
exposition texts, and a writer on a temporary directory. Integration tests import them too."""

from __future__ import annotations

import http.server
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collectors.format import Record
from collectors.reader import CaptureReadResult, read_capture
from collectors.retention import RetentionPolicy
from collectors.writer import SegmentWriter, WriterSettings
from tests.waiting import HANG_S, wait_until


@dataclass
class MemorySink:
    """A :class:`collectors.schedule.SegmentSink` that keeps records in a list; ``rotate()``
    plays a new segment (sticky records again, keyed repeats reset)."""

    records: list[Record] = field(default_factory=list)
    sticky: dict[str, Record] = field(default_factory=dict)
    generation: int = 0
    keys: dict[str, int] = field(default_factory=dict)

    def append(self, record: Record) -> bool:
        self.records.append(record)
        return True

    def append_keyed(self, key: str, full: Record, repeat: Record | None = None) -> None:
        if repeat is not None and self.keys.get(key) == self.generation:
            self.append(repeat)
        else:
            self.append(full)
            self.keys[key] = self.generation

    def set_sticky(self, key: str, record: Record) -> None:
        self.sticky[key] = record
        self.append(record)

    def rotate(self) -> None:
        self.generation += 1
        self.records.extend(self.sticky.values())

    def kind(self, k: str) -> list[Record]:
        return [r for r in self.records if r["k"] == k]


def writer(directory: Path, **settings: Any) -> SegmentWriter:
    """A started writer with a short flush interval (close it in the test)."""
    retention = settings.pop("retention", None)
    base = {"flush_interval_s": 0.05, **settings}
    return SegmentWriter(
        directory,
        node="node-a",
        stream="agent-1",
        writer="agent",
        settings=WriterSettings(**base),
        retention=retention if isinstance(retention, RetentionPolicy) else None,
    ).start()


# vLLM V1 0.11 layout (as vllm/v1/metrics/loggers.py declares it, docs/formats/prometheus.md; a
# generated sample), trimmed.
def vllm_metrics(
    *,
    running: int = 48,
    waiting: int = 17,
    kv: float = 0.5,
    preemptions: int = 12,
    blocks: int = 27000,
) -> str:
    labels = 'engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"'
    return (
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
        "# TYPE vllm:num_requests_running gauge\n"
        f"vllm:num_requests_running{{{labels}}} {float(running)}\n"
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        f"vllm:num_requests_waiting{{{labels}}} {float(waiting)}\n"
        "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n"
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        f"vllm:kv_cache_usage_perc{{{labels}}} {kv}\n"
        "# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.\n"
        "# TYPE vllm:num_preemptions_total counter\n"
        f"vllm:num_preemptions_total{{{labels}}} {float(preemptions)}\n"
        "# HELP vllm:num_preemptions_created Cumulative number of preemption from the engine.\n"
        "# TYPE vllm:num_preemptions_created gauge\n"
        f"vllm:num_preemptions_created{{{labels}}} 1.7959478115403647e+09\n"
        "# HELP vllm:request_params_max_tokens Histogram of the max_tokens request parameter.\n"
        "# TYPE vllm:request_params_max_tokens histogram\n"
        f'vllm:request_params_max_tokens_bucket{{engine="0",le="1.0",model_name="m"}} 0.0\n'
        f'vllm:request_params_max_tokens_bucket{{engine="0",le="+Inf",model_name="m"}} 5.0\n'
        'vllm:request_params_max_tokens_count{engine="0",model_name="m"} 5.0\n'
        'vllm:request_params_max_tokens_sum{engine="0",model_name="m"} 17472.0\n'
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
        "# TYPE vllm:cache_config_info gauge\n"
        'vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",'
        f'engine="0",gpu_memory_utilization="0.9",num_gpu_blocks="{blocks}"}} 1.0\n'
    )


@dataclass(frozen=True)
class Reply:
    status: int = 200
    body: bytes = b""
    delay_s: float = 0.0
    content_length: bool = True
    trickle_s: float = 0.0  # pause between 100-byte pieces of the body
    hold: threading.Event | None = None  # answer only once this is set (a stalled endpoint)
    chunked: bool = False  # Transfer-Encoding: chunked, 1000-byte chunks
    drop_after: bool = False  # close the kept-alive connection afterwards without saying so


@dataclass
class Served:
    n: int
    monotonic: float
    wall_ns: int
    client_port: int = 0


class MetricsServer:
    """A real HTTP server on 127.0.0.1 (a thread) whose reply is computed per request."""

    def __init__(self, reply: Callable[[int], Reply]) -> None:
        self.reply = reply
        self.served: list[Served] = []
        self._lock = threading.Lock()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                with server._lock:
                    n = len(server.served) + 1
                    answer = server.reply(n)
                    port = self.client_address[1]
                    server.served.append(Served(n, time.monotonic(), time.time_ns(), port))
                if answer.delay_s:
                    time.sleep(answer.delay_s)
                if answer.hold is not None:
                    answer.hold.wait(HANG_S)
                self.send_response(answer.status)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                if answer.chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                elif answer.content_length:
                    self.send_header("Content-Length", str(len(answer.body)))
                else:
                    self.send_header("Connection", "close")
                self.end_headers()
                try:
                    if answer.chunked:
                        for i in range(0, len(answer.body), 1000):
                            piece = answer.body[i : i + 1000]
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                        self.wfile.write(b"0\r\n\r\n")
                    elif answer.trickle_s:
                        for i in range(0, len(answer.body), 100):
                            self.wfile.write(answer.body[i : i + 100])
                            time.sleep(answer.trickle_s)
                    else:
                        self.wfile.write(answer.body)
                except (BrokenPipeError, ConnectionResetError):
                    return
                if not answer.content_length or answer.drop_after:
                    self.close_connection = True

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                return

        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}/metrics"
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        self._httpd.serve_forever(poll_interval=0.05)

    def __enter__(self) -> MetricsServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@contextmanager
def metrics_server(reply: Callable[[int], Reply]) -> Iterator[MetricsServer]:
    with MetricsServer(reply) as server:
        yield server


@contextmanager
def killed_at_exit(process: subprocess.Popen[Any]) -> Iterator[subprocess.Popen[Any]]:
    """A process the test started, killed if a failed test leaves it running (its pipes closed,
    its exit waited for)."""
    with process:
        try:
            yield process
        finally:
            if process.poll() is None:
                process.kill()


def wait_for_capture(
    directory: Path, predicate: Callable[[CaptureReadResult], bool]
) -> CaptureReadResult:
    """Read the capture in ``directory`` until ``predicate`` holds for what is on disk (what the
    writer has flushed), and return that reading."""
    seen: list[CaptureReadResult] = []

    def flushed() -> bool:
        if not directory.is_dir():
            return False
        seen[:] = [read_capture(directory)]
        return predicate(seen[0])

    assert wait_until(flushed, poll_s=0.05), f"never on disk in {directory}"
    return seen[0]
