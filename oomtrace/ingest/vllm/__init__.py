"""vLLM server logs, every version family (V0 and V1). :mod:`.log_parser` is the parser; a chunk of
lines becomes records (:mod:`.line_records`, with the engine header read by :mod:`.log_header`),
records become partial tables (:mod:`.extract`, request lines by :mod:`.request_lines`), and once
the whole file is read the partial tables become canonical rows (:mod:`.file_tables`, the request
table by :mod:`.request_table`, the engine configuration by :mod:`.startup_config`). The frames
passed between these modules are declared in :mod:`.frames`. The patterns, each with a real
sample, are tables of data (:mod:`.line_patterns`, :mod:`.startup_patterns`,
:mod:`.request_patterns`); ``docs/formats/vllm.md`` says where in vLLM each comes from."""
