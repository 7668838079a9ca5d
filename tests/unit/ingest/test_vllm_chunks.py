"""How the vLLM parser reads a file chunk by chunk: what it keeps, and what it lets go."""

from __future__ import annotations

import polars as pl

from oomtrace.ingest.vllm_extract import Extracted


def _buffer_bytes(column: pl.Series) -> int:
    """Bytes of the text buffers ``column`` holds on to (views into shared buffers count whole)."""
    array = column.to_arrow(compat_level=pl.CompatLevel.newest())
    return sum(buffer.size for buffer in array.buffers()[2:] if buffer is not None)


def test_rows_kept_from_a_chunk_do_not_hold_on_to_the_chunks_text() -> None:
    # GIVEN a chunk of long lines, of which a few rows are kept as slices of the line
    lines = pl.Series("line", [f"{i:08d} " + "x" * 400 for i in range(20_000)])
    kept = lines.head(3).str.slice(0, 8).to_frame("body")
    assert _buffer_bytes(kept["body"]) > 1_000_000
    chunk = Extracted(ooms=[kept], requests=[kept.rename({"body": "request_id"})])
    # WHEN they are added to what the file keeps
    out = Extracted()
    out.merge(chunk)
    # THEN they hold their own text only, and it is unchanged
    assert _buffer_bytes(out.ooms[0]["body"]) < 1_000
    assert _buffer_bytes(out.requests[0]["request_id"]) < 1_000
    assert out.ooms[0]["body"].to_list() == ["00000000", "00000001", "00000002"]
