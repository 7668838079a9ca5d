"""Sniffing, merging several inputs of one incident, and the errors for unusable inputs."""

from __future__ import annotations

import gzip
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest

from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.errors import InputError, OomtraceError, UsageError
from oomtrace.ingest import IngestOptions, ingest_paths, inspect_path, load_any, registry
from oomtrace.ingest.parser_api import ParseContext, Parser, ParseResult
from oomtrace.ingest.text.input_file import InputFile
from oomtrace.trace import write_trace


class CsvUsage:
    """A tiny test format: ``usage,<epoch seconds>,<ratio>`` lines."""

    name = "usage-csv"
    description = "test format"

    def sniff(self, head: str, name: str) -> float:
        return 0.9 if head.startswith("usage,") else 0.0

    def parse(self, source: InputFile, ctx: ParseContext, diag: SourceDiagnostics) -> ParseResult:
        frames = []
        for chunk in source.line_chunks(diag):
            parts = (
                chunk.lines.str.split(",").list.to_struct(fields=["k", "t", "v"]).struct.unnest()
            )
            ok = parts.filter(pl.col("k") == "usage")
            diag.lines_recognised += ok.height
            bad = parts.filter(pl.col("k") != "usage")
            diag.skip("not a usage line", bad.height, bad["k"].first())
            frames.append(
                ok.select(
                    ts=pl.from_epoch(
                        pl.col("t").cast(pl.Int64), time_unit="s"
                    ).dt.replace_time_zone("UTC"),
                    metric=pl.lit("kv_usage_ratio"),
                    value=pl.col("v").cast(pl.Float64),
                )
            )
        result = ParseResult(samples=pl.concat(frames))
        result.engine_config = {"block_size": 16}
        return result


class Events:
    name = "events-txt"
    description = "test format 2"

    def sniff(self, head: str, name: str) -> float:
        return 0.7 if "OOM" in head else 0.0

    def parse(self, source: InputFile, ctx: ParseContext, diag: SourceDiagnostics) -> ParseResult:
        n = sum(c.lines.len() for c in source.line_chunks(diag))
        frame = pl.DataFrame({"ts": [datetime(2025, 1, 1, tzinfo=UTC)] * n, "kind": ["oom"] * n})
        return ParseResult(events=frame, engine_config={"block_size": 32}, host="gpu-host-7")


PARSERS: dict[str, Parser] = {"usage-csv": CsvUsage(), "events-txt": Events()}


def _write(tmp_path: Path) -> tuple[Path, Path]:
    a = tmp_path / "inc" / "metrics.csv"
    a.parent.mkdir()
    a.write_text("usage,1735689600,0.5\nusage,1735689601,0.9\nheader\n")
    b = tmp_path / "inc" / "crash.txt.gz"
    b.write_bytes(gzip.compress(b"OOM here\n"))
    return a, b


def test_files_of_one_incident_merge_into_one_trace(tmp_path: Path) -> None:
    a, b = _write(tmp_path)
    trace = ingest_paths([a, b], IngestOptions(), PARSERS)
    assert trace.samples["value"].to_list() == [0.5, 0.9]
    assert trace.events.height == 1
    assert trace.samples["source"].unique().to_list() == ["usage-csv:metrics.csv"]
    assert trace.manifest.nodes == ["gpu-host-7"]
    assert set(trace.samples["node"]) == {"gpu-host-7"}
    metrics, crash = trace.manifest.sources
    assert metrics.skipped["not a usage line"].count == 1
    assert metrics.rows == {"events": 0, "requests": 0, "samples": 2}
    assert metrics.first_ts == "2025-01-01T00:00:00.000000Z"
    assert crash.notes == ["engine_config.block_size = 32 here disagrees with 16; kept the first"]


def test_node_option_wins_and_folders_expand_skipping_docs(tmp_path: Path) -> None:
    _write(tmp_path)
    (tmp_path / "inc" / "README.md").write_text("usage,1,1\n")
    (tmp_path / "inc" / "unknown.bin").write_bytes(b"\x00\x01")
    trace = ingest_paths([tmp_path / "inc"], IngestOptions(node="n1"), PARSERS)
    names = [s.name for s in trace.manifest.sources]
    assert names == ["inc/crash.txt.gz", "inc/metrics.csv", "inc/unknown.bin"]
    assert trace.manifest.sources[2].parser == "unrecognised"
    assert trace.manifest.nodes == ["n1"]


