"""Alignment: the inputs of one incident put on one clock (years and zone offsets inferred from
what two inputs both saw; logs without times anchored), before they are merged. The entry is
:func:`align`; ``docs/formats/log-prefixes-and-times.md`` ("Aligning the inputs of one
incident") describes it for users."""

from oomtrace.ingest.alignment.align import align

__all__ = ["align"]
