"""The check that a frame passed between two modules of a parser is the frame its schema
declares: names and dtypes, compared on the schema alone (no data is read, so it costs
microseconds wherever it runs). A mismatch is a bug in oomtrace, not in the input."""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from oomtrace.errors import SchemaError


def check_frame(
    frame: pl.DataFrame,
    schema: Mapping[str, pl.DataType],
    where: str,
    *,
    at_least: bool = False,
) -> pl.DataFrame:
    """``frame`` unchanged if it holds exactly the columns of ``schema`` with their dtypes (in any
    order), or, with ``at_least``, those columns among others; otherwise :class:`SchemaError`
    naming what differs."""
    actual = frame.schema
    missing = [name for name in schema if name not in actual]
    wrong = [
        f"{name} is {actual[name]}, not {dtype}"
        for name, dtype in schema.items()
        if name in actual and actual[name] != dtype
    ]
    extra = [] if at_least else [name for name in actual if name not in schema]
    if missing or wrong or extra:
        problems = [
            *([f"missing {', '.join(missing)}"] if missing else []),
            *wrong,
            *([f"unexpected {', '.join(extra)}"] if extra else []),
        ]
        raise SchemaError(
            f"{where}: the frame does not match its declared schema ({'; '.join(problems)}); "
            "this is a bug in oomtrace: please report it with the input that shows it"
        )
    return frame
