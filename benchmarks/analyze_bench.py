"""Pool-level computation on a day of data: oomtrace against the same computation written plainly
in DuckDB SQL and in pandas, and against merely reading the inputs (the floor).

The computation: from the request lifecycle (two million requests) to the modelled KV pool
(resident requests, stored tokens, KV bytes in whole blocks, linear growth between stated counts)
at every 100 Hz memory sample time. All three do it the same way (a sweep: per-knot level and
slope deltas, cumulative sums, an as-of join at the sample times); each runs in a fresh process,
reads its inputs with its own reader, and reports its read and compute times; the parent takes
each child's peak resident memory and CPU seconds from the operating system. Results are
cross-checked.

The whole command is measured too: ``oomtrace analyze DIR --json`` in its own process (wall
time from start to exit, CPU seconds, peak memory), beside merely reading every table of the
directory with Polars (the floor for the whole command). With ``--cross-check`` the same trace is
also analysed in one pass, in its own process (what a trace below the windowed path's threshold
gets: every series, the timeline and the sweep of the whole day held), and the benchmark fails
unless both find the same incidents, classes, peaks and culprits.

    python benchmarks/analyze_bench.py                      # full size: 2M requests, 24 h, 100 Hz
    python benchmarks/analyze_bench.py --requests 50000 --hours 0.6   # a smoke run
    python benchmarks/analyze_bench.py --data DIR --whole-only  # the whole command and its floor
    python benchmarks/analyze_bench.py --data DIR --whole-only --cross-check  # and the single pass
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BYTES_PER_BLOCK = 2 * 2**20
BLOCK = 16
RANK_SQL = (
    "CASE event WHEN 'arrived' THEN 0 WHEN 'admitted' THEN 1 WHEN 'resumed' THEN 1 "
    "WHEN 'first_token' THEN 2 WHEN 'progress' THEN 3 WHEN 'preempted' THEN 4 ELSE 5 END"
)
CONTENDERS = ("read", "oomtrace", "duckdb", "pandas")
WHOLE = ("read all",)


def _result(
    name: str, read_s: float, compute_s: float, resident: Any, tokens: Any, kv: Any
) -> dict[str, Any]:
    return {
        "name": name,
        "read_s": read_s,
        "compute_s": compute_s,
        "rows": len(resident),
        "resident_sum": int(sum(int(x) for x in resident)),
        "tokens_sum": int(sum(int(x) for x in tokens)),
        "kv_sum": int(sum(int(x) for x in kv)),
    }


def run_read(data: Path) -> dict[str, Any]:
    """The floor: read the same inputs the others read (Polars' Parquet reader)."""
    import polars as pl

    started = time.perf_counter()
    requests = pl.read_parquet(data / "requests.parquet")
    times = pl.read_parquet(data / "samples.parquet", columns=["ts", "node", "metric"]).filter(
        pl.col("metric") == "device_used_bytes"
    )
    read_s = time.perf_counter() - started
    return {
        "name": "read",
        "read_s": read_s,
        "compute_s": 0.0,
        "rows": times.height + requests.height,
    }


def run_oomtrace(data: Path) -> dict[str, Any]:
    import polars as pl

    from oomtrace.analysis.kvmodel import kv_model
    from oomtrace.analysis.pool import pool_at, pool_breakpoints
    from oomtrace.analysis.timeline import build_timeline
    from oomtrace.schema import TS, empty
    from oomtrace.trace import Manifest

    started = time.perf_counter()
    # oomtrace's own reader: the lifecycle is scanned, read a column at a time while the
    # timeline is built (so its reading counts in the compute time here)
    requests = pl.scan_parquet(data / "requests.parquet")
    times = (  # the filter runs in the reader: only the 100 Hz series' rows are kept
        pl.scan_parquet(data / "samples.parquet")
        .filter(pl.col("metric") == "device_used_bytes")
        .select("node", "ts")
        .collect()
    )
    manifest = Manifest.from_json(json.loads((data / "manifest.json").read_text()))
    read_s = time.perf_counter() - started
    started = time.perf_counter()
    kv = kv_model(manifest, empty("samples"))
    end = times["ts"].max()
    timeline = build_timeline(
        requests,
        kv,
        trace_end={"node-a": end},  # type: ignore[dict-item]
        resets=pl.DataFrame(schema={"node": pl.String, "ts": TS}),
    )
    pool = pool_at(pool_breakpoints(timeline), times, has_bytes=True)
    compute_s = time.perf_counter() - started
    return _result(
        "oomtrace",
        read_s,
        compute_s,
        pool["resident_requests"],
        pool["stored_tokens"],
        pool["kv_bytes"],
    )


DUCKDB_SQL = f"""
WITH ev AS (
  SELECT node, request_id, ts, event, output_tokens, {RANK_SQL} AS rank,
         max(prompt_tokens) OVER (PARTITION BY node, request_id) AS prompt
  FROM requests
),
marked AS (
  SELECT *,
    sum(CASE WHEN event IN ('admitted', 'resumed') THEN 1 ELSE 0 END)
      OVER (PARTITION BY node, request_id ORDER BY ts, rank ROWS UNBOUNDED PRECEDING) AS seg,
    last_value(output_tokens IGNORE NULLS)
      OVER (PARTITION BY node, request_id ORDER BY ts, rank
            ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS out_before
  FROM ev
),
knots AS (
  SELECT node, request_id, seg, ts, rank,
    (epoch_ns(ts) - (SELECT min(epoch_ns(ts)) FROM requests)) / 1e9 AS t,
    CAST(coalesce(prompt, 0)
         + CASE WHEN event IN ('admitted', 'resumed') THEN coalesce(out_before, 0)
                ELSE output_tokens END AS DOUBLE) AS tokens
  FROM marked
  WHERE event <> 'arrived' AND NOT (event = 'progress' AND output_tokens IS NULL)
),
valued AS (
  SELECT *, CAST(ceil(tokens / {BLOCK}) * {BYTES_PER_BLOCK} AS DOUBLE) AS bytes,
    lead(t) OVER w AS t_next, lead(tokens) OVER w AS tok_next,
    row_number() OVER w AS k, count(*) OVER (PARTITION BY node, request_id, seg) AS n
  FROM knots
  WINDOW w AS (PARTITION BY node, request_id, seg ORDER BY ts, rank)
),
sloped AS (
  SELECT *, lead(bytes) OVER w AS by_next,
    CASE WHEN k = n OR t_next <= t THEN 0 ELSE (tok_next - tokens) / (t_next - t) END AS s_tok,
    CASE WHEN k = n OR t_next <= t THEN 0
         ELSE (lead(bytes) OVER w - bytes) / (t_next - t) END AS s_by
  FROM valued
  WINDOW w AS (PARTITION BY node, request_id, seg ORDER BY ts, rank)
),
deltas AS (
  SELECT node, ts, t,
    (CASE WHEN k = n THEN 0 ELSE tokens END)
      - (CASE WHEN k = 1 THEN 0
              ELSE lag(tokens) OVER w + lag(s_tok) OVER w * (t - lag(t) OVER w) END) AS dl_tok,
    s_tok - (CASE WHEN k = 1 THEN 0 ELSE lag(s_tok) OVER w END) AS ds_tok,
    (CASE WHEN k = n THEN 0 ELSE bytes END)
      - (CASE WHEN k = 1 THEN 0
              ELSE lag(bytes) OVER w + lag(s_by) OVER w * (t - lag(t) OVER w) END) AS dl_by,
    s_by - (CASE WHEN k = 1 THEN 0 ELSE lag(s_by) OVER w END) AS ds_by,
    (CASE WHEN k = 1 THEN 1 ELSE 0 END) - (CASE WHEN k = n THEN 1 ELSE 0 END) AS d_res
  FROM sloped
  WINDOW w AS (PARTITION BY node, request_id, seg ORDER BY ts, rank)
),
per_ts AS (
  SELECT node, ts, any_value(t) AS t, sum(dl_tok) AS dl_tok, sum(ds_tok) AS ds_tok,
         sum(dl_by) AS dl_by, sum(ds_by) AS ds_by, sum(d_res) AS d_res
  FROM deltas GROUP BY node, ts
),
state AS (
  SELECT node, ts, t,
    sum(dl_tok) OVER c AS l_tok, sum(ds_tok) OVER c AS s_tok, sum(ds_tok * t) OVER c AS c_tok,
    sum(dl_by) OVER c AS l_by, sum(ds_by) OVER c AS s_by, sum(ds_by * t) OVER c AS c_by,
    sum(d_res) OVER c AS res
  FROM per_ts
  WINDOW c AS (PARTITION BY node ORDER BY ts ROWS UNBOUNDED PRECEDING)
)
SELECT ts, coalesce(round(res), 0) AS resident,
  coalesce(round(greatest(l_tok + s_tok * at_t - c_tok, 0)), 0) AS tokens,
  coalesce(round(greatest(l_by + s_by * at_t - c_by, 0)), 0) AS kv
FROM (
  SELECT s.ts, st.*, st.t + (epoch_ns(s.ts) - epoch_ns(st.ts)) / 1e9 AS at_t
  FROM times s ASOF LEFT JOIN state st ON s.node = st.node AND s.ts >= st.ts
)
"""


def run_duckdb(data: Path) -> dict[str, Any]:
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads TO 2")
    started = time.perf_counter()
    con.execute(
        f"CREATE TABLE requests AS SELECT * FROM read_parquet('{data / 'requests.parquet'}')"
    )
    con.execute(
        "CREATE TABLE times AS SELECT node, ts FROM "
        f"read_parquet('{data / 'samples.parquet'}') WHERE metric = 'device_used_bytes'"
    )
    read_s = time.perf_counter() - started
    started = time.perf_counter()
    result = con.execute(
        f"SELECT count(*), sum(resident), sum(tokens), sum(kv) FROM ({DUCKDB_SQL})"
    ).fetchone()
    compute_s = time.perf_counter() - started
    assert result is not None
    rows, resident, tokens, kv = result
    return {
        "name": "duckdb",
        "read_s": read_s,
        "compute_s": compute_s,
        "rows": int(rows),
        "resident_sum": int(resident),
        "tokens_sum": int(tokens),
        "kv_sum": int(kv),
    }


def run_pandas(data: Path) -> dict[str, Any]:
    import numpy as np
    import pandas as pd

    started = time.perf_counter()
    ev = pd.read_parquet(data / "requests.parquet")
    times = pd.read_parquet(data / "samples.parquet", columns=["ts", "node", "metric"])
    times = times[times["metric"] == "device_used_bytes"][["node", "ts"]]
    read_s = time.perf_counter() - started
    started = time.perf_counter()
    rank = {
        "arrived": 0,
        "admitted": 1,
        "resumed": 1,
        "first_token": 2,
        "progress": 3,
        "preempted": 4,
    }
    ev["rank"] = ev["event"].map(rank).fillna(5)
    ev = ev.sort_values(["node", "request_id", "ts", "rank"], kind="stable")
    by_req = ev.groupby(["node", "request_id"], sort=False)
    ev["prompt"] = by_req["prompt_tokens"].transform("max").fillna(0)
    ev["seg"] = (
        ev["event"]
        .isin(["admitted", "resumed"])
        .astype(int)
        .groupby([ev["node"], ev["request_id"]], sort=False)
        .cumsum()
    )
    ev["out_before"] = (
        by_req["output_tokens"].ffill().groupby([ev["node"], ev["request_id"]], sort=False).shift(1)
    )
    t0 = ev["ts"].min()
    knots = ev[
        (ev["event"] != "arrived") & ~((ev["event"] == "progress") & ev["output_tokens"].isna())
    ].copy()
    opening = knots["event"].isin(["admitted", "resumed"])
    knots["tokens"] = knots["prompt"] + np.where(
        opening, knots["out_before"].fillna(0), knots["output_tokens"]
    ).astype(float)
    knots["t"] = (knots["ts"] - t0).dt.total_seconds()
    knots["bytes"] = np.ceil(knots["tokens"] / BLOCK) * BYTES_PER_BLOCK
    seg = knots.groupby(["node", "request_id", "seg"], sort=False)
    first = seg.cumcount() == 0
    last = seg.cumcount(ascending=False) == 0
    dt_next = seg["t"].shift(-1) - knots["t"]
    dt_prev = knots["t"] - seg["t"].shift(1)
    deltas = pd.DataFrame({"node": knots["node"], "ts": knots["ts"], "t": knots["t"]})
    for q in ("tokens", "bytes"):
        slope = ((seg[q].shift(-1) - knots[q]) / dt_next).where(~last & (dt_next > 0), 0.0)
        prev_slope = slope.groupby(
            [knots["node"], knots["request_id"], knots["seg"]], sort=False
        ).shift(1)
        carried = (seg[q].shift(1) + prev_slope * dt_prev).where(~first, 0.0)
        deltas[f"dl_{q}"] = knots[q].where(~last, 0.0) - carried
        deltas[f"ds_{q}"] = slope - prev_slope.where(~first, 0.0).fillna(0.0)
    deltas["d_res"] = first.astype(int) - last.astype(int)
    per_ts = (
        deltas.groupby(["node", "ts"], sort=True)
        .agg(t=("t", "first"), **{c: (c, "sum") for c in deltas.columns if c.startswith("d")})
        .reset_index()
    )
    grouped = per_ts.groupby("node", sort=False)
    state = pd.DataFrame({"node": per_ts["node"], "ts": per_ts["ts"], "t": per_ts["t"]})
    for q in ("tokens", "bytes"):
        state[f"L_{q}"] = grouped[f"dl_{q}"].cumsum()
        state[f"S_{q}"] = grouped[f"ds_{q}"].cumsum()
        state[f"C_{q}"] = (per_ts[f"ds_{q}"] * per_ts["t"]).groupby(per_ts["node"]).cumsum()
    state["R"] = grouped["d_res"].cumsum()
    merged = pd.merge_asof(
        times.sort_values("ts"),
        state.rename(columns={"ts": "bp_ts"}),
        left_on="ts",
        right_on="bp_ts",
        by="node",
        direction="backward",
    )
    t = merged["t"] + (merged["ts"] - merged["bp_ts"]).dt.total_seconds()
    out = {}
    for q in ("tokens", "bytes"):
        value = merged[f"L_{q}"] + merged[f"S_{q}"] * t - merged[f"C_{q}"]
        out[q] = value.clip(lower=0).round().fillna(0)
    resident = merged["R"].round().fillna(0)
    compute_s = time.perf_counter() - started
    return _result("pandas", read_s, compute_s, resident, out["tokens"], out["bytes"])


def run_read_all(data: Path) -> dict[str, Any]:
    """The floor of the whole command: every table of the directory read whole."""
    import polars as pl

    started = time.perf_counter()
    rows = sum(pl.read_parquet(file).height for file in sorted(data.glob("*.parquet")))
    return {
        "name": "read all",
        "read_s": time.perf_counter() - started,
        "compute_s": 0.0,
        "rows": rows,
    }


def incident_facts(findings: dict[str, Any]) -> list[list[Any]]:
    """What the windowed and the single pass must agree on, per incident of a findings document:
    class, anchor, peak time and bytes, the culprits in order."""
    return [
        [
            i["class"],
            i["anchor"],
            i["peak_ts"],
            i["peak_bytes"],
            [c["request_id"] for c in i["culprits"]],
        ]
        for i in findings["incidents"]
    ]


def run_single_pass(data: Path) -> dict[str, Any]:
    """The analysis of the whole trace in one pass, as a trace below the windowed path's
    threshold is analysed (every table's series, timeline and sweep of the whole day held)."""
    from oomtrace.analysis import AnalyzeOptions, analyze, open_trace
    from oomtrace.analysis.findings import dumps

    started = time.perf_counter()
    findings = analyze(open_trace(data), AnalyzeOptions(windowed_above_rows=2**62))
    facts = incident_facts(json.loads(dumps(findings)))
    return {
        "name": "single pass",
        "read_s": 0.0,
        "compute_s": time.perf_counter() - started,
        "facts": facts,
    }


RUNNERS = {
    "read": run_read,
    "oomtrace": run_oomtrace,
    "duckdb": run_duckdb,
    "pandas": run_pandas,
    "read all": run_read_all,
    "single pass": run_single_pass,
}
COMMAND = "oomtrace analyze"


def _measured(argv: list[str], name: str, stdout: Any = None) -> dict[str, float]:
    """Run ``argv`` in its own process: wall time from start to exit, and the CPU seconds and
    peak resident memory the operating system counted for it (wait4)."""
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=stdout)
    wall = time.perf_counter()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - wall
    # Popen must learn the exit status, or it warns that the process is still running
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{name} failed with exit code {proc.returncode}")
    return {
        "process_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_rss_mib": usage.ru_maxrss / 1024,  # Linux reports KiB
    }


