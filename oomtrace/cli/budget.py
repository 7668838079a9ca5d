"""``oomtrace budget``: the GPU memory budget worksheet for serving a model."""

from __future__ import annotations

import json
from pathlib import Path

import click

from oomtrace.budget.dtypes import STATE_DTYPES, WEIGHT_DTYPES
from oomtrace.cli._options import (
    block_size_option,
    config_option,
    device_memory_option,
    json_option,
    kv_cache_dtype_option,
    max_num_batched_tokens_option,
    reserve_option,
    tensor_parallel_option,
)


@click.command(
    "budget",
    short_help="GPU memory budget worksheet for serving a model.",
    context_settings={"max_content_width": 100},
)
@config_option("A model's config.json, or the directory holding it (and its *.safetensors).")
@click.option(
    "--layers",
    type=click.IntRange(min=1),
    help="Explicit architecture: layers (all full attention).",
)
@click.option(
    "--kv-heads", type=click.IntRange(min=1), help="Explicit architecture: KV heads per layer."
)
@click.option(
    "--head-dim", type=click.IntRange(min=1), help="Explicit architecture: head dimension."
)
@device_memory_option("Memory of one GPU, e.g. 24GiB or 80GB.", required=True)
@reserve_option("Runtime reserve you estimate (provisional), e.g. 3GiB.")
@click.option("--reserve-measured", help="Runtime reserve measured on a real run, e.g. 2.7GiB.")
@click.option("--params", help="Parameter count, e.g. 7e9 or 7B (times bytes per weight).")
@click.option("--weights-bytes", help="Weight bytes of the whole model, e.g. 14GiB.")
@click.option(
    "--weight-dtype",
    type=click.Choice(WEIGHT_DTYPES),
    default="auto",
    show_default=True,
    help="Bytes per weight for --params or a config count (auto = model dtype).",
)
@kv_cache_dtype_option(
    "KV cache element type (auto = model dtype; fp8 halves attention and MLA cache)."
)
@click.option(
    "--mamba-ssm-cache-dtype",
    type=click.Choice(STATE_DTYPES),
    default="auto",
    show_default=True,
    help="Recurrent (SSM) state dtype (auto = config or model dtype).",
)
@click.option("--max-input", type=click.IntRange(min=0), help="Request contract: max input tokens.")
@click.option("--max-new", type=click.IntRange(min=0), help="Request contract: max new tokens.")
@click.option(
    "--tokens", type=click.IntRange(min=1), help="Request contract: stored tokens per sequence."
)
@block_size_option(
    "Paged-cache block in tokens, rounded up per layer (1 disables rounding).", default=16
)
@tensor_parallel_option("GPUs sharding KV heads and weights; figures are per GPU.", default=1)
@max_num_batched_tokens_option(
    "vLLM chunked-prefill step, for its admission view of windowed layers.", default=2048
)
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    help="Target sequences at once; exit 1 when they do not fit (a CI gate).",
)
@click.option(
    "--ledger",
    "ledger_path",
    type=click.Path(path_type=Path),
    help="CSV/JSON rows: request_id, input_tokens, max_new_tokens.",
)
@json_option("Print the worksheet as a JSON document.")
def command(
    *,
    config_path: Path | None,
    layers: int | None,
    kv_heads: int | None,
    head_dim: int | None,
    device_memory: str,
    reserve: str | None,
    reserve_measured: str | None,
    params: str | None,
    weights_bytes: str | None,
    weight_dtype: str,
    kv_cache_dtype: str,
    mamba_ssm_cache_dtype: str,
    max_input: int | None,
    max_new: int | None,
    tokens: int | None,
    block_size: int,
    tensor_parallel: int,
    max_num_batched_tokens: int,
    concurrency: int | None,
    ledger_path: Path | None,
    as_json: bool,
) -> None:
    """GPU memory budget worksheet for serving a model.

    device memory - weights - runtime reserve = cache; KV bytes per stored token; bytes per
    sequence for the request contract; concurrency bound = floor(cache / bytes per sequence).
    Each line shows its unit and the formula or assumption behind it.

    \b
    From a Hugging Face config (file or model directory):
      oomtrace budget --config ./Llama-3.1-8B --device-memory 24GiB --reserve 3GiB \\
        --max-input 4096 --max-new 1024
    Or explicitly:
      oomtrace budget --layers 32 --kv-heads 8 --head-dim 128 --params 7e9 \\
        --device-memory 24GiB --reserve 3GiB --tokens 4096

    Exit codes: 0 fits; 1 does not fit (no room for one sequence, or --concurrency not met);
    2 bad input.
    """
    from oomtrace.budget.plan import BudgetRequest, compute_budget
    from oomtrace.budget.weights import parse_param_count
    from oomtrace.budget.worksheet import check_fits
    from oomtrace.budget.worksheet_json import to_json
    from oomtrace.terminal import render_worksheet
    from oomtrace.units import parse_bytes

    def size(value: str | None, flag: str, *, allow_negative: bool = False) -> int | None:
        return (
            None if value is None else parse_bytes(value, what=flag, allow_negative=allow_negative)
        )

    request = BudgetRequest(
        # A negative device is reported by compute_budget with the same message as zero.
        device_bytes=size(device_memory, "--device-memory", allow_negative=True) or 0,
        reserve_bytes=size(reserve, "--reserve"),
        reserve_measured_bytes=size(reserve_measured, "--reserve-measured"),
        weights_bytes=size(weights_bytes, "--weights-bytes"),
        params=None if params is None else parse_param_count(params),
        config=config_path,
        ledger=ledger_path,
        max_input_tokens=max_input,
        max_new_tokens=max_new,
        layers=layers,
        kv_heads=kv_heads,
        head_dim=head_dim,
        weight_dtype=weight_dtype,
        kv_cache_dtype=kv_cache_dtype,
        mamba_ssm_cache_dtype=mamba_ssm_cache_dtype,
        tokens=tokens,
        block_size=block_size,
        tensor_parallel=tensor_parallel,
        max_num_batched_tokens=max_num_batched_tokens,
        concurrency=concurrency,
    )
    worksheet, ledger = compute_budget(request)
    if as_json:
        click.echo(json.dumps(to_json(worksheet, ledger), indent=2, sort_keys=True))
    else:
        click.echo(render_worksheet(worksheet, ledger), nl=False)
    check_fits(worksheet)