def test_a_named_file_nobody_recognises_is_an_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "x.txt"
    path.write_text("hello\n")
    with pytest.raises(InputError) as err:
        ingest_paths([path], IngestOptions(), PARSERS)
    assert str(err.value) == (
        "x.txt: no known format; no parser recognised it (tried: events-txt, usage-csv); "
        "pass --format"
    )


def test_a_refusal_says_what_the_file_looks_like_and_what_to_pass(tmp_path: Path) -> None:
    # https://github.com/GAIR-NLP/LIMO/issues/29: vLLM's preemption warning, its head cut off
    quoted = tmp_path / "issue.txt"
    quoted.write_text(
        " Sequence group 221 is preempted by PreemptionMode.RECOMPUTE mode because there is not "
        "enough KV cache space.\nhow to solve this problem?\n"
    )
    with pytest.raises(InputError) as err:
        ingest_paths([quoted], IngestOptions(), PARSERS)
    assert str(err.value) == (
        "issue.txt: no known format: it quotes vLLM's messages without the `INFO MM-DD "
        "HH:MM:SS [file.py:N]` head that starts each vLLM record; no parser recognised it "
        "(tried: events-txt, usage-csv); pass the server's log as it was written (the file, "
        "`docker logs` or `journalctl`), not messages copied out of it"
    )
    trace = tmp_path / "trace.txt"
    trace.write_text('Traceback (most recent call last):\n  File "x.py", line 1\nKeyError: 3\n')
    with pytest.raises(InputError, match=r"it is a Python traceback with no out-of-memory"):
        ingest_paths([trace], IngestOptions(), PARSERS)


def test_binary_and_empty_files_say_so(tmp_path: Path) -> None:
    binary = tmp_path / "b.dat"
    binary.write_bytes(b"\x00\x01\x02")
    with pytest.raises(InputError, match=r"^b.dat: binary data; no parser"):
        ingest_paths([binary], IngestOptions(), PARSERS)
    empty = tmp_path / "e.log"
    empty.write_text("")
    with pytest.raises(InputError, match=r"^e.log: the file is empty"):
        ingest_paths([empty], IngestOptions(), PARSERS)


@pytest.mark.parametrize("content", [b"", b"\n \n"], ids=["empty", "blank-lines"])
@pytest.mark.parametrize("name", sorted(registry()))
def test_every_forced_format_reads_an_empty_file_or_refuses_it(
    tmp_path: Path, name: str, content: bytes
) -> None:
    # GIVEN a file with no content, forced to one format (sniffing refuses it as empty)
    path = tmp_path / "x.txt"
    path.write_bytes(content)
    # WHEN it is ingested, THEN an empty trace or a typed refusal, never a crash (nvidia-smi's
    # monitor and gpustat readers built an untyped empty table and failed in Polars)
    try:
        trace = ingest_paths([path], IngestOptions(format=name))
    except OomtraceError:
        return
    assert trace.events.height == 0
    assert trace.samples.height == 0


def test_a_gzip_file_cut_before_its_first_block_says_so(tmp_path: Path) -> None:
    # GIVEN a gzip file cut after its header: nothing can be decompressed
    whole = gzip.compress(b"line one\nline two\n" * 100)
    cut = tmp_path / "x.log.gz"
    cut.write_bytes(whole[:10])
    # WHEN it is ingested, THEN the error names the file and the likely cause, not "no format"
    with pytest.raises(InputError) as err:
        ingest_paths([cut], IngestOptions(), PARSERS)
    assert str(err.value) == (
        "x.log.gz: the gzip stream holds no readable data (truncated or damaged before its "
        "first block); pass the whole file"
    )


def test_missing_paths_and_unknown_formats_and_zones_are_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file or directory"):
        ingest_paths([tmp_path / "nope.log"], IngestOptions(), PARSERS)
    a, _ = _write(tmp_path)
    with pytest.raises(UsageError, match="--format 'vllm': no such parser; choose one of"):
        ingest_paths([a], IngestOptions(format="vllm"), PARSERS)
    with pytest.raises(UsageError, match="unknown time zone"):
        IngestOptions(tz="Mars/Olympus")


