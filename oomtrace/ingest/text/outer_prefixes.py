"""Outer line prefixes that supervisors and launchers add in front of an engine's own log text.

Engine-neutral: any line parser (vLLM, SGLang) calls :func:`strip_prefixes` on a chunk of raw
lines and gets back the engine's message plus what the prefixes said. A parser that reads its
own header anyway can append that header to :data:`OUTER` and read both in one anchored pass
(see :func:`outer_columns`). The prefixes, outermost first, each optional (sources in
``docs/formats/log-prefixes-and-times.md``):

* Google Cloud Logging's Logs Explorer, as copied (GKE): the entry's severity, its RFC 3339
  timestamp (UTC, nanoseconds) and its summary fields, ``INFO 2025-11-19T20:16:36.096501749Z
  [resource.labels.containerName: vllm] `` (https://github.com/vllm-project/vllm/issues/29049);
* journald ``Sep 22 23:46:42 host unit[pid]: `` (``-o short``/``short-precise``) or
  ``2024-09-22T23:46:42+0000 host unit[pid]: `` (``-o short-iso``): names the host; only the ISO
  form carries a full timestamp (the short form has no year and is in the viewer's zone);
* ``kubectl logs --prefix`` ``[pod/name/container] ``;
* ``kubectl logs --timestamps`` / ``docker logs -t``: RFC 3339 with up to nanoseconds (also
  in brackets, as CI runners print it);
* docker-compose ``service  | `` (optionally followed by its own ``-t`` timestamp);
* Slurm ``srun -l`` ``N: `` (the task number);
* Ray and vLLM process prefixes ``(name pid=N[, ip=A]) ``, possibly nested
  (``(MapWorker(MapBatches(X)) pid=1, ip=10.0.0.1) (EngineCore_DP0 pid=2) ``), with or without
  the ANSI colour codes vLLM < 0.12 always wraps them in;
* ANSI colour codes elsewhere in the line are removed too;
* Ray's suffix `` [repeated Nx across cluster]`` (with its one-time advice text): the line
  stands for N similar lines Ray did not print, so ``repeat`` is N (1 otherwise).

``proc`` joins the process-identifying parts (journald pid, compose service, Slurm task, the
process prefixes): the same message at the same second under two different ``proc`` keys is one
record printed by two ranks, which a parser counts once.

Cost: one anchored regex per line (it stops where the prefixes end, so long lines cost no more
than short ones); ANSI removal and the repeat suffix touch only the lines that have them.
"""

from __future__ import annotations

from functools import cache
from typing import Final, Literal

import polars as pl

from oomtrace.schema import TS

PREFIX_COLUMNS: Final = ("message", "outer_ts", "host", "proc", "repeat")

ANSI: Final = r"\x1b\[[0-9;?]*[ -/]*[@-~]"
_COLOUR: Final = r"(?:\x1b\[[0-9;]*m)?"

# Lean sub-patterns on purpose: capture cost grows with the pattern's size (bounded repeats,
# lazy quantifiers), and this one runs on every line.
_TS_ISO: Final = r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9.,]+(?:Z|[+-][0-9:]+)"
# journald: a unit with a [pid] is required so that "Process SpawnProcess-1: " after a kubectl
# timestamp is never taken for a journald host and unit. The host may be cut from a paste and
# the month printed lower-case by the viewer's locale (``jun 18 13:23:17 ollama[22256]: ``,
# https://github.com/ollama/ollama/issues/5113).
_JOURNALD: Final = (
    r"(?:(?P<jd_short>[A-Za-z][a-z]{2} [ 0-9][0-9] [0-9:.]+)|(?P<jd_iso>" + _TS_ISO + r")) "
    r"(?:(?P<host>[^\s\[\]:]+) )?[^\s\[\]:]+\[(?P<unit_pid>[0-9]+)\]: "
)
# Cloud Logging's severities (LogSeverity), then the entry's time and any summary fields shown.
_CLOUD_LOGGING: Final = (
    r"(?:DEFAULT|DEBUG|INFO|NOTICE|WARNING|ERROR|CRITICAL|ALERT|EMERGENCY) "
    r"(?P<gcl_ts>" + _TS_ISO + r") (?:\[[A-Za-z_][\w.]*: [^\]\n]*\] )*"
)
_KUBE_PREFIX: Final = r"\[(?:pod|po)/[^\]\s]+\] "
# (bracketed by CI runners such as Buildkite: ``[2025-12-13T19:54:35Z] ``,
# https://github.com/pytorch/pytorch/issues/170433)
_OUTER_TS: Final = r"\[?(?P<ts>" + _TS_ISO + r")\]? "
_COMPOSE: Final = r"(?P<svc>[A-Za-z0-9][A-Za-z0-9_.-]*) +\| (?:(?P<ts2>" + _TS_ISO + r") )?"
_SLURM: Final = r" *(?P<task>[0-9]+): "
# A process name may itself hold two levels of parentheses (Ray Data actor names); the plain
# form is used when no line of a chunk needs that.
_NAME_NESTED: Final = r"(?:[^()\n\x1b]|\((?:[^()\n]|\([^()\n]*\))*\))*"
_NAME_PLAIN: Final = r"[^()\n\x1b]*"
_PID: Final = r"pid=[0-9]+(?:, ip=[0-9A-Za-z.:\-]+)?\)" + _COLOUR + r" "


