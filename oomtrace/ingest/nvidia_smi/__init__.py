"""nvidia-smi CSV captures (``--query-gpu`` and ``--query-compute-apps``): :mod:`.csv_parser`."""
