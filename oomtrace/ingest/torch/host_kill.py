"""Deaths for want of host memory (RAM), read beside the device's: the kernel's OOM killer and
the shell's ``Killed``. Neither is a GPU out-of-memory error, and analysis never makes one of
them (:mod:`oomtrace.analysis.deaths` names host memory as their cause).

* The kernel logs each kill (``mm/oom_kill.c``, ``__oom_kill_process``; ``dmesg``, ``journalctl
  -k``): ``Out of memory: Killed process 576419 (python) total-vm:78521468kB,
  anon-rss:54398260kB, ...``. It is read by the ``pytorch-log`` parser as an ``engine_dead``
  event with the process, its name and its resident anonymous memory
  (https://github.com/deepseek-ai/DeepSeek-VL2/issues/90: a model's shards loaded into RAM).
* A shell reports a child killed by SIGKILL with a line that is only ``Killed`` (bash's word for
  signal 9); most often that is the OOM killer too. The vLLM parser reads it
  (``oomtrace/ingest/vllm/line_patterns.py``) with the detail :data:`SHELL_KILL`.
"""

from __future__ import annotations

from typing import Final

import polars as pl

from oomtrace.units import format_bytes

SHELL_KILL: Final = (
    "the process was killed (SIGKILL, the shell's 'Killed'): most often the kernel's OOM killer, "
    "for want of host memory (RAM), not device memory"
)
KERNEL_KILL: Final = "the kernel's OOM killer killed process"
LINE: Final = r"Out of memory: Killed process \d+ \("
_FIELDS: Final = (
    r"Out of memory: Killed process (?P<pid>\d+) \((?P<name>[^)]*)\)"
    r"(?:.*?\banon-rss:(?P<rss>\d+)kB)?"
)


def host_killed(detail: object) -> bool:
    """Whether an ``engine_dead`` event's detail is a death for want of host memory."""
    return detail == SHELL_KILL or str(detail or "").startswith(KERNEL_KILL)


def events(lines: pl.DataFrame) -> pl.DataFrame:
    """The kernel's kills among ``lines`` (``ts``, ``text``): one ``engine_dead`` event each, with
    the killed process's pid and, in its detail, its name and resident memory."""
    found = (
        lines.with_columns(f=pl.col("text").str.extract_groups(_FIELDS))
        .unnest("f")
        .filter(pl.col("pid").is_not_null())
    )
    if found.height == 0:
        return pl.DataFrame()
    details = [
        f"{KERNEL_KILL} {pid} ({name})"
        + (f" holding {format_bytes(int(rss) * 1024)} of host memory" if rss else "")
        + ": the host's memory (RAM) ran out, not the device's"
        for pid, name, rss in found.select("pid", "name", "rss").rows()  # a kill or two a log
    ]
    return found.select(
        "ts",
        pid=pl.col("pid").cast(pl.Int64),
        kind=pl.lit("engine_dead"),
        detail=pl.Series(details, dtype=pl.String),
    )
