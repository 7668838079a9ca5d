"""Memory stays bounded whatever the input: a file that decompresses past the cap is refused
before it is parsed (with the flag that raises the cap), and a line over 8 MiB is skipped and
counted, never gathered whole."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from click.testing import CliRunner

from oomtrace.cli import cli
from oomtrace.errors import InputError
from oomtrace.ingest import IngestOptions, ingest_paths
from oomtrace.ingest.text.input_file import MAX_LINE_BYTES, InputFile

STATS = (
    "INFO 03-11 06:18:{s:02d} [loggers.py:80] Avg prompt throughput: 0.5 tokens/s, Avg "
    "generation throughput: 0.7 tokens/s, Running: {s} reqs, Waiting: 0 reqs, GPU KV cache "
    "usage: 5.0%, Prefix cache hit rate: 0.0%\n"
)


def stats_lines(n: int) -> str:
    return "".join(STATS.format(s=i % 60) for i in range(n))


def test_a_gzip_that_decompresses_past_the_cap_is_refused_with_the_flag(tmp_path: Path) -> None:
    # GIVEN a small gzip of valid lines that decompresses to 4 MiB
    text = stats_lines(4 * 1024 * 1024 // len(STATS.format(s=10)) + 1)
    path = tmp_path / "vllm.log.gz"
    path.write_bytes(gzip.compress(text.encode(), compresslevel=9))
    assert path.stat().st_size < 200_000
    # WHEN it is ingested with a 1 MiB cap THEN it is refused, naming the file and the flag
    with pytest.raises(InputError) as refused:
        ingest_paths([path], IngestOptions(max_input_bytes=1 << 20))
    message = str(refused.value)
    assert message.startswith("vllm.log.gz: more than 1.00 MiB once decompressed")
    assert "--max-input-size" in message
    # and with the cap raised it is read
    trace = ingest_paths([path], IngestOptions(max_input_bytes=8 << 20))
    assert trace.samples.height > 0


def test_a_plain_file_over_the_cap_is_refused_by_its_size(tmp_path: Path) -> None:
    path = tmp_path / "vllm.log"
    path.write_text(stats_lines(20_000))
    with pytest.raises(InputError, match=r"^vllm\.log: .* over the .* read per input"):
        ingest_paths([path], IngestOptions(max_input_bytes=1 << 20))


def test_the_cap_is_a_command_line_option(tmp_path: Path) -> None:
    path = tmp_path / "vllm.log"
    path.write_text(stats_lines(20_000))
    out = tmp_path / "trace"
    refused = CliRunner().invoke(
        cli, ["ingest", str(path), "-o", str(out), "--max-input-size", "1MiB"]
    )
    assert refused.exit_code == 2
    assert "--max-input-size" in refused.output
    read = CliRunner().invoke(
        cli, ["ingest", str(path), "-o", str(out), "--max-input-size", "8MiB"]
    )
    assert read.exit_code == 0, read.output


@pytest.mark.parametrize("gz", [False, True])
def test_a_line_over_8_mib_is_skipped_and_counted(tmp_path: Path, gz: bool) -> None:
    # GIVEN a log whose second line is longer than 8 MiB
    long_line = "INFO 03-11 06:18:51 [logger.py:39] Received request r: prompt: '" + "x" * (
        MAX_LINE_BYTES + 1
    )
    text = STATS.format(s=1) + long_line + "'\n" + STATS.format(s=2)
    path = tmp_path / ("vllm.log.gz" if gz else "vllm.log")
    path.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    # WHEN its lines are read in chunks smaller than the line
    from oomtrace.diagnostics import SourceDiagnostics

    diag = SourceDiagnostics("vllm.log", "test", "n")
    chunks = list(InputFile(path, path.name).line_chunks(diag, chunk_bytes=1 << 20))
    lines = [line for chunk in chunks for line in chunk.lines.to_list()]
    # THEN the two short lines are read, and the long one is counted, not kept
    assert lines == [STATS.format(s=1)[:-1], STATS.format(s=2)[:-1]]
    assert diag.skipped["line longer than 8 MiB (not read)"].count == 1
    assert diag.lines_read == 3
