"""TGI states its limits (the launcher's arguments, the v3 router's defaults): they become engine
settings."""

from __future__ import annotations

from pathlib import Path

from tests.unit.ingest.torch.settings import engine_config_of


def test_args_of_a_1x_launcher_behind_a_log_viewers_own_timestamp(tmp_path: Path) -> None:
    # https://github.com/huggingface/text-generation-inference/issues/1338 (RunPod's viewer
    # stamps each line before TGI's own time; 1.x prints plain numbers; the line cut short)
    config = engine_config_of(
        tmp_path,
        "2023-12-12T17:39:01.219580598Z 2023-12-12T17:39:01.219356Z  INFO "
        'text_generation_launcher: Args { model_id: "TheBloke/Mistral-7B-Instruct-v0.1-AWQ", '
        "revision: None, sharded: None, num_shard: None, quantize: Some(Awq), dtype: None, "
        "max_concurrent_requests: 128, max_best_of: 2, max_input_length: 16000, "
        "max_total_tokens: 17000, waiting_served_ratio: 1.2, max_batch_prefill_tokens: 17000, "
        'max_batch_total_tokens: None, max_waiting_tokens: 20, hostname: "74ac0675d36c", '
        "port: 8080, cuda_memory_fraction: 1.0, json_output: false, cors_allow_origin: [],\n",
    )
    assert config["max_model_len"] == 17000
    assert config["max_num_batched_tokens"] == 17000
    # the budget of all batches is left to the warm-up: no KV pool is stated
    assert "kv_cache_tokens" not in config


def test_args_inside_json_output(tmp_path: Path) -> None:
    # https://github.com/huggingface/text-generation-inference/issues/1156 (--json-output, 1.1)
    config = engine_config_of(
        tmp_path,
        '{"timestamp":"2023-10-16T06:44:03.670755Z","level":"INFO","fields":{"message":"Args { '
        'model_id: \\"tiiuae/falcon-7b-instruct\\", revision: None, validation_workers: 2, '
        "sharded: Some(false), num_shard: None, quantize: None, max_concurrent_requests: 128, "
        "max_input_length: 1024, max_total_tokens: 2048, waiting_served_ratio: 1.2, "
        "max_batch_prefill_tokens: 4096, max_batch_total_tokens: None, max_waiting_tokens: 20, "
        'json_output: true }"},"target":"text_generation_launcher"}\n',
    )
    assert (config["max_model_len"], config["max_num_batched_tokens"]) == (2048, 4096)


def test_2x_args_print_the_limits_a_user_set_as_some(tmp_path: Path) -> None:
    # https://github.com/huggingface/text-generation-inference/issues/1831 (TGI 2.0: the limits
    # are Options in launcher/src/main.rs; the line cut short)
    config = engine_config_of(
        tmp_path,
        "2024-04-30T10:25:51.994120Z  INFO text_generation_launcher: Args { model_id: "
        '"/model_data/mistral7b-free", revision: None, validation_workers: 2, sharded: None, '
        "num_shard: None, quantize: None, speculate: None, dtype: None, trust_remote_code: false, "
        "max_concurrent_requests: 128, max_best_of: 2, max_stop_sequences: 4, max_top_n_tokens: "
        "5, max_input_tokens: None, max_input_length: Some(8000), max_total_tokens: Some(8512), "
        "waiting_served_ratio: 0.3, max_batch_prefill_tokens: Some(32768), "
        "max_batch_total_tokens: Some(4294967295), ma\n",
    )
    assert (config["max_model_len"], config["max_num_batched_tokens"]) == (8512, 32768)
    # a budget of all batches set by hand is no KV pool a warm-up measured
    assert "kv_cache_tokens" not in config


def test_3x_router_states_the_total_it_defaulted_to(tmp_path: Path) -> None:
    # https://github.com/huggingface/text-generation-inference/issues/2842 (TGI 3.0 without
    # limits: the pool, then the request limits sized from it)
    config = engine_config_of(
        tmp_path,
        "2024-12-14T03:36:59.191040Z  INFO text_generation_launcher: KV-cache blocks: 13807, "
        "size: 1\n"
        "2024-12-14T03:37:01.047823Z  INFO text_generation_router_v3: backends/v3/src/lib.rs:137: "
        "Setting max batch total tokens to 13793\n"
        "2024-12-14T03:37:01.047866Z  INFO text_generation_router: backends/v3/src/main.rs:162: "
        "Maximum input tokens defaulted to 13792\n"
        "2024-12-14T03:37:01.047870Z  INFO text_generation_router: backends/v3/src/main.rs:168: "
        "Maximum total tokens defaulted to 13793\n",
    )
    assert (config["kv_cache_tokens"], config["max_model_len"]) == (13793, 13793)


