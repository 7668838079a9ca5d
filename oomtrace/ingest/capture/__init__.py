"""Collector capture directories (segments and keep files): :mod:`.dir_parser`."""
