"""Settings for the whole suite, and which tests a plain run leaves out.

``python -m pytest`` runs every test but the opt-in ones: marked ``slow`` (several seconds even
on an idle machine: many real processes, large inputs), ``browser`` (a headless Chromium) or
``vllm`` (a real vLLM engine, many minutes). ``python -m pytest --full`` runs them too; that is
what ``.ci/run`` does. An opt-in test also runs when its file is named on the command line, or
when ``-m`` selects it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from oomtrace.user_cache import ENV

# Tests never time things (speed targets live in benchmarks/): Hypothesis' per-example deadline
# would fail a correct property on a loaded CI machine, so it is off for every test.
settings.register_profile("oomtrace", deadline=None)
settings.load_profile("oomtrace")

OPT_IN = ("slow", "browser", "vllm")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--full",
        action="store_true",
        help=f"also run the opt-in tests (marked {', '.join(OPT_IN)}): what .ci/run does",
    )


def _named_files(config: pytest.Config) -> set[Path]:
    """Test files named on the command line (naming a folder does not opt in its tests)."""
    if config.args_source is not pytest.Config.ArgsSource.ARGS:
        return set()
    here = config.invocation_params.dir
    paths = (Path(here, arg.split("::", 1)[0]).resolve() for arg in config.args)
    return {path for path in paths if path.is_file()}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("full") or config.getoption("markexpr"):
        return
    named = _named_files(config)
    left_out = [
        item
        for item in items
        if any(item.get_closest_marker(m) for m in OPT_IN) and item.path.resolve() not in named
    ]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        chosen = set(map(id, left_out))
        items[:] = [item for item in items if id(item) not in chosen]


@pytest.fixture(autouse=True, scope="session")
def _user_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The report's cache (bundled JavaScript, chart SVGs) goes to a folder of this session,
    not the user's: a test never reads what another run left (processes the tests start
    inherit it)."""
    previous = os.environ.get(ENV)
    os.environ[ENV] = str(tmp_path_factory.mktemp("user-cache"))
    yield
    if previous is None:
        os.environ.pop(ENV, None)
    else:
        os.environ[ENV] = previous