def _command(data: Path) -> dict[str, Any]:
    """``oomtrace analyze DIR --json`` in its own process: wall time start to exit, CPU, peak."""
    with tempfile.TemporaryFile("w+") as out:
        argv = [sys.executable, "-m", "oomtrace", "analyze", str(data), "--json"]
        measured = _measured(argv, COMMAND, stdout=out)
        out.seek(0)
        findings = json.loads(out.read())
    facts = incident_facts(findings)
    return {"name": COMMAND, **measured, "incidents": len(facts), "facts": facts}


def _child(name: str, data: Path) -> dict[str, Any]:
    """Run one contender in a fresh interpreter; its peak memory comes from wait4."""
    with tempfile.NamedTemporaryFile("r", suffix=".json") as out:
        argv = [
            sys.executable,
            __file__,
            "--child",
            name,
            "--data",
            str(data),
            "--result",
            out.name,
        ]
        measured = _measured(argv, name)
        result: dict[str, Any] = json.loads(Path(out.name).read_text())
    return {**result, **measured}


def _report(results: list[dict[str, Any]], whole: list[dict[str, Any]], sizes: str) -> str:
    """Two tables. The pool computation: times inside each process (read, compute), the CPU
    seconds of the whole process (a steadier figure on a shared machine), peak memory, and ratios
    to the floor and to oomtrace. The whole command: wall time of the process from start to exit,
    CPU and peak, against merely reading every table (the floor of the command)."""
    by = {r["name"]: r for r in results}
    floor = by["read"]
    ours = by["oomtrace"]
    ours_total = ours["read_s"] + ours["compute_s"]
    header = (
        f"{'contender':<10} {'read s':>7} {'compute s':>9} {'total s':>8} {'CPU s':>7} "
        f"{'peak MiB':>8} {'total/floor':>11} {'CPU/floor':>9} {'total/oomtrace':>14} "
        f"{'CPU/oomtrace':>12}"
    )
    lines = [f"analyze benchmark: {sizes}", "pool computation", header]
    for r in results:
        total = r["read_s"] + r["compute_s"]
        lines.append(
            f"{r['name']:<10} {r['read_s']:>7.2f} {r['compute_s']:>9.2f} {total:>8.2f} "
            f"{r['cpu_s']:>7.1f} {r['peak_rss_mib']:>8.0f} {total / floor['read_s']:>11.2f} "
            f"{r['cpu_s'] / floor['cpu_s']:>9.2f} {total / ours_total:>14.2f} "
            f"{r['cpu_s'] / ours['cpu_s']:>12.2f}"
        )
    checks = [k for k in ("rows", "resident_sum", "tokens_sum", "kv_sum") if k in ours]
    for name in ("duckdb", "pandas"):
        # Each rounds a float sum at every sample time: a few rows may differ by one unit, and
        # sums of ~1e10-byte values by float rounding.
        slack = max(ours["rows"] // 1000, 1)
        diffs = {
            k: by[name][k] - ours[k]
            for k in checks
            if abs(by[name][k] - ours[k]) > max(slack, 1e-9 * abs(ours[k]))
        }
        agree = "agree" if not diffs else f"DIFFER {diffs}"
        lines.append(
            f"{name} and oomtrace {agree}: rows and sums of resident requests, stored tokens and "
            "KV bytes (to one unit on one row in a thousand, or 1e-9 of the sum)"
        )
    lines += _whole_lines(whole, floor["process_s"])
    return "\n".join(lines)


def _whole_report(whole: list[dict[str, Any]], sizes: str) -> str:
    """The whole command beside reading its tables, alone (``--whole-only``)."""
    return "\n".join([f"analyze benchmark: {sizes}", *_whole_lines(whole, None)])


def _whole_lines(whole: list[dict[str, Any]], pool_floor_s: float | None) -> list[str]:
    """The whole command: wall, CPU and peak, and their ratios to reading every table (and, with
    the pool contenders, the wall against the pool computation's floor)."""
    read_all = next(r for r in whole if r["name"] == "read all")
    pool = f" {'wall/pool floor':>15}" if pool_floor_s else ""
    lines = [
        "whole command (process wall from start to exit, interpreter start-up included)",
        (
            f"{'contender':<17} {'wall s':>7} {'CPU s':>7} {'peak MiB':>8} {'wall/floor':>10} "
            f"{'CPU/floor':>9}{pool}"
        ),
    ]
    for r in whole:
        pooled = f" {r['process_s'] / pool_floor_s:>15.2f}" if pool_floor_s else ""
        lines.append(
            f"{r['name']:<17} {r['process_s']:>7.2f} {r['cpu_s']:>7.1f} "
            f"{r['peak_rss_mib']:>8.0f} {r['process_s'] / read_all['process_s']:>10.2f} "
            f"{r['cpu_s'] / read_all['cpu_s']:>9.2f}{pooled}"
        )
    return lines


def _cross_check(whole: list[dict[str, Any]]) -> None:
    """The command (windowed on a day) and the single pass agree, or the benchmark fails."""
    by = {r["name"]: r for r in whole}
    ours, single = by[COMMAND]["facts"], by["single pass"]["facts"]
    if ours != single:
        raise SystemExit(f"the windowed and the single pass disagree: {ours} != {single}")
    print(
        f"cross-checked: the command and the single pass find the same {len(ours)} incident(s), "
        "classes, peaks and culprits"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", type=Path, help="an existing benchmark trace directory")
    parser.add_argument("--requests", type=int, default=2_000_000)
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--hz", type=float, default=100.0)
    parser.add_argument("--child", choices=list(RUNNERS), help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument(
        "--cross-check",
        action="store_true",
        help="also analyse the trace in one pass (below the windowed path's threshold) and check "
        "that both find the same incidents, classes, peaks and culprits",
    )
    parser.add_argument(
        "--whole-only",
        action="store_true",
        help="only the whole command beside reading its tables (no pool contenders)",
    )
    args = parser.parse_args()
    if args.child:
        result = RUNNERS[args.child](args.data)
        args.result.write_text(json.dumps(result))
        return
    from benchmarks.analyze_data import generate

    with tempfile.TemporaryDirectory() as tmp:
        data = args.data or generate(
            Path(tmp) / "day", requests=args.requests, hours=args.hours, hz=args.hz
        )
        for file in sorted(Path(data).glob("*.parquet")):  # warm the page cache for everyone
            file.read_bytes()
        results = [] if args.whole_only else [_child(name, data) for name in CONTENDERS]
        whole = [_child(name, data) for name in WHOLE] + [_command(Path(data))]
        if args.cross_check:
            whole.insert(1, _child("single pass", data))
            _cross_check(whole)
    sizes = f"{args.requests:,} requests, {args.hours:g} h at {args.hz:g} Hz"
    if args.data:
        sizes = f"data from {args.data.name}"
    print(_whole_report(whole, sizes) if args.whole_only else _report(results, whole, sizes))
    if args.json:
        document = {"pool": results, "whole": whole}
        args.json.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
