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
* Ray (the engine's workers as Ray actors) says so in its own words (ray-project/ray,
  ``src/ray/raylet/node_manager.cc``: ``CreateOomKillMessageDetails`` and
  ``HandleClientConnectionError``): its memory monitor's kill,
  ``Task was killed due to the node running low on memory.`` then ``Memory on the node (IP: A,
  ID: N) where the task (actor ID: X, name=N, pid=P, memory used=U GB) was running was A GB / B GB
  (f), which exceeds the memory usage threshold of T`` (GB = 10^9 bytes; ``task``, ``actor`` or
  ``lease``), and a worker lost with no word (``Worker unexpectedly exits with a connection error
  code 2. ... (1) The process is killed by SIGKILL by OOM killer due to high memory usage.``,
  https://github.com/vllm-project/vllm/issues/586). Both are read by the ``pytorch-log`` parser
  as ``engine_dead`` events.
"""

from __future__ import annotations

from typing import Final

import polars as pl

from oomtrace.units import format_bytes, parse_bytes

SHELL_KILL: Final = (
    "the process was killed (SIGKILL, the shell's 'Killed'): most often the kernel's OOM killer, "
    "for want of host memory (RAM), not device memory"
)
KERNEL_KILL: Final = "the kernel's OOM killer killed process"
RAY_MONITOR_KILL: Final = "Ray's memory monitor killed"
RAY_WORKER_LOST: Final = "a Ray worker died with no word"
# The node's IP and the task's own figures are left out in some prints ("Memory on the node was
# 60.81GB / 61.36GB, which exceeds ..."), and write-ups quote the lost worker's first cause as
# "the process was killed by the OOM killer due to high memory usage".
_RAY_MONITOR: Final = r"Memory on the node (?:\(IP: [^)]*\) )?(?:where the \w+ \("
_RAY_SIGKILL: Final = r"killed by (?:SIGKILL by )?(?:the )?OOM killer due to high memory usage"
CONTAINER_KILL: Final = "the container's main process was killed"
CONTAINER_KILL_DETAIL: Final = (
    f"{CONTAINER_KILL} (SIGKILL: bash's 'Killed', exit code 137 or OOMKilled): most often for "
    "want of host or container memory (RAM, shared memory /dev/shm, the container's memory "
    "limit), not device memory; `dmesg` or `docker inspect` (OOMKilled) says which"
)
# bash's report of a script's job killed by SIGKILL ("./entrypoint.sh: line 28:     7 Killed
# LD_LIBRARY_PATH=... /app/bin/scalellm ...": the script, its line, the job's pid, the word),
# and Docker Compose's "NAME exited with code 137" (128 + 9: SIGKILL): a container killed at its
# memory limit, or by the kernel's OOM killer (https://github.com/vectorch-ai/ScaleLLM/issues/38:
# fixed with a larger shm_size); Kubernetes says "OOMKilled" (its kubelet's reason).
_JOB_KILL: Final = r"line \d+:\s+(?P<job_pid>\d+) Killed\s+\S"
_EXIT_137: Final = r"\bexited with code 137\b|\bReason:\s+OOMKilled\b"
LINE: Final = (
    _JOB_KILL
    + "|"
    + _EXIT_137
    + r"|Out of memory: Killed process \d+ \(|"
    + _RAY_MONITOR
    + r"|was \d)|killed due to the node running low on memory|"
    + _RAY_SIGKILL
)
_GB: Final = r"([0-9.]+) ?GB"
_RAY_FIGURES: Final = (
    _RAY_MONITOR
    + r"(?:\w+ ID: [^,]*, )?name=(?P<ray_name>[^,]*), pid=(?P<ray_pid>\d+), memory used="
    + _GB.replace("(", "(?P<ray_rss>", 1)
    + r"\) was running )?was "
    + _GB.replace("(", "(?P<ray_used>", 1)
    + " / "
    + _GB.replace("(", "(?P<ray_total>", 1)
)
_RAY_LOST: Final = r"(?:Worker PID: (?P<lost_pid>\d+) .*?)?" + _RAY_SIGKILL
_FIELDS: Final = (
    r"Out of memory: Killed process (?P<pid>\d+) \((?P<name>[^)]*)\)"
    r"(?:.*?\banon-rss:(?P<rss>\d+)kB)?"
)


def host_killed(detail: object) -> bool:
    """Whether an ``engine_dead`` event's detail is a death for want of host memory."""
    return detail == SHELL_KILL or str(detail or "").startswith(
        (KERNEL_KILL, RAY_MONITOR_KILL, RAY_WORKER_LOST, CONTAINER_KILL)
    )


def _gb(text: str) -> str:
    """Ray's ``GB`` (10^9 bytes, two decimals) as a figure in GiB."""
    return format_bytes(parse_bytes(f"{text} GB"))


def events(lines: pl.DataFrame) -> pl.DataFrame:
    """The host-memory kills among ``lines`` (``ts``, ``text``): the kernel's and Ray's."""
    found = [
        f
        for f in (_kernel(lines), _ray_monitor(lines), _ray_lost(lines), _container(lines))
        if f.height
    ]
    return pl.concat(found, how="vertical_relaxed") if found else pl.DataFrame()


def _kernel(lines: pl.DataFrame) -> pl.DataFrame:
    """The kernel's kills: one ``engine_dead`` event each, with the killed process's pid and, in
    its detail, its name and resident memory."""
    found = _matched(lines, _FIELDS, "pid")
    details = [
        f"{KERNEL_KILL} {pid} ({name})"
        + (f" holding {format_bytes(int(rss) * 1024)} of host memory" if rss else "")
        + ": the host's memory (RAM) ran out, not the device's"
        for pid, name, rss in found.select("pid", "name", "rss").rows()  # a kill or two a log
    ]
    return _deaths(found, "pid", details)


def _matched(lines: pl.DataFrame, pattern: str, needed: str) -> pl.DataFrame:
    """The lines ``pattern`` matches, with its groups as columns (``needed`` set on each)."""
    return (
        lines.with_columns(f=pl.col("text").str.extract_groups(pattern))
        .unnest("f")
        .filter(pl.col(needed).is_not_null())
    )


def _deaths(found: pl.DataFrame, pid: str, details: list[str]) -> pl.DataFrame:
    """One ``engine_dead`` event per row of ``found``, with its pid and its detail."""
    if found.height == 0:
        return pl.DataFrame()
    return found.select(
        "ts",
        pid=pl.col(pid).cast(pl.Int64),
        kind=pl.lit("engine_dead"),
        detail=pl.Series(details, dtype=pl.String),
    )


def _ray_monitor(lines: pl.DataFrame) -> pl.DataFrame:
    """Ray's memory monitor's kills: the process (when Ray names it), its memory and the node's."""
    found = _matched(lines, _RAY_FIGURES, "ray_total")
    details = [
        f"{RAY_MONITOR_KILL} "
        + (f"process {pid} ({name}) holding {_gb(rss)} of host memory" if pid else "a worker")
        + f": the node's memory (RAM) was at {_gb(used)} of {_gb(total)}, over Ray's threshold; "
        "the host's memory ran out, not the device's"
        for pid, name, rss, used, total in found.select(
            "ray_pid", "ray_name", "ray_rss", "ray_used", "ray_total"
        ).rows()  # a kill or two a log
    ]
    return _deaths(found, "ray_pid", details)


def _ray_lost(lines: pl.DataFrame) -> pl.DataFrame:
    """A Ray worker lost without a word: Ray names the OOM killer first among the causes."""
    found = lines.filter(pl.col("text").str.contains(_RAY_SIGKILL)).with_columns(
        pid=pl.col("text").str.extract(_RAY_LOST, 1).cast(pl.Int64)
    )
    return found.select(
        "ts",
        "pid",
        kind=pl.lit("engine_dead"),
        detail=pl.lit(
            f"{RAY_WORKER_LOST} (its connection dropped); Ray names the OOM killer's SIGKILL for "
            "want of host memory (RAM) first among the causes, not device memory; `dmesg` says "
            "whether it was ('Out of memory: Killed process N')"
        ),
    )


def _container(lines: pl.DataFrame) -> pl.DataFrame:
    """A script's job or a container killed by SIGKILL (bash's ``Killed``, exit code 137,
    Kubernetes' ``OOMKilled``): one death, the first such line (Compose's exit line follows
    bash's report of the same kill)."""
    found = lines.filter(pl.col("text").str.contains(f"{_JOB_KILL}|{_EXIT_137}")).head(1)
    return found.select(
        "ts",
        pid=pl.col("text").str.extract(_JOB_KILL, 1).cast(pl.Int64),
        kind=pl.lit("engine_dead"),
        detail=pl.lit(CONTAINER_KILL_DETAIL),
    )
