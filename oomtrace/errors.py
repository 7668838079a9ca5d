"""One small error hierarchy, caught once at the CLI boundary.

Every message names the input it is about and the remedy, so that the CLI can print it as one
line. Library code raises these (chaining the cause with ``raise ... from err``); only
``oomtrace.cli`` turns them into exit codes.
"""


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
