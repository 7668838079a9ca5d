"""SGLang server logs: :mod:`.log_parser` reads them chunk by chunk, :mod:`.extract` turns the
lines of each kind into rows, and :mod:`.line_patterns` holds the version-dependent patterns,
each with a real sample."""
