"""``python -m oomtrace`` runs the command-line interface."""

from oomtrace.cli import main

main()
