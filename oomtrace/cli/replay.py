"""``oomtrace replay``: replay recorded traffic under other admission limits."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import click

from oomtrace.budget.dtypes import KV_CACHE_DTYPES
from oomtrace.cli._options import ingest_options, to_ingest_options
from oomtrace.errors import UsageError

_POLICIES = ("on-demand", "reserve")
_TARGETS = ("max-num-seqs", "max-num-batched-tokens", "kv-blocks")


def _opt_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _pool(options: dict[str, Any], config: dict[str, Any], block_size: int, bpt: int | None) -> int:
    """KV blocks from --kv-blocks, or --device-memory with the budget inputs, or the manifest."""
    from oomtrace.replay import blocks_from_budget
    from oomtrace.units import parse_bytes

    if options["kv_blocks"] is not None and options["device_memory"] is not None:
        raise UsageError("give --kv-blocks or --device-memory, not both")
    if options["kv_blocks"] is not None:
        return int(options["kv_blocks"])
    if options["device_memory"] is not None:
        if bpt is None or options["weights"] is None:
            raise UsageError(
                "--device-memory needs --weights and --kv-bytes-per-token (and --reserve for the "
                "runtime's own memory) to size the KV pool"
            )
        return blocks_from_budget(
            device_bytes=parse_bytes(options["device_memory"], what="--device-memory"),
            weights_bytes=parse_bytes(options["weights"], what="--weights"),
            reserve_bytes=parse_bytes(options["reserve"] or "0B", what="--reserve"),
            kv_bytes_per_token=bpt,
            block_size=block_size,
        )
    from oomtrace.replay.calibrate import recorded_pool

    recorded, recorded_block, _ = recorded_pool(config)
    if recorded is None:
        raise UsageError(
            "the trace's manifest states neither num_gpu_blocks nor the KV cache size; pass "
            "--kv-blocks N, or --device-memory with --weights, --reserve and --kv-bytes-per-token"
        )
    # the recorded pool holds a number of tokens; another --block-size cuts it differently
    return max(1, recorded * recorded_block // block_size)


def _limit(value: int | None, recorded: object) -> int | None:
    """An explicit value wins (0 means no limit); otherwise the recorded one, if any."""
    if value is not None:
        return value or None
    return _opt_int(recorded)


def _bytes_per_token(options: dict[str, Any], trace: Any) -> tuple[int | None, str]:
    """KV bytes per stored token: --kv-bytes-per-token, else --config (through the budget's
    architecture reader), else the trace's model spec, else the engine's start-up statements
    (available KV memory over its blocks, as the analysis reads them); with a note on what it
    covers."""
    if options["kv_bytes_per_token"] is not None:
        return int(options["kv_bytes_per_token"]), ""
    if options["config"] is not None:
        from oomtrace.analysis.kvmodel import architecture_spec

        # as analyze reads it: the tensor-parallel size defaults to the one the trace states
        spec, _ = architecture_spec(
            options["config"],
            trace.manifest,
            kv_cache_dtype=options["kv_cache_dtype"],
            tensor_parallel=options["tensor_parallel"],
        )
        note = ""
        if spec.unbounded_kv_bytes_per_token != spec.kv_bytes_per_token or spec.state_groups:
            note = (
                "the model has windowed or recurrent layers: bytes count every layer per stored "
                "token (an upper bound for long sequences; constant per-sequence state is left out)"
            )
        return spec.kv_bytes_per_token, note
    stated = _opt_int(trace.manifest.model.get("kv_bytes_per_token"))
    if stated is not None:
        return stated, ""
    from oomtrace.analysis.kvmodel import kv_model

    engine = kv_model(trace.manifest, trace.samples)
    if engine.bytes_per_token is None:
        return None, ""
    return round(engine.bytes_per_token), f"KV bytes per token from the {engine.statement}"


@click.command("replay")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--policy",
    type=click.Choice(_POLICIES),
    default="on-demand",
    show_default=True,
    help="reserve: hold prompt + max_tokens at admission; on-demand: allocate as "
    "tokens are stored and preempt the newest request when the pool runs dry (vLLM V1).",
)
@click.option(
    "--kv-blocks",
    type=click.IntRange(min=1),
    help="KV pool size in blocks [default: num_gpu_blocks from the trace].",
)
@click.option(
    "--device-memory",
    help="Size the pool from device memory (e.g. 80GiB) minus "
    "--weights and --reserve, at --kv-bytes-per-token.",
)
@click.option("--weights", help="Model weights on the device, e.g. 15GiB.")
@click.option("--reserve", help="Runtime reserve (activations, CUDA graphs, ...), e.g. 4GiB.")
@click.option(
    "--kv-bytes-per-token",
    type=click.IntRange(min=1),
    help="KV bytes per stored token (all layers) [default: from --config, else the trace's "
    "model spec].",
)
@click.option(
    "--config",
    type=click.Path(path_type=Path, exists=True),
    help="The model's config.json (or its directory), for the KV bytes per token.",
)
@click.option(
    "--kv-cache-dtype",
    type=click.Choice(KV_CACHE_DTYPES),
    default="auto",
    show_default=True,
    help="With --config: the KV cache dtype (auto = the model's; fp8 halves it).",
)
@click.option(
    "--tensor-parallel",
    type=click.IntRange(min=1),
    help="With --config: tensor-parallel size (KV heads are split across GPUs) [default: the "
    "trace's, else 1].",
)
@click.option(
    "--block-size",
    type=click.IntRange(min=1),
    help="Tokens per KV block [default: the trace's, else 16].",
)
@click.option(
    "--max-num-seqs",
    type=click.IntRange(min=0),
    help="Most requests running at once; 0 for no limit [default: the trace's, else none].",
)
@click.option(
    "--max-num-batched-tokens",
    type=click.IntRange(min=0),
    help="Prefill tokens in flight at once; 0 for no limit [default: the trace's, else none].",
)
@click.option(
    "--max-waiting",
    type=click.IntRange(min=0),
    help="Reject arrivals that find this many requests waiting [default: queue without limit].",
)
@click.option(
    "--decode-tokens-per-s",
    type=float,
    help="Decode speed for requests whose own "
    "times do not give one [default: the median of those that do].",
)
@click.option(
    "--prefill-tokens-per-s",
    type=float,
    default=10_000.0,
    show_default=True,
    help="Prefill speed when no request recorded its prefill time.",
)
@click.option(
    "--search",
    "target",
    type=click.Choice(_TARGETS),
    help="Find the largest "
    "max-num-seqs / max-num-batched-tokens, or the smallest kv-blocks, with no "
    "overflow and no preemption, and report its queueing cost.",
)
@click.option(
    "--calibrate/--no-calibrate",
    default=None,
    help="Replay with the recorded "
    "settings and compare with the observed KV usage and preemptions [default: when "
    "the trace allows].",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option(
    "--out",
    type=click.Path(path_type=Path, file_okay=False),
    help="Also write outcomes.parquet (per request) and series.parquet (pool over time) here.",
)
@ingest_options
def command(
    inputs: tuple[Path, ...], target: str | None, as_json: bool, out: Path | None, **options: Any
) -> None:
    """Replay the recorded traffic of INPUTS (a trace directory, or the incident's raw files) on
    a paged KV pool under other admission settings: would the pool have run dry, how many
    preemptions, how much queueing. --node also picks the node to replay in a multi-node trace."""
    from oomtrace.ingest import load_any
    from oomtrace.replay import (
        ReplaySettings,
        TimeOptions,
        build_workload,
        calibrate,
        recorded_settings,
        replay,
        search,
    )
    from oomtrace.replay import text as render
    from oomtrace.replay.calibrate import recorded_pool

    ingest = to_ingest_options(options)
    options["node"] = ingest.node
    trace = load_any(list(inputs), ingest)
    config = trace.manifest.engine_config
    bpt, bpt_note = _bytes_per_token(options, trace)
    block_size = options["block_size"] or _opt_int(config.get("block_size")) or 16
    settings = ReplaySettings(
        kv_blocks=_pool(options, config, block_size, bpt),
        block_size=block_size,
        policy=options["policy"],
        max_num_seqs=_limit(options["max_num_seqs"], config.get("max_num_seqs")),
        max_num_batched_tokens=_limit(
            options["max_num_batched_tokens"], config.get("max_num_batched_tokens")
        ),
        max_waiting=options["max_waiting"],
        kv_bytes_per_token=bpt,
    )
    time_options = TimeOptions(options["decode_tokens_per_s"], options["prefill_tokens_per_s"])
    workload = build_workload(trace, options=time_options, node=options["node"])
    result = replay(workload, settings)
    if bpt_note:
        result = dataclasses.replace(result, notes=(*result.notes, bpt_note))
    found = search(workload, settings, target) if target else None  # type: ignore[arg-type]
    cal = None
    wanted = options["calibrate"]
    has_usage = trace.samples.filter(
        trace.samples["metric"].is_in(["kv_usage_ratio", "kv_blocks_used"])
    ).height
    if wanted or (wanted is None and has_usage and recorded_pool(config)[0] is not None):
        cal = calibrate(
            trace, workload, recorded_settings(trace.manifest, kv_bytes_per_token=bpt),
            node=options["node"],
        )  # fmt: skip
    if out is not None:
        written = found.best if found and found.best else result
        out.mkdir(parents=True, exist_ok=True)
        written.outcomes.write_parquet(out / "outcomes.parquet")
        written.series.write_parquet(out / "series.parquet")
    if as_json:
        document: dict[str, Any] = result.to_json()
        if found is not None:
            searched = found.to_json()
            document["best"] = searched.pop("best")
            document["search"] = searched
        document["calibration"] = None if cal is None else cal.to_json()
        click.echo(json.dumps(document, indent=2, sort_keys=True))
        return
    parts = [render.render_replay(result)]
    if found is not None:
        parts.append(render.render_search(found))
    if cal is not None:
        parts.append(render.render_calibration(cal))
    click.echo("\n\n".join(parts))