def _procs(name: str) -> str:
    return r"(?P<procs>(?:" + _COLOUR + r"\(" + name + _PID + r")+)"


PrefixKind = Literal[
    "cloud_logging", "journald", "kube_prefix", "timestamp", "compose", "slurm", "process", "nested"
]
ALL_KINDS: Final[frozenset[PrefixKind]] = frozenset(
    (
        "cloud_logging",
        "journald",
        "kube_prefix",
        "timestamp",
        "compose",
        "slurm",
        "process",
        "nested",
    )
)
# Where each prefix kind's full time comes from, in the order outer_columns() prefers them.
TIME_SOURCES: Final[tuple[tuple[str, PrefixKind, str], ...]] = (
    ("ts2", "compose", "docker-compose timestamps"),
    ("ts", "timestamp", "kubectl/docker timestamps"),
    ("jd_iso", "journald", "journald timestamps"),
    ("gcl_ts", "cloud_logging", "Cloud Logging timestamps"),
)

# Capture-free tests that tell which kinds a chunk holds (a kind a chunk lacks costs nothing).
_DETECT: Final[dict[PrefixKind, str]] = {
    "cloud_logging": r"^[A-Z]{4,9} [0-9]{4}-[0-9]{2}-[0-9]{2}T",
    "journald": r"^(?:[A-Za-z][a-z]{2} [ 0-9][0-9] [0-9]{2}:|"
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}T\S+ [^\s\[\]:]+ [^\s\[\]:]+\[[0-9]+\]: )",
    "kube_prefix": r"^\[po",
    "timestamp": r"^(?:\[\S+\] )?\[?[0-9]{4}-[0-9]{2}-[0-9]{2}T",
    "compose": r"^(?:\S+ )?[A-Za-z0-9][A-Za-z0-9_.-]* +\| ",
    "slurm": r"^(?:\S+ +\| )? *[0-9]+: ",
    "process": r"pid=[0-9]",
    "nested": r"\([^()\n]*\([^\n]*pid=[0-9]",
}


def detect_kinds(lines: pl.DataFrame, line: str = "line") -> frozenset[PrefixKind]:
    """The outer prefix kinds present in a chunk of lines (tests run side by side)."""
    if lines.height == 0:
        return frozenset()
    found = lines.select(
        **{kind: pl.col(line).str.contains(test).any() for kind, test in _DETECT.items()}
    ).row(0, named=True)
    return frozenset(kind for kind in _DETECT if found[kind])


@cache
def outer_pattern(kinds: frozenset[PrefixKind] = ALL_KINDS) -> str:
    """The outer-prefix pattern (no anchor, every part optional) for the given kinds."""
    parts: list[str] = []
    if "cloud_logging" in kinds:
        parts.append(r"(?:" + _CLOUD_LOGGING + r")?")
    if "journald" in kinds:
        parts.append(r"(?:" + _JOURNALD + r")?")
    if "kube_prefix" in kinds:
        parts.append(r"(?:" + _KUBE_PREFIX + r")?")
    if "timestamp" in kinds:
        parts.append(r"(?:" + _OUTER_TS + r")?")
    if "compose" in kinds:
        parts.append(r"(?:" + _COMPOSE + r")?")
    if "slurm" in kinds:
        parts.append(r"(?:" + _SLURM + r")?")
    if "process" in kinds:
        parts.append(_procs(_NAME_NESTED if "nested" in kinds else _NAME_PLAIN) + "?")
    return "".join(parts)


# Every kind: what a parser uses when it does not detect kinds per chunk.
OUTER: Final = outer_pattern(ALL_KINDS)

REPEATED: Final = (
    r" ?\[repeated ([0-9]+)x across cluster\](?: \(Ray deduplicates logs by default\..*)?$"
)
REPEATED_LITERAL: Final = "x across cluster]"


