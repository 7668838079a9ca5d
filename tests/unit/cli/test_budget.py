"""``oomtrace budget`` on the command line: README's first command, the worked example, the JSON
document, and every bad input with its exact one-line error and exit code (2 usage, 1 does not
fit)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from oomtrace.cli import cli
from tests.unit.budget.factories import CONFIGS, ROOT, write_config

WORKED = "--layers 32 --kv-heads 8 --head-dim 128 --params 7e9 --device-memory 24GiB --reserve 3GiB"


def run(args: str | list[str]) -> Result:
    argv = shlex.split(args) if isinstance(args, str) else args
    return CliRunner().invoke(cli, ["budget", *argv])


def value_of(output: str, label: str) -> str:
    """The value column of the worksheet line labelled ``label``."""
    for line in output.splitlines():
        if line[2:].startswith(label):
            return line[2 + 28 : 2 + 28 + 16].strip()
    raise AssertionError(f"no line {label!r} in:\n{output}")


# README's budget example for a 24 GiB card (it was README's first command before the report).
LLAMA_24GIB = (
    "--config sample_logs/models/llama-3.1-8b --device-memory 24GiB --reserve 3GiB "
    "--max-input 4096 --max-new 1024"
)


def readme_llama_command() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"oomtrace budget {LLAMA_24GIB}" in readme, "README no longer shows the 24 GiB example"
    return shlex.split(LLAMA_24GIB)


README_WORKSHEET = """\
oomtrace budget: llama-3.1-8b (llama) from sample_logs/models/llama-3.1-8b/config.json
model: 32 layers: 32 full attention; GQA, 8 KV heads x head dim 128; dtype bfloat16 (config 'torch_dtype')

  device memory                      24.00 GiB   25,769,803,776 B
- weights                            14.96 GiB   8,030,261,248 params (exact, from config.json) x 2 B (bfloat16)
- runtime reserve                     3.00 GiB   provisional: your estimate (--reserve); measure it, then pass --reserve-measured
= available for KV cache              6.04 GiB   device - weights - reserve (6,488,055,808 B)
  KV per stored token               128.00 KiB   32 full layers x 2 (K,V) x 8 KV heads x 128 head dim x 2 B (bfloat16) = 131,072 B
  stored tokens / sequence        5,120 tokens   = 4,096 input + 1,024 max new (--max-input + --max-new)
  bytes per sequence                640.00 MiB   5,120 tokens x 128.00 KiB, whole blocks of 16 tokens per layer (671,088,640 B)
  concurrency bound                9 sequences   floor(6.04 GiB / 640.00 MiB)
