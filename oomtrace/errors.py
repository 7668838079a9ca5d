"""One small error hierarchy, caught once at the CLI boundary.

Every message names the input it is about and the remedy, so that the CLI can print it as one
line. Library code raises these (chaining the cause with ``raise ... from err``); only
``oomtrace.cli`` turns them into exit codes.
"""

import stat
from collections.abc import Callable
from pathlib import Path

_SPECIAL: tuple[tuple[Callable[[int], bool], str], ...] = (
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


class OomtraceError(Exception):
    """Base class. ``exit_code`` is what the CLI exits with."""

    exit_code = 2


class UsageError(OomtraceError):
    """Options that contradict each other or are out of range."""


class InputError(OomtraceError):
    """An input (file, directory, value) that cannot be used at all."""


class UnitError(InputError):
    """A byte quantity with a missing, ambiguous or unknown unit."""


class ConfigError(InputError):
    """A model configuration the calculator cannot use or does not understand."""


class SchemaError(InputError):
    """A canonical table that does not match its declared schema."""


class DoesNotFitError(OomtraceError):
    """A budget that does not fit the device or the requested concurrency (a result, not a
    usage error, so that teams can gate CI on it)."""

    exit_code = 1


class NothingCollectedError(OomtraceError):
    """A collector run in which every source failed from start to end: the capture holds no
    evidence (a result of the run, exit 1, not a usage error)."""

    exit_code = 1


def special_file_error(path: Path, what: str = "") -> InputError | None:
    """The error for a ``path`` that exists but is neither a file nor a directory (a named pipe,
    a socket, a device), which is never opened: reading a pipe waits for a writer. None for
    anything else. ``what`` names the option (``--config``) in the message."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return None
    kind = next((name for test, name in _SPECIAL if test(mode)), None)
    if kind is None:
        return None
    return InputError(
        f"{what + ' ' if what else ''}{path}: {kind}, not a file; save what it carries to a "
        "file and pass that"
    )
