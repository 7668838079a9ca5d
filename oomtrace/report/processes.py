"""The processes on the device, by pid and name, as the foreign-memory chart and tables show them.

A pid alone says little to whoever has to stop the process; the report shows the name beside it
wherever a source gave one. Names come from the trace's ``process`` events (nvidia-smi's table
and ``--query-compute-apps``, one per process with the name in ``detail``), joined by pid to the
per-process samples (PyTorch's ``Process N has`` clauses give pids only, and take their names
from the same events); the analysis' own name for a process it blamed wins where both exist.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import polars as pl

from oomtrace.isotime import iso_time
from oomtrace.report import palette
from oomtrace.report.cause_data import check_figures
from oomtrace.report.document import Table
from oomtrace.report.records import table_from_records
from oomtrace.schema import TS
from oomtrace.units import format_bytes

# The columns of the table of other processes, in this order.
PROCESS_ORDER = ("pid", "name", "held_bytes", "growth_bytes", "peak_share", "basis")


def names_from_events(events: pl.DataFrame) -> dict[int, str]:
    """``pid -> name`` from the ``process`` events (the latest name a pid was seen with: a pid
    reused by a later process is named as that one)."""
    if events.is_empty() or not {"kind", "pid", "detail"} <= set(events.columns):
        return {}
    named = (
        events.filter(
            (pl.col("kind") == "process")
            & pl.col("pid").is_not_null()
            & (pl.col("detail").fill_null("").str.strip_chars() != "")
        )
        .sort("ts", nulls_last=False)
        .group_by("pid")
        .agg(pl.col("detail").last().str.strip_chars())
    )
    return dict(zip(named["pid"].to_list(), named["detail"].to_list(), strict=True))


def foreign_pids(incident: Mapping[str, Any]) -> dict[int, str]:
    """``pid -> name`` (empty when unnamed) of the other processes the analysis blamed (its
    ``processes``, and the deciding check's ``pid`` and ``process_name``)."""
    names: dict[int, str] = {}
    for process in incident.get("processes") or []:
        if isinstance(process, Mapping) and isinstance(process.get("pid"), int):
            names[process["pid"]] = str(process.get("name") or "")
    figures = check_figures(incident)
    if isinstance(figures.get("pid"), int):
        names.setdefault(figures["pid"], "")
        if figures.get("process_name"):
            names[figures["pid"]] = str(figures["process_name"])
    return names


def all_names(incident: Mapping[str, Any] | None, events: pl.DataFrame) -> dict[int, str]:
    """Every name known for a pid: the trace's, overridden by the analysis' where it names one."""
    names = names_from_events(events)
    for pid, name in foreign_pids(incident or {}).items():
        if name:
            names[pid] = name
    return names


def label(pid: int, names: Mapping[int, str]) -> str:
    """``51377 (/home/me/.venv/bin/python)``, or ``51377`` when no source named it."""
    name = names.get(pid)
    return f"{pid} ({name})" if name else str(pid)


def process_use(
    processes: pl.DataFrame, foreign: Mapping[int, str], names: Mapping[int, str]
) -> pl.DataFrame:
    """Per-process memory labelled for the chart (``ts, process, value``): the engine's own
    processes (those the analysis does not blame) first, then each other process, each with its
    pid and, where a source gave one, its name."""
    if processes.is_empty():
        return pl.DataFrame(schema={"ts": TS, "process": pl.String(), "value": pl.Float64()})
    pids = processes["pid"].unique().sort().to_list()
    labels = {
        pid: f"{'other' if pid in foreign else 'engine'}: pid {label(pid, names)}" for pid in pids
    }
    ranked = sorted(pids, key=lambda p: (p in foreign, p))
    frame = processes.with_columns(
        pl.col("pid").replace_strict(labels, return_dtype=pl.String).alias("process"),
        pl.col("pid").replace_strict({p: i for i, p in enumerate(ranked)}).alias("_rank"),
    )
    return frame.sort("_rank", "ts").select("ts", "process", "value")


def held_text(incident: Mapping[str, Any], names: Mapping[int, str]) -> str:
    """What each other process held at the peak, one sentence each."""
    shown = []
    for process in incident.get("processes") or []:
        if not isinstance(process, Mapping) or not isinstance(process.get("pid"), int):
            continue
        grew = process.get("growth_bytes")
        line = (
            f"Process {label(process['pid'], names)} held "
            f"{format_bytes(int(process.get('bytes') or 0))} at the peak"
        )
        if isinstance(grew, int) and grew > 0:
            line += f", {format_bytes(grew)} more than at the start of the analysis window"
        shown.append(line + ".")
    return " ".join(shown)


def process_table(incident: Mapping[str, Any], names: Mapping[int, str]) -> Table:
    """The other processes the analysis found at the peak, each with its name."""
    rows = [
        {
            "pid": p.get("pid"),
            "name": names.get(p.get("pid") or -1),
            "held_bytes": p.get("bytes"),
            "growth_bytes": p.get("growth_bytes"),
            "peak_share": p.get("share"),
            "basis": p.get("basis"),
        }
        for p in incident.get("processes") or []
        if isinstance(p, Mapping)
    ]
    if not rows:
        return table_from_records([], note="The analysis listed no other process by pid.")
    if any(r["name"] for r in rows):
        return table_from_records(rows, order=PROCESS_ORDER)
    # no input named them: the column would say n/a on every row; say where a name would come from
    note = (
        "No input names these processes: nvidia-smi's process table or --query-compute-apps, "
        "captured beside the log, would."
    )
    order = tuple(k for k in PROCESS_ORDER if k != "name")
    return table_from_records(rows, order=order, drop=("name",), note=note)


def process_snapshot(frame: pl.DataFrame, total: int | None, *, title: str) -> dict[str, Any]:
    """Device memory per process at the one moment a source stated it (``ts, process, value``;
    the engine first), as one stacked bar against the device's total."""
    at = frame["ts"].max()
    names = list(dict.fromkeys(frame["process"].to_list()))
    bars = frame.select(
        pl.lit(f"at {iso_time(at)}" if isinstance(at, datetime) else "at the failure").alias("bar"),
        pl.col("process").alias("part"),
        "value",
        pl.col("process").replace_strict({n: i for i, n in enumerate(names)}).alias("order"),
    )
    limits = pl.DataFrame(
        [(f"device total {format_bytes(total)}", float(total), False)] if total else [],
        schema={"label": pl.String(), "value": pl.Float64(), "dashed": pl.Boolean()},
        orient="row",
    )
    from oomtrace.report.cause_charts import fit_chart  # noqa: PLC0415 - Altair: only to draw

    return fit_chart(bars, limits, title=title, colours={names[0]: palette.BLUE})
