"""A per-user cache for work that is the same on every run (the report's bundled JavaScript, the
static SVG of a chart already drawn): computed once, then read back.

The folder is ``$OOMTRACE_CACHE_DIR`` when set, else the platform's user cache folder
(``~/.cache/oomtrace`` on Linux, ``~/Library/Caches/oomtrace`` on macOS, from ``platformdirs``).
Entries are named by everything that decides their content (library versions, a hash of the
input), so a stale entry is never read: a new version writes a new name. The cache is an
optimisation only: a folder that cannot be written is logged once and the value is computed
anyway; a file is written to a temporary name and renamed, so a reader never sees half of one.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Final

logger = logging.getLogger(__name__)

ENV: Final = "OOMTRACE_CACHE_DIR"


def cache_dir() -> Path:
    """The cache folder (not created here)."""
    given = os.environ.get(ENV)
    if given:
        return Path(given)
    import platformdirs  # noqa: PLC0415 - only when the cache is used

    return platformdirs.user_cache_path("oomtrace", appauthor=False)


def key(*parts: str) -> str:
    """A file-name-safe digest of ``parts`` (24 hex digits: collisions are not a concern)."""
    digest = hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()
    return digest[:24]


def cached_text(folder: str, name: str, make: Callable[[], str], *, keep: int = 0) -> str:
    """The text stored as ``folder/name`` in the cache, or ``make()`` stored there first. With
    ``keep``, a folder that grows past that many entries loses its least recently written ones
    (entries keyed by content accumulate; those keyed by version do not)."""
    path = cache_dir() / folder / name
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        pass
    text = make()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        temporary.write_text(text, encoding="utf-8")
        temporary.replace(path)
        if keep:
            _prune(path.parent, keep)
    except OSError as err:
        logger.debug("cache %s not written: %s", path, err)
    return text


def _prune(folder: Path, keep: int) -> None:
    entries = sorted(folder.iterdir(), key=lambda p: p.stat().st_mtime_ns, reverse=True)
    for old in entries[keep:]:
        old.unlink(missing_ok=True)
