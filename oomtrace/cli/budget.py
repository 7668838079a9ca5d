"""``oomtrace budget``: the GPU memory budget worksheet for serving a model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from oomtrace.budget.dtypes import KV_CACHE_DTYPES, STATE_DTYPES, WEIGHT_DTYPES


@click.command(
    "budget",
    short_help="GPU memory budget worksheet for serving a model.",
    context_settings={"max_content_width": 100},
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path),
    help="A model's config.json, or the directory holding it (and its *.safetensors).",
)
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
@click.option("--device-memory", required=True, help="Memory of one GPU, e.g. 24GiB or 80GB.")
@click.option("--reserve", help="Runtime reserve you estimate (provisional), e.g. 3GiB.")
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
@click.option(
    "--kv-cache-dtype",
    type=click.Choice(KV_CACHE_DTYPES),
    default="auto",
    show_default=True,
    help="KV cache element type (auto = model dtype; fp8 halves attention and MLA cache).",
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
@click.option(
    "--block-size",
    type=click.IntRange(min=1),
    default=16,
    show_default=True,
    help="Paged-cache block in tokens, rounded up per layer (1 disables rounding).",
)
@click.option(
    "--tensor-parallel",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="GPUs sharding KV heads and weights; figures are per GPU.",
)
@click.option(
    "--max-num-batched-tokens",
    type=click.IntRange(min=1),
    default=2048,
    show_default=True,
    help="vLLM chunked-prefill step, for its admission view of windowed layers.",
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
@click.option("--json", "as_json", is_flag=True, help="Print the worksheet as a JSON document.")
def command(**options: Any) -> None:
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
    from oomtrace.budget.render import render_text, to_json
    from oomtrace.budget.weights import parse_param_count
    from oomtrace.budget.worksheet import check_fits
    from oomtrace.units import parse_bytes

    def size(name: str, *, allow_negative: bool = False) -> int | None:
        value = options.pop(name)
        flag = "--" + name.replace("_", "-")
        if value is None:
            return None
        return parse_bytes(value, what=flag, allow_negative=allow_negative)

    as_json = options.pop("as_json")
    params = options.pop("params")
    request = BudgetRequest(
        # A negative device is reported by compute_budget with the same message as zero.
        device_bytes=size("device_memory", allow_negative=True) or 0,
        reserve_bytes=size("reserve"),
        reserve_measured_bytes=size("reserve_measured"),
        weights_bytes=size("weights_bytes"),
        params=None if params is None else parse_param_count(params),
        config=options.pop("config_path"),
        ledger=options.pop("ledger_path"),
        max_input_tokens=options.pop("max_input"),
        max_new_tokens=options.pop("max_new"),
        **options,
    )
    worksheet, ledger = compute_budget(request)
    if as_json:
        click.echo(json.dumps(to_json(worksheet, ledger), indent=2, sort_keys=True))
    else:
        click.echo(render_text(worksheet, ledger), nl=False)
    check_fits(worksheet)
