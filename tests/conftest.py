"""Settings for the whole suite."""

from __future__ import annotations

from hypothesis import settings

# Tests never time things (speed targets live in benchmarks/): Hypothesis' per-example deadline
# would fail a correct property on a loaded CI machine, so it is off for every test.
settings.register_profile("oomtrace", deadline=None)
settings.load_profile("oomtrace")
