"""Developer tools that are not part of the installed package (sample incident generator)."""
