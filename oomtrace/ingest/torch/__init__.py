"""PyTorch's own records of GPU memory: the CUDA caching allocator's out-of-memory text wherever
a log holds it (:mod:`.oom_text`, shared by every log parser), the ``pytorch-log`` parser for
any text log (:mod:`.log_parser`), and allocator memory snapshots (:mod:`.snapshot_parser`)."""
