"""Reading a Hugging Face ``config.json``: files or model directories, multimodal nesting, the
non-strict JSON real configs contain, and typed fields whose errors name the field.

Real configs are messy in known ways: Nemotron-H and Mamba-2 write ``Infinity`` (not JSON, but
Python's reader accepts it, as transformers does), multimodal checkpoints put the language model
under ``text_config`` while the dtype stays at the root, transformers 5 renamed ``torch_dtype`` to
``dtype``, and some checkpoints (gpt-oss) state no dtype at all.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oomtrace.budget.dtypes import canonical_model_dtype
from oomtrace.errors import ConfigError, special_file_error

# Context-length keys, as vLLM reads them; it takes the smallest one present.
CONTEXT_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
_REMEDY = "fix the file or give the architecture with --layers, --kv-heads and --head-dim"


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, float):
        return "a number with a fraction"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


class ConfigView:
    """The fields of one config section. Every accessor checks the type and, on a bad value,
    raises :class:`ConfigError` naming the file and the field (``text_config.head_dim``)."""

    def __init__(self, data: Mapping[str, Any], *, where: str, prefix: str = "") -> None:
        self.data = data
        self.where = where
        self.prefix = prefix

    def name(self, key: str) -> str:
        return f"{self.prefix}{key}"

    def has(self, key: str) -> bool:
        """Present and not null."""
        return self.data.get(key) is not None

    def error(self, key: str, problem: str) -> ConfigError:
        return ConfigError(f"{self.where}: field '{self.name(key)}' {problem}; {_REMEDY}")

    def opt_int(self, key: str, *, minimum: int = 1) -> int | None:
        """A whole number >= ``minimum``, or None when absent or null. ``4096.0`` is accepted
        (some exporters write integral floats); ``"4096"``, ``true`` and ``4.5`` are not."""
        value = self.data.get(key)
        if value is None:
            return None
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(key, f"is {value!r} ({_kind(value)}), expected a whole number")
        if value < minimum:
            raise self.error(key, f"is {value}, expected a whole number >= {minimum}")
        return value

    def need_int(self, key: str, *, minimum: int = 1, default: int | None = None) -> int:
        value = self.opt_int(key, minimum=minimum)
        if value is not None:
            return value
        if default is not None:
            return default
        raise self.error(key, "is missing")

    def first_int(self, keys: Iterable[str], *, minimum: int = 1) -> tuple[str, int] | None:
        """The first of ``keys`` that is present, with its value."""
        for key in keys:
            value = self.opt_int(key, minimum=minimum)
            if value is not None:
                return key, value
        return None

    def flag(self, key: str, *, default: bool = False) -> bool:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(key, f"is {value!r} ({_kind(value)}), expected true or false")
        return value

    def text(self, key: str) -> str | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.error(key, f"is {value!r} ({_kind(value)}), expected a string")
        return value

    def str_list(self, key: str) -> list[str] | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.error(key, f"is {_kind(value)}, expected a list of strings")
        return list(value)

    def int_list(self, key: str) -> list[int] | None:
        value = self.data.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        ):
            raise self.error(key, f"is {_kind(value)}, expected a list of whole numbers")
        return list(value)

    def truthy(self, key: str) -> bool:
        """Present with a value that is not null, zero, false or empty."""
        return bool(self.data.get(key))


@dataclass(frozen=True)
class LoadedConfig:
    """A parsed config.json: the whole document, the section that describes the language model,
    and where it came from."""

    root: ConfigView
    text: ConfigView
    file: Path
    directory: Path | None

    @property
    def model_type(self) -> str | None:
        return self.text.text("model_type") or self.root.text("model_type")

    def model_dtype(self) -> tuple[str, str] | None:
        """(canonical dtype, the field it came from): ``dtype`` (transformers >= 5) or
        ``torch_dtype``, at the root first and then in ``text_config``, as vLLM reads it."""
        for view in (self.root, self.text) if self.text is not self.root else (self.root,):
            for key in ("dtype", "torch_dtype"):
                raw = view.data.get(key)
                if raw is None:
                    continue
                if not isinstance(raw, str):
                    raise view.error(key, f"is {raw!r} ({_kind(raw)}), expected a dtype name")
                dtype = canonical_model_dtype(raw)
                if dtype is None:
                    raise view.error(key, f"is {raw!r}, not a dtype oomtrace knows")
                return dtype, view.name(key)
        return None

    def context_tokens(self) -> tuple[str, int] | None:
        """The smallest context-length field present, as vLLM derives max_model_len."""
        found = [(v, k) for k in CONTEXT_KEYS if (v := self.text.opt_int(k)) is not None]
        if not found:
            return None
        value, key = min(found)
        return self.text.name(key), value


def read_config(path: Path) -> LoadedConfig:
    """Read ``path`` (a config.json file, or a model directory holding one)."""
    directory: Path | None = None
    file = path
    if error := special_file_error(path, "--config"):
        raise error
    if not path.exists():
        raise ConfigError(
            f"--config {path}: no such file or directory; pass a model's config.json "
            "or the directory that holds it"
        )
    if path.is_dir():
        directory = path
        file = path / "config.json"
        if not file.is_file():
            raise ConfigError(
                f"--config {path}: the directory has no config.json; pass the model directory "
                "that holds config.json, or the file itself"
            )
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{file}: cannot be read ({err}); pass a readable config.json") from err
    try:
        # Python's reader accepts Infinity/NaN, which real configs contain (Mamba-2,
        # Nemotron-H `time_step_limit`); strict JSON parsers reject those files.
        document = json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(
            f"{file}: not valid JSON (line {err.lineno} column {err.colno}: {err.msg}); "
            "pass the model's config.json"
        ) from err
    if not isinstance(document, dict):
        raise ConfigError(f"{file}: is {_kind(document)}, expected a JSON object (a config.json)")
    root = ConfigView(document, where=str(file))
    nested = document.get("text_config")
    if nested is not None and not isinstance(nested, dict):
        raise root.error("text_config", f"is {_kind(nested)}, expected an object")
    text_view = ConfigView(nested, where=str(file), prefix="text_config.") if nested else root
    return LoadedConfig(root=root, text=text_view, file=file, directory=directory)
