"""Package names loaded on first use (PEP 562), for packages whose modules are heavy to import.

``oomtrace.budget`` and ``oomtrace.terminal`` export their names this way: importing one light
module of the package (the CLI's option choices in ``budget.dtypes``) or one renderer must not load
every other module and its dependencies (Polars, the compiled replay simulator).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def exports(package: str, modules: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` that imports ``modules[name]`` when ``name`` is
    first read, and refuses a name it does not export as Python does."""

    def attribute(name: str) -> Any:
        module = modules.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    return attribute