def strip_prefixes(frame: pl.DataFrame, line: str = "line") -> pl.DataFrame:
    """``frame`` with :data:`PREFIX_COLUMNS` added: the engine's ``message`` (prefixes, ANSI
    codes and Ray's repeat suffix removed), ``outer_ts`` (``Datetime("ns", "UTC")``, from a
    kubectl, docker or journald ISO timestamp), ``host`` (journald), ``proc`` (process key, null
    when no prefix names a process) and ``repeat`` (``Int32``: lines this one stands for)."""
    text = without_ansi(frame.get_column(line))
    parts = pl.col("_p")
    out = frame.with_columns(text.alias("message"))
    kinds = detect_kinds(out, "message")
    out = (
        out.with_columns(
            _p=pl.col("message").str.extract_groups("^(?P<outer>" + outer_pattern(kinds) + ")")
        )
        .with_columns(
            pl.col("message").str.slice(parts.struct.field("outer").str.len_chars()),
            **outer_columns(parts, kinds),
        )
        .drop("_p")
    )
    return out.with_columns(*repeat_columns(pl.col("message")))


def outer_columns(parts: pl.Expr, kinds: frozenset[PrefixKind] = ALL_KINDS) -> dict[str, pl.Expr]:
    """``outer_ts``, ``host`` and ``proc`` from a struct holding the groups of
    :func:`outer_pattern` for ``kinds``. ``proc`` keeps any colour codes: it is a key only."""
    field = parts.struct.field
    keys = [
        field(name)
        for name, kind in (
            ("unit_pid", "journald"),
            ("svc", "compose"),
            ("task", "slurm"),
            ("procs", "process"),
        )
        if kind in kinds
    ]
    stamps = [field(name) for name, kind, _ in TIME_SOURCES if kind in kinds]
    key = (
        pl.concat_str(keys, separator="|", ignore_nulls=True).str.strip_chars_end(" ")
        if keys
        else pl.lit(None, pl.String)
    )
    return {
        "outer_ts": parse_iso(pl.coalesce(stamps)) if stamps else pl.lit(None, TS),
        "host": field("host") if "journald" in kinds else pl.lit(None, pl.String),
        "proc": pl.when(key.str.len_bytes() > 0).then(key).otherwise(None),
    }


def time_sources(lines: pl.Series) -> dict[str, int]:
    """Which outer prefix gave the full time of each of ``lines`` (by the name a note uses, such
    as ``Cloud Logging timestamps``), with how many lines each gave; lines with none are left
    out. Meant for a sample of a chunk's timed lines (one match per line)."""
    groups = without_ansi(lines).str.extract_groups("^(?P<outer>" + OUTER + ")")
    field = pl.col("_p").struct.field
    named = pl.lit(None, pl.String)
    for group, _, name in reversed(TIME_SOURCES):
        named = pl.when(field(group).is_not_null()).then(pl.lit(name)).otherwise(named)
    counted = pl.DataFrame({"_p": groups}).select(named.alias("source")).drop_nulls()
    return {str(k): int(n) for k, n in counted.group_by("source").len().iter_rows()}


def repeat_columns(message: pl.Expr) -> tuple[pl.Expr, pl.Expr]:
    """``message`` without Ray's ``[repeated Nx across cluster]`` suffix, and ``repeat``."""
    has = message.str.contains(REPEATED_LITERAL, literal=True)
    return (
        pl.when(has).then(message.str.replace(REPEATED, "")).otherwise(message).alias("message"),
        pl.when(has)
        .then(message.str.extract(REPEATED, 1).cast(pl.Int32, strict=False))
        .otherwise(None)
        .fill_null(1)
        .alias("repeat"),
    )


def parse_iso(text: pl.Expr) -> pl.Expr:
    """RFC 3339 / ISO 8601 text with a zone (``Z``, ``+02:00``, ``+0200``), up to nanoseconds,
    as ``Datetime("ns", "UTC")``; null where it does not parse."""
    return (
        text.str.replace(",", ".", literal=True)
        .str.strptime(TS, "%Y-%m-%dT%H:%M:%S%.f%#z", strict=False)
        .dt.convert_time_zone("UTC")
    )


def without_ansi(lines: pl.Series) -> pl.Series:
    """``lines`` with ANSI escape sequences removed; only lines that hold one are rewritten."""
    has = lines.str.contains("\x1b", literal=True)
    if not has.any():
        return lines
    idx = has.arg_true()
    return lines.scatter(idx, lines.gather(idx).str.replace_all(ANSI, ""))
