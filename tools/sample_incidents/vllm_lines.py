"""vLLM's log as the server writes it: process prefix, level, ``MM-DD HH:MM:SS`` local time,
``[file:line]``, message; multi-line messages repeat the prefix on every line and join them with
``\\r\\n`` (vLLM's ``NewLineFormatter``); an optional outer prefix (docker compose ``-t``, journald)
in front of every physical line. Formats: vLLM's ``vllm/logger.py`` and
``vllm/logging_utils/formatter.py`` (``docs/formats/vllm.md``,
``docs/formats/log-prefixes-and-times.md``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

CYAN = "\x1b[1;36m"
RESET = "\x1b[0;0m"

Outer = Callable[[datetime], str]


@dataclass(order=True)
class _Entry:
    ts: datetime
    seq: int
    lines: list[str] = field(compare=False)


class VllmLog:
    """Collects records in any order and prints them in time order (ties: insertion order).

    ``colour`` wraps the process prefix in the ANSI codes vLLM < 0.12 always writes; ``outer``
    gives the supervisor's prefix for a physical line received at a time."""

    def __init__(
        self,
        *,
        tz: ZoneInfo | None = None,
        colour: bool = False,
        outer: Outer | None = None,
        delay: Callable[[], timedelta] | None = None,
        debug: bool = True,
        bracket: bool = True,
    ) -> None:
        self.tz = tz or ZoneInfo("UTC")
        self.debug = debug  # False: the server logs at INFO, its DEBUG records are not printed
        self.bracket = "[" if bracket else ""  # vLLM < 0.7 prints ``file.py:line]`` without "["
        self.colour = colour
        self.outer = outer
        self.delay = delay or (lambda: timedelta(0))
        self._entries: list[_Entry] = []

    def _proc(self, proc: str | None) -> str:
        if not proc:
            return ""
        return f"{CYAN}({proc}){RESET} " if self.colour else f"({proc}) "

    def record(self, ts: datetime, proc: str | None, level: str, where: str, message: str) -> None:
        """One logging record; ``where`` is ``file.py:line``."""
        if level == "DEBUG" and not self.debug:
            return
        clock = ts.astimezone(self.tz).strftime("%m-%d %H:%M:%S")
        head = f"{self._proc(proc)}{level} {clock} {self.bracket}{where}] "
        parts = message.split("\n")
        body = "\r\n".join(head + part for part in parts)
        self._add(ts, body.split("\n"))

    def raw(self, ts: datetime, proc: str | None, text: str) -> None:
        """A line a process printed without vLLM's logging (uvicorn access lines, tracebacks
        printed by Python itself); still decorated with the process prefix."""
        self._add(ts, [self._proc(proc) + line for line in text.split("\n")])

    def _add(self, ts: datetime, lines: list[str]) -> None:
        self._entries.append(_Entry(ts, len(self._entries), lines))

    def render(self) -> str:
        out: list[str] = []
        for entry in sorted(self._entries):
            for line in entry.lines:
                prefix = self.outer(entry.ts + self.delay()) if self.outer else ""
                out.append(prefix + line)
        return "\n".join(out) + "\n"

    def timed_lines(self) -> list[tuple[datetime, str]]:
        """Every physical line with the instant it was written (for a collector's log tail)."""
        out: list[tuple[datetime, str]] = []
        for entry in sorted(self._entries):
            out.extend((entry.ts, line) for line in entry.lines)
        return out


def compose_prefix(service: str, width: int) -> Outer:
    """``docker compose logs -t``: the service, padded, then the daemon's RFC 3339 time."""

    def prefix(received: datetime) -> str:
        ts = received.astimezone(UTC)
        stamp = ts.strftime("%Y-%m-%dT%H:%M:%S") + f".{ts.microsecond:06d}{received_ns_tail(ts)}Z"
        return f"{service:<{width}} | {stamp} "

    return prefix


def received_ns_tail(ts: datetime) -> str:
    """Three more digits for nanoseconds (docker prints nine): derived from the microseconds so
    the output stays a pure function of the time."""
    return f"{(ts.microsecond * 7919) % 1000:03d}"


