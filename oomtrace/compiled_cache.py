"""Where numba keeps the machine code it compiles for oomtrace (the vLLM line scanner, the
replay kernel): the user's cache directory, never the installed package's folder (which may be
read-only, shared by several users, or wiped by a reinstall).

numba reads ``NUMBA_CACHE_DIR`` once, when it is first imported; the package sets it before any
module of its own imports numba. A directory the user chose (``NUMBA_CACHE_DIR`` already set)
is kept.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def user_cache_dir() -> Path:
    """oomtrace's folder in the user's cache: ``$XDG_CACHE_HOME/oomtrace`` (``~/.cache``
    unset), ``~/Library/Caches/oomtrace`` on macOS, ``%LOCALAPPDATA%\\oomtrace`` on Windows."""
    if sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    elif sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "oomtrace"


def use_user_cache() -> None:
    """Point numba's cache at :func:`user_cache_dir` unless the user chose a folder."""
    os.environ.setdefault("NUMBA_CACHE_DIR", str(user_cache_dir() / "numba"))
