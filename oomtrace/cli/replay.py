"""``oomtrace replay``: replay recorded traffic under other admission limits."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Final

import click

from oomtrace.cli._options import (
    block_size_option,
    device_memory_option,
    ingest_options,
    json_option,
    max_num_batched_tokens_option,
    reserve_option,
    trace_model_options,
)

if TYPE_CHECKING:
    from oomtrace.ingest import IngestOptions

# oomtrace.replay's POLICIES and SEARCH_TARGETS, repeated so that --help does not load the compiled
# simulator (tests/unit/cli/test_replay.py checks they are the same).
POLICY_CHOICES: Final = ("on-demand", "reserve")
TARGET_CHOICES: Final = ("max-num-seqs", "max-num-batched-tokens", "kv-blocks")
# Inputs of this many bytes or more are read with Polars' buffers in huge pages (see
# huge_pages_for_large_inputs); a sample incident's few kilobytes are not.
HUGE_PAGES_FROM: Final = 64 * 2**20


def huge_pages_for_large_inputs(
    ctx: click.Context, param: click.Parameter, inputs: tuple[Path, ...]
) -> tuple[Path, ...]:
    """Where the inputs hold :data:`HUGE_PAGES_FROM` bytes or more, Polars' allocator backs its
    large buffers with transparent huge pages where the kernel offers them on request
    ("madvise", as NumPy already asks for its arrays): Polars' own switch, ``POLARS_THP=1``, read
    when Polars loads (no option read before this one loads it). A replay of a day first touches
    about 1.9 GB: in 4 KiB pages that was about 515,000 page faults and 1.4-1.7 s of kernel time;
    with huge pages about 160,000 faults and about 0.2 s less (`/usr/bin/time`, side by side on a
    loaded 2-core machine, 2026-12). Small inputs keep the default: there huge pages only raised
    the peak memory (a sample incident 140 -> 165 MiB). A user's setting wins."""
    if _input_bytes(inputs) >= HUGE_PAGES_FROM:
        os.environ.setdefault("POLARS_THP", "1")
    return inputs


def _input_bytes(paths: tuple[Path, ...]) -> int:
    """The bytes of the files given, and of the files directly in the folders given (a trace
    directory's tables); a path that cannot be read counts nothing (reading it says why)."""
    total = 0
    for path in paths:
        try:
            files = [f for f in path.iterdir() if f.is_file()] if path.is_dir() else [path]
            total += sum(f.stat().st_size for f in files)
        except OSError:
            continue
    return total


@click.command("replay")
@click.argument(
    "inputs",
    nargs=-1,
    required=True,
    type=click.Path(path_type=Path),
    callback=huge_pages_for_large_inputs,
)
@click.option(
    "--policy",
    type=click.Choice(POLICY_CHOICES),
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
@device_memory_option(
    "Size the pool from device memory (e.g. 80GiB) minus "
    "--weights and --reserve, at --kv-bytes-per-token."
)
@click.option("--weights", help="Model weights on the device, e.g. 15GiB.")
@reserve_option("Runtime reserve (activations, CUDA graphs, ...), e.g. 4GiB.")
@click.option(
    "--kv-bytes-per-token",
    type=click.IntRange(min=1),
    help="KV bytes per stored token (all layers) [default: from --config, else the trace's "
    "model spec].",
)
@trace_model_options
@block_size_option("Tokens per KV block [default: the trace's, else 16].")
@click.option(
    "--max-num-seqs",
    type=click.IntRange(min=0),
    help="Most requests running at once; 0 for no limit [default: the trace's, else none].",
)
@max_num_batched_tokens_option(
    "Prefill tokens in flight at once; 0 for no limit [default: the trace's, else none].",
    least=0,
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
    type=click.Choice(TARGET_CHOICES),
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
@json_option("Print the result as JSON.")
@click.option(
    "--out",
    type=click.Path(path_type=Path, file_okay=False),
    help="Also write outcomes.parquet (per request) and series.parquet (pool over time) here.",
)
@ingest_options
def command(
    *,
    inputs: tuple[Path, ...],
    policy: str,
    kv_blocks: int | None,
    device_memory: str | None,
    weights: str | None,
    reserve: str | None,
    kv_bytes_per_token: int | None,
    config_path: Path | None,
    kv_cache_dtype: str,
    tensor_parallel: int | None,
    block_size: int | None,
    max_num_seqs: int | None,
    max_num_batched_tokens: int | None,
    max_waiting: int | None,
    decode_tokens_per_s: float | None,
    prefill_tokens_per_s: float,
    target: str | None,
    calibrate: bool | None,
    as_json: bool,
    out: Path | None,
    ingest: IngestOptions,
) -> None:
    """Replay the recorded traffic of INPUTS (a trace directory, or the incident's raw files) on
    a paged KV pool under other admission settings: would the pool have run dry, how many
    preemptions, how much queueing. --node also picks the node to replay in a multi-node trace."""
    from oomtrace.replay import ReplayOptions, run_replay
    from oomtrace.replay.load import load_replay_input
    from oomtrace.terminal import render_run
    from oomtrace.units import parse_bytes

    def size(value: str | None, flag: str) -> int | None:
        return None if value is None else parse_bytes(value, what=flag)

    options = ReplayOptions(
        policy=policy,  # type: ignore[arg-type]  # click.Choice(POLICY_CHOICES)
        kv_blocks=kv_blocks,
        device_bytes=size(device_memory, "--device-memory"),
        weights_bytes=size(weights, "--weights"),
        reserve_bytes=size(reserve, "--reserve"),
        kv_bytes_per_token=kv_bytes_per_token,
        config=config_path,
        kv_cache_dtype=kv_cache_dtype,
        tensor_parallel=tensor_parallel,
        block_size=block_size,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        max_waiting=max_waiting,
        decode_tokens_per_s=decode_tokens_per_s,
        prefill_tokens_per_s=prefill_tokens_per_s,
        search=target,  # type: ignore[arg-type]  # click.Choice(TARGET_CHOICES)
        calibrate=calibrate,
        node=ingest.node,
        series=out is not None,  # the pool over time is written only with --out
    )
    trace = load_replay_input(list(inputs), ingest)
    run = run_replay(trace, options)
    if out is not None:
        run.write_tables(out)
    if as_json:
        click.echo(json.dumps(run.to_json(), indent=2, sort_keys=True))
    else:
        click.echo(render_run(run))
