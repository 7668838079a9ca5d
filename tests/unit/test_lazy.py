"""Packages that export their names on first use (:mod:`oomtrace.lazy`).

Python binds a submodule to its package's attribute of the same name once the submodule is
imported, after which the package's ``__getattr__`` is never asked: an exported name that is also
a submodule's name turns into that module as soon as anything imports the submodule (``oomtrace
inspect --formats`` once called the ``oomtrace.ingest.registry`` module instead of the function).
"""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import pytest

LAZY_PACKAGES = [
    "oomtrace.analysis",
    "oomtrace.budget",
    "oomtrace.ingest",
    "oomtrace.report",
    "oomtrace.terminal",
]


@pytest.mark.parametrize("name", LAZY_PACKAGES)
def test_no_exported_name_is_also_a_submodule(name: str) -> None:
    package = importlib.import_module(name)
    submodules = {info.name for info in pkgutil.iter_modules(package.__path__)}
    assert submodules, name
    assert not set(package.__all__) & submodules


@pytest.mark.parametrize("name", LAZY_PACKAGES)
def test_every_exported_name_resolves_after_every_submodule_is_imported(name: str) -> None:
    package = importlib.import_module(name)
    for info in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{name}.{info.name}")
    for exported in package.__all__:
        value = getattr(package, exported)
        assert not isinstance(value, type(sys)), f"{name}.{exported} is a module"


def test_inspect_lists_the_formats_in_a_fresh_process() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "oomtrace", "inspect", "--formats"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "vllm-log" in done.stdout