"""  # noqa: E501


def test_readme_llama_example_prints_the_worksheet(monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN the repository root as the working directory, as on a fresh checkout
    monkeypatch.chdir(ROOT)
    # WHEN README's 24 GiB budget example runs
    result = run(readme_llama_command())
    # THEN it fits, and every figure is the hand-derived one:
    # 8,030,261,248 params x 2 B = 16,060,522,496 B = 14.96 GiB;
    # 24 GiB - 14.96 GiB - 3 GiB = 6,488,055,808 B; 5,120 x 131,072 B = 640 MiB; 9 sequences
    assert result.exit_code == 0, result.output
    assert result.stdout == README_WORKSHEET


def test_every_budget_example_in_readme_runs_and_fits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    examples = re.findall(r"^oomtrace budget (.+)$", readme, flags=re.MULTILINE)
    assert examples, "README shows no standalone budget example"
    for example in examples:
        result = run(example)
        assert result.exit_code == 0, (example, result.output)


def test_the_sample_ledger_reports_its_incomplete_row(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    result = run(
        "--config sample_logs/models/llama-3.1-8b --device-memory 80GiB --tokens 4096 "
        "--ledger sample_logs/models/llama-3.1-8b/requests.csv"
    )
    assert "  left out: 1 row, missing input or max new tokens (first: chat-0007)" in result.stdout
    # 812 + 512 = 1,324 tokens -> 83 blocks of 16 = 1,328 tokens x 131,072 B = 166 MiB
    assert "  chat-0001                      812       512       1,328    166.00 MiB  yes" in (
        result.stdout
    )


def test_worked_example_on_the_command_line() -> None:
    result = run(f"{WORKED} --tokens 4096")
    assert result.exit_code == 0, result.output
    assert value_of(result.stdout, "weights") == "13.04 GiB"
    assert value_of(result.stdout, "available for KV cache") == "7.96 GiB"
    assert value_of(result.stdout, "KV per stored token") == "128.00 KiB"
    assert value_of(result.stdout, "bytes per sequence") == "512.00 MiB"  # 0.5 GiB
    assert value_of(result.stdout, "concurrency bound") == "15 sequences"


@pytest.mark.parametrize(
    ("extra", "per_sequence", "sequences"),
    [
        ("--max-input 4096 --max-new 1024", "640.00 MiB", "12 sequences"),  # 0.625 GiB
        ("--device-memory 32GiB --tokens 8192", "1.00 GiB", "15 sequences"),
    ],
)
def test_worked_example_variants_on_the_command_line(
    extra: str, per_sequence: str, sequences: str
) -> None:
    result = run(f"{WORKED} {extra}")
    assert result.exit_code == 0, result.output
    assert value_of(result.stdout, "bytes per sequence") == per_sequence
    assert value_of(result.stdout, "concurrency bound") == sequences


def test_six_gib_of_cache_at_0_75_gib_per_request_gives_eight() -> None:
    result = run(
        "--layers 32 --kv-heads 8 --head-dim 128 --weights-bytes 15GiB --device-memory 24GiB "
        "--reserve 3GiB --tokens 6144"
    )
    assert value_of(result.stdout, "available for KV cache") == "6.00 GiB"
    assert value_of(result.stdout, "bytes per sequence") == "768.00 MiB"  # 0.75 GiB
    assert value_of(result.stdout, "concurrency bound") == "8 sequences"


def test_four_kv_heads_halve_the_per_token_line() -> None:
    result = run(f"{WORKED} --tokens 4096".replace("--kv-heads 8", "--kv-heads 4"))
    assert value_of(result.stdout, "KV per stored token") == "64.00 KiB"


def test_json_has_the_stable_keys_with_the_worked_numbers() -> None:
    result = run(f"{WORKED} --max-input 4096 --max-new 1024 --json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert {
        k: doc[k]
        for k in (
            "device_bytes",
            "weights_bytes",
            "reserve_bytes",
            "reserve_kind",
            "available_cache_bytes",
            "kv_bytes_per_token",
            "unbounded_kv_bytes_per_token",
            "state_bytes_per_sequence",
            "stored_tokens_per_sequence",
            "sequence_bytes",
            "max_sequences",
        )
    } == {
        "device_bytes": 24 * 2**30,
        "weights_bytes": 14_000_000_000,
        "reserve_bytes": 3 * 2**30,
        "reserve_kind": "provisional",
        "available_cache_bytes": 8_548_578_304,
        "kv_bytes_per_token": 131_072,
        "unbounded_kv_bytes_per_token": 131_072,
        "state_bytes_per_sequence": 0,
        "stored_tokens_per_sequence": 5120,
        "sequence_bytes": 5120 * 131_072,
        "max_sequences": 12,
    }
    assert list(doc) == sorted(doc)
    assert doc["schema"] == "oomtrace.budget/1"


def test_a_measured_reserve_is_labelled_measured_in_text_and_json() -> None:
    args = WORKED.replace("--reserve 3GiB", "--reserve-measured 2.5GiB") + " --tokens 4096"
    assert "measured: from a real run (--reserve-measured)" in run(args).stdout
    assert json.loads(run(args + " --json").stdout)["reserve_kind"] == "measured"


def test_a_windowed_model_shows_growth_and_the_vllm_admission_view_separately() -> None:
    result = run(
        f"--config {CONFIGS / 'gemma-3-27b-it'} --device-memory 80GiB --params 27.4B "
        "--tokens 32768 --reserve 4GiB"
    )
    assert result.exit_code == 0, result.output
    assert value_of(result.stdout, "KV growth once windows full") == "80.00 KiB"  # 10 x 8,192 B
    assert value_of(result.stdout, "bytes per sequence") == "2.91 GiB"  # 3,120,562,176 B
    assert value_of(result.stdout, "vLLM admission view") == "3.91 GiB/seq"  # 4,202,168,320 B
    assert "not what is resident" in result.stdout


def test_an_mla_model_shows_the_latent_formula_without_a_factor_two() -> None:
    result = run(
        f"--config {CONFIGS / 'deepseek-v3'} --device-memory 141GiB --tensor-parallel 8 "
        "--params 671B --weight-dtype fp8 --tokens 4096"
    )
    assert result.exit_code == 0, result.output
    assert "61 MLA layers x 576 (kv_lora_rank + qk_rope_head_dim) x 2 B (bfloat16)" in result.stdout
    assert "= 70,272 B" in result.stdout


def test_a_ledger_is_rendered_after_the_worksheet(tmp_path: Path) -> None:
    ledger = tmp_path / "requests.csv"
    ledger.write_text("request_id,input_tokens,max_new_tokens\nr1,4096,1024\nr2,90000,2000\n")
    result = run(f"{WORKED} --tokens 4096 --ledger {ledger}")
    assert result.exit_code == 0, result.output
    assert f"admission ledger: {ledger} (2 requests)" in result.stdout
    assert "  never fit alone: 1 (r2 (11.23 GiB))" in result.stdout  # 92,000 x 131,072 B


def test_a_ledgers_request_ids_are_shown_whole(tmp_path: Path) -> None:
    # GIVEN ids as vLLM's chat endpoint makes them (longer than any fixed column)
    long_id = "chatcmpl-5f0c2a5b8e7d4c19a3b6f1e2d9c8b7a6-0"
    big_id = "chatcmpl-0e1d2c3b4a5968778695a4b3c2d1e0f9-0"
    ledger = tmp_path / "requests.csv"
    ledger.write_text(
        f"request_id,input_tokens,max_new_tokens\n{long_id},4096,1024\n{big_id},90000,2000\n"
    )
    result = run(f"{WORKED} --tokens 4096 --ledger {ledger}")
    assert result.exit_code == 0, result.output
    # THEN both can be copied from the table and from the "never fit" line
    table = [line for line in result.stdout.splitlines() if line.startswith(f"  {long_id} ")]
    assert table, result.stdout
    assert f"never fit alone: 1 ({big_id} (11.23 GiB))" in result.stdout
    assert "…" not in result.stdout


def test_block_size_one_disables_rounding() -> None:
    rounded = json.loads(run(f"{WORKED} --tokens 4097 --json").stdout)["sequence_bytes"]
    exact = json.loads(run(f"{WORKED} --tokens 4097 --block-size 1 --json").stdout)
    assert (rounded, exact["sequence_bytes"]) == (131_072 * 4112, 131_072 * 4097)


def error_of(result: Result) -> str:
    return result.stderr


GEMMA4 = CONFIGS / "gemma-4-26b-a4b"
BAD_INPUT = [
    (
        f"--config {CONFIGS / 'absent'} --device-memory 24GiB --tokens 1 --params 1B",
        (
            f"--config {CONFIGS / 'absent'}: no such file or directory; pass a model's config.json "
            "or the directory that holds it"
        ),
    ),
    (
        f"{WORKED} --tokens 1 --device-memory 0GiB",
        "--device-memory 0 B must be more than 0 bytes; write e.g. 24GiB or 80GB",
    ),
    (
        f"{WORKED} --tokens 1 --device-memory -8GiB",
        "--device-memory -8.00 GiB must be more than 0 bytes; write e.g. 24GiB or 80GB",
    ),
    (
        f"{WORKED} --tokens 1 --device-memory 24G",
        (
            "--device-memory '24G': unknown unit 'G': write GiB for binary (2**30) or GB for "
            "decimal (10**9); the two are different amounts"
        ),
    ),
    (
        f"{WORKED} --tokens 1 --reserve 30GiB",
        (
            "--reserve 30.00 GiB is not less than --device-memory 24.00 GiB; the reserve is "
            "part of the device, give a smaller one"
        ),
    ),
    (
        f"{WORKED} --tokens 1 --reserve-measured 1GiB",
        "give either --reserve (a guess) or --reserve-measured, not both",
    ),
    (
        WORKED,
        (
            "no request contract: give --max-input N --max-new N (stored tokens = input + new) "
            "or --tokens N"
        ),
    ),
    (
        f"{WORKED} --max-input 10",
        "--max-new is missing: stored tokens = --max-input + --max-new",
    ),
    (
        "--device-memory 24GiB --tokens 1 --params 1B",
        (
            "no model: give --config (config.json or model directory) or --layers, --kv-heads and "
            "--head-dim"
        ),
    ),
    (
        f"{WORKED} --tokens 1 --params '7 billion'",
        "--params '7 billion' is not a parameter count; write e.g. 7e9 or 7B",
    ),
    (
        f"{WORKED} --tokens 1 --tensor-parallel 3",
        (
            "--tensor-parallel 3 does not divide the model's 8 KV heads; choose a tensor-parallel "
            "size that divides it"
        ),
    ),
    (
        f"--config {GEMMA4} --device-memory 80GiB --tokens 1 --params 26B",
        (
            f"{GEMMA4 / 'config.json'}: field 'text_config.global_head_dim' (a different head size "
            "on global layers, as in Gemma-4) changes the KV cache in a way oomtrace does not "
            "model; give the architecture with --layers, --kv-heads and --head-dim if your engine "
            "stores every layer in full"
        ),
    ),
    (
        f"--config {CONFIGS / 'deepseek-v3'} --device-memory 80GiB --tokens 1",
        (
            "cannot count the weights of deepseek-v3 (model_type deepseek_v3) from config.json "
            "alone; pass --params (e.g. 671B), --weights-bytes, or a --config directory holding "
            "the checkpoint's *.safetensors files"
        ),
    ),
]


@pytest.mark.parametrize(("args", "message"), BAD_INPUT)
def test_bad_input_is_one_line_naming_the_input_and_exit_2(args: str, message: str) -> None:
    result = run(args)
    assert result.exit_code == 2, result.output
    assert error_of(result) == f"oomtrace: error: {message}\n"
    assert result.stdout == ""


def test_a_malformed_config_is_exit_2_naming_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama"\n "num_hidden_layers": 4}', encoding="utf-8")
    result = run(f"--config {path} --device-memory 24GiB --tokens 1 --params 1B")
    assert result.exit_code == 2
    assert error_of(result) == (
        f"oomtrace: error: {path}: not valid JSON (line 2 column 2: Expecting ',' delimiter); "
        "pass the model's config.json\n"
    )


def test_a_field_of_the_wrong_type_is_exit_2_naming_it(tmp_path: Path) -> None:
    path = write_config(tmp_path, num_key_value_heads="8")
    result = run(f"--config {path} --device-memory 24GiB --tokens 1 --params 1B")
    assert result.exit_code == 2
    assert error_of(result) == (
        f"oomtrace: error: {path}: field 'num_key_value_heads' is '8' (a string), expected a "
        "whole number; fix the file or give the architecture with --layers, --kv-heads and "
        "--head-dim\n"
    )


def test_weights_larger_than_the_device_print_the_worksheet_and_exit_1() -> None:
    result = run(f"{WORKED} --tokens 4096 --params 70B")
    assert result.exit_code == 1
    # 24 GiB - 3 GiB - 70e9 x 2 B (130.39 GiB) = -109.39 GiB
    assert value_of(result.stdout, "available for KV cache") == "-109.39 GiB"
    assert error_of(result) == (
        "oomtrace: error: does not fit: weights 130.39 GiB + reserve 3.00 GiB leave -109.39 GiB "
        "of 24.00 GiB for the cache; use more GPUs (--tensor-parallel), smaller weights or a "
        "smaller reserve\n"
    )


def test_a_concurrency_gate_exits_1_with_the_shortfall() -> None:
    result = run(f"{WORKED} --tokens 4096 --concurrency 20")
    assert result.exit_code == 1
    assert "DOES NOT FIT" in result.stdout
    # 20 x 0.5 GiB = 10 GiB needed, 8,548,578,304 B available: short by 2,188,140,544 B
    assert error_of(result) == (
        "oomtrace: error: --concurrency 20 does not fit: 20 sequences of 4,096 tokens need "
        "10.00 GiB, 7.96 GiB is available; short by 2.04 GiB (fits 15)\n"
    )
    assert run(f"{WORKED} --tokens 4096 --concurrency 15").exit_code == 0