def test_forcing_a_format_skips_sniffing(tmp_path: Path) -> None:
    path = tmp_path / "odd.txt"
    path.write_text("nothing to sniff\n")
    trace = ingest_paths([path], IngestOptions(format="events-txt"), PARSERS)
    assert trace.events.height == 1


def test_load_any_reads_trace_directories_as_they_are(tmp_path: Path) -> None:
    a, b = _write(tmp_path)
    write_trace(ingest_paths([a, b], IngestOptions(), PARSERS), tmp_path / "t")
    assert load_any([tmp_path / "t"], parsers=PARSERS).samples.height == 2
    assert load_any([a], parsers=PARSERS).samples.height == 2
    with pytest.raises(UsageError, match="is a trace directory; analyse it alone"):
        load_any([tmp_path / "t", a], parsers=PARSERS)


def test_inspect_names_the_parser(tmp_path: Path) -> None:
    a, _ = _write(tmp_path)
    item, trace = inspect_path(a, IngestOptions(), PARSERS)
    assert item.parser is not None
    assert item.parser.name == "usage-csv"
    assert trace.samples.height == 2


class GpuIndex:
    """States which device index each GPU UUID is (like an nvidia-smi --query-gpu capture)."""

    name = "gpu-index"
    description = "test format 3"

    def sniff(self, head: str, name: str) -> float:
        return 0.9 if head.startswith("index") else 0.0

    def parse(self, source: InputFile, ctx: ParseContext, diag: SourceDiagnostics) -> ParseResult:
        return ParseResult(device_index={"gpu-abc": 3, "0000:3b:00.0": 1})


class ProcessByUuid:
    """Per-process rows naming their GPU only by UUID or bus id, and a parser-given qualifier."""

    name = "proc-uuid"
    description = "test format 4"

    def sniff(self, head: str, name: str) -> float:
        return 0.9 if head.startswith("proc") else 0.0

    def parse(self, source: InputFile, ctx: ParseContext, diag: SourceDiagnostics) -> ParseResult:
        t = datetime(2025, 1, 1, tzinfo=UTC)
        frame = pl.DataFrame(
            {
                "ts": [t, t, t],
                "device_ref": ["GPU-ABC", "00000000:3B:00.0", "GPU-unknown"],
                "pid": [10, 11, 12],
                "metric": ["process_used_bytes"] * 3,
                "value": [1.0, 2.0, 3.0],
                "source": [None, "engine=1", None],
            }
        )
        return ParseResult(samples=frame)


def test_gpus_named_by_uuid_or_bus_id_are_placed_by_another_input(tmp_path: Path) -> None:
    # GIVEN per-process rows naming their GPU by UUID / bus id, and a file mapping them to indexes
    procs = tmp_path / "inc" / "procs.csv"
    procs.parent.mkdir()
    procs.write_text("proc\n")
    (tmp_path / "inc" / "gpus.csv").write_text("index\n")
    parsers: dict[str, Parser] = {"gpu-index": GpuIndex(), "proc-uuid": ProcessByUuid()}
    # WHEN both are ingested together
    trace = ingest_paths([tmp_path / "inc"], IngestOptions(), parsers)
    # THEN case and PCI-domain width do not matter, and an unknown UUID keeps a null device
    assert trace.samples.sort("pid")["device"].to_list() == [3, 1, None]
    notes = next(s for s in trace.manifest.sources if s.parser == "proc-uuid").notes
    assert len(notes) == 1
    assert notes[0].startswith("1 row(s) name their GPU only as GPU-unknown, which no input")
    # AND a parser-given source qualifier is appended to the source name
    assert trace.samples.sort("pid")["source"].to_list() == [
        "proc-uuid:inc/procs.csv",
        "proc-uuid:inc/procs.csv#engine=1",
        "proc-uuid:inc/procs.csv",
    ]


def test_without_a_mapping_input_device_references_stay_unknown(tmp_path: Path) -> None:
    procs = tmp_path / "procs.csv"
    procs.write_text("proc\n")
    trace = ingest_paths([procs], IngestOptions(), {"proc-uuid": ProcessByUuid()})
    assert trace.samples["device"].null_count() == 3
    assert "device_ref" not in trace.samples.columns