def test_3x_lines_whose_colours_syslog_escaped_as_text(tmp_path: Path) -> None:
    # https://github.com/huggingface/text-generation-inference/issues/2915 (SageMaker's log
    # wrote each ESC of TGI's colours as '#033')
    config = engine_config_of(
        tmp_path,
        "#033[2m2025-01-17T15:09:04.185746Z#033[0m #033[32m INFO#033[0m #033[2m"
        "text_generation_router_v3#033[0m#033[2m:#033[0m #033[2mbackends/v3/src/lib.rs#033[0m"
        "#033[2m:#033[0m#033[2m137:#033[0m Setting max batch total tokens to 241374\n"
        "#033[2m2025-01-17T15:09:04.185814Z#033[0m #033[32m INFO#033[0m #033[2m"
        "text_generation_router#033[0m#033[2m:#033[0m #033[2mbackends/v3/src/main.rs#033[0m"
        "#033[2m:#033[0m#033[2m168:#033[0m Maximum total tokens defaulted to 241374\n",
    )
    assert (config["kv_cache_tokens"], config["max_model_len"]) == (241374, 241374)


# https://github.com/huggingface/cookbook (notebooks/en/benchmarking_tgi.ipynb): TGI 2.2 prints
# its Args pretty, a field a line, inside a notebook cell's output (indented four blanks); with no
# limit set, the launcher states the defaults it chose.
PRETTY_UNSET = """\
    2024-08-16T12:07:56.411768Z  INFO text_generation_launcher: Args {
        model_id: "astronomer/Llama-3-8B-Instruct-GPTQ-8-Bit",
        quantize: Some(
            Gptq,
        ),
        max_input_tokens: None,
        max_total_tokens: None,
        waiting_served_ratio: 0.3,
        max_batch_prefill_tokens: None,
        max_batch_total_tokens: None,
        port: 1337,
    }
    2024-08-16T12:07:56.458473Z  INFO text_generation_launcher: Default `max_input_tokens` to 4095
    2024-08-16T12:07:56.458480Z  INFO text_generation_launcher: Default `max_total_tokens` to 4096
"""
PRETTY_UNSET += (
    "    2024-08-16T12:07:56.458487Z  INFO text_generation_launcher: Default "
    "`max_batch_prefill_tokens` to 4145\n"
)


def test_pretty_args_with_nothing_set_take_the_launchers_defaults(tmp_path: Path) -> None:
    config = engine_config_of(tmp_path, PRETTY_UNSET)
    assert config["max_model_len"] == 4096
    assert config["max_num_batched_tokens"] == 4145


def test_pretty_args_with_limits_set_read_over_three_lines(tmp_path: Path) -> None:
    # the same launcher with --max-total-tokens 8192 --max-batch-prefill-tokens 8242 (the figures
    # its own advice in that log names): each Some( limit spans three lines
    text = PRETTY_UNSET.replace(
        "        max_total_tokens: None,\n",
        "        max_total_tokens: Some(\n            8192,\n        ),\n",
    ).replace(
        "        max_batch_prefill_tokens: None,\n",
        "        max_batch_prefill_tokens: Some(\n            8242,\n        ),\n",
    )
    text = "\n".join(line for line in text.splitlines() if "Default `" not in line) + "\n"
    config = engine_config_of(tmp_path, text)
    assert config["max_model_len"] == 8192
    assert config["max_num_batched_tokens"] == 8242


def test_a_pretty_field_outside_args_is_no_limit(tmp_path: Path) -> None:
    # an indented "max_total_tokens: 5," in some other printout is not TGI's launcher
    text = "    max_total_tokens: 5,\n    2024-08-16T12:07:56Z  INFO text_generation_router: x\n"
    config = engine_config_of(tmp_path, "Setting max batch total tokens to 100\n" + text)
    assert "max_model_len" not in config
