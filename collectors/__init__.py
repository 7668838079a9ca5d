"""The node-side agent: samples a serving node into crash-safe segments.

Runs beside a production inference server, so it depends on the standard library only (plus
``nvidia-ml-py`` for ``--nvml``) and never imports the analyzer. Entry points: ``python -m
collectors`` / ``oomtrace collect`` (the agent), ``collectors.torch_hook`` (inside a PyTorch
server), ``collectors.segments.read_capture`` (reading a capture back).
"""

__version__ = "0.1.0"
