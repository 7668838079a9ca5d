"""Prometheus metrics: exposition text, one scrape or many (:mod:`.text_parser`, also the
collector's live scrapes through ``parse_scrapes``), and HTTP API query JSON
(:mod:`.query_parser`). Both read into one raw frame that :mod:`.canonical_map` maps through the
dialect table (:mod:`.dialects`)."""