def journald_prefix(host: str, unit: str, pid: int, tz: ZoneInfo) -> Outer:
    """``journalctl`` short output: ``Mar 14 09:12:03 host unit[pid]: `` in the viewer's zone."""

    def prefix(received: datetime) -> str:
        local = received.astimezone(tz)
        return f"{local:%b} {local.day:2d} {local:%H:%M:%S} {host} {unit}[{pid}]: "

    return prefix


# --- messages ---------------------------------------------------------------------------------


def sampling_params(
    *,
    max_tokens: int,
    temperature: float,
    top_p: float = 1.0,
    prompt_logprobs: int | None = None,
    version: tuple[int, int] = (0, 12),
) -> str:
    """``SamplingParams.__repr__`` (0.10.2 layout; ``structured_outputs`` from 0.12)."""
    guided = "structured_outputs" if version >= (0, 12) else "guided_decoding"
    return (
        f"SamplingParams(n=1, presence_penalty=0.0, frequency_penalty=0.0, "
        f"repetition_penalty=1.0, temperature={temperature}, top_p={top_p}, top_k=0, "
        f"min_p=0.0, seed=None, stop=[], stop_token_ids=[], bad_words=[], "
        f"include_stop_str_in_output=False, ignore_eos=False, max_tokens={max_tokens}, "
        f"min_tokens=0, logprobs=None, prompt_logprobs={prompt_logprobs}, "
        f"skip_special_tokens=True, spaces_between_special_tokens=True, "
        f"truncate_prompt_tokens=None, {guided}=None, extra_args=None)"
    )


def stats_message(
    *,
    prompt_tps: float,
    gen_tps: float,
    running: int,
    waiting: int,
    kv_ratio: float,
    preemptions: int | None = None,
    version: tuple[int, int] = (0, 12),
) -> str:
    """The periodic stats line (V1 ``Engine 000:``; parts from 0.12, one format before)."""
    parts = [
        f"Avg prompt throughput: {prompt_tps:.1f} tokens/s",
        f"Avg generation throughput: {gen_tps:.1f} tokens/s",
        f"Running: {running} reqs",
        f"Waiting: {waiting} reqs",
    ]
    if version >= (0, 12) and preemptions:
        parts.append(f"Preemptions: {preemptions}")
    parts += [f"GPU KV cache usage: {kv_ratio * 100:.1f}%", "Prefix cache hit rate: 0.0%"]
    return "Engine 000: " + ", ".join(parts)


def kv_cache_lines(
    log: VllmLog,
    ts: datetime,
    proc: str,
    *,
    kv_bytes: int,
    tokens: int,
    max_model_len: int,
    utils_lines: tuple[int, int],
) -> None:
    """vLLM V1's three start-up statements of the KV cache: the memory left for it
    (``gpu_worker.py``), then, 0.1 s later, its size in tokens and the concurrency that gives at
    the max model len (``kv_cache_utils.py`` at ``utils_lines``, which move between versions)."""
    size_line, concurrency_line = utils_lines
    log.record(
        ts, proc, "INFO", "gpu_worker.py:298", f"Available KV cache memory: {gib(kv_bytes)} GiB"
    )
    later = ts + timedelta(milliseconds=100)
    log.record(
        later,
        proc,
        "INFO",
        f"kv_cache_utils.py:{size_line}",
        f"GPU KV cache size: {tokens:,} tokens",
    )
    log.record(
        later, proc, "INFO", f"kv_cache_utils.py:{concurrency_line}",
        f"Maximum concurrency for {max_model_len:,} tokens per request: "
        f"{tokens / max_model_len:.2f}x",
    )  # fmt: skip


def gib(value_bytes: int | float, digits: int = 2) -> str:
    return f"{value_bytes / (1 << 30):.{digits}f}"


def at(base: datetime, seconds: float) -> datetime:
    return base + timedelta(microseconds=round(seconds * 1e6))
