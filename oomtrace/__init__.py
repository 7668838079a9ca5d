"""oomtrace: which requests ran an LLM inference server out of GPU memory, and what limit would
have prevented it.

The library is the product; ``oomtrace.cli`` is a thin layer over it. Bulk data lives in Polars
frames whose schemas are declared in :mod:`oomtrace.schema`.
"""

from oomtrace.user_cache import use_for_numba

__version__ = "0.1.0"

# Before any module imports numba: its compiled code goes to the user's cache, not the package.
use_for_numba()
