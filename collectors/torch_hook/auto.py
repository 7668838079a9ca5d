"""Importing this module starts the PyTorch hook when ``OOMTRACE_TORCH_HOOK_DIR`` is set."""

from collectors.torch_hook import install_from_environment

install_from_environment()
