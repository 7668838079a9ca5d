"""oomtrace: which requests ran an LLM inference server out of GPU memory, and what limit would
have prevented it.

The library is the product; ``oomtrace.cli`` is a thin layer over it. Bulk data lives in Polars
frames whose schemas are declared in :mod:`oomtrace.schema`.
"""

__version__ = "0.1.0"
