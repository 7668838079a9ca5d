"""Run by Python at start-up when this directory is on PYTHONPATH (see
``python -m collectors.torch_hook --pythonpath``).

Starts the oomtrace PyTorch hook in this process when ``OOMTRACE_TORCH_HOOK_DIR`` is set (the
engine's worker processes inherit the environment, so they start it too), then runs the
``sitecustomize`` module this one shadows, if there is one. Never raises: a server must start
even when the hook cannot.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import logging
import os
import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent


def _load_collectors() -> None:
    """Make ``collectors`` importable even when the server runs in another environment than
    the one oomtrace was installed in, without putting that environment on sys.path."""
    if "collectors" in sys.modules or importlib.util.find_spec("collectors") is not None:
        return
    package = _HERE.parents[1]
    spec = importlib.util.spec_from_file_location(
        "collectors", package / "__init__.py", submodule_search_locations=[str(package)]
    )
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["collectors"] = module
    spec.loader.exec_module(module)


def _start_hook() -> None:
    if not os.environ.get("OOMTRACE_TORCH_HOOK_DIR"):
        return
    try:
        _load_collectors()
        from collectors.torch_hook import install_from_environment  # noqa: PLC0415

        install_from_environment()
    except Exception as err:  # noqa: BLE001 - the server must start regardless
        logging.getLogger("collectors.torch_hook").warning(
            "oomtrace torch hook not started: %s", err
        )


def _chain() -> None:
    others = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


_start_hook()
_chain()
