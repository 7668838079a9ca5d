"""PyTorch memory snapshots: exact allocator totals and peaks, the OOM entry, and untrusted
pickles that are refused before anything in them runs."""

from __future__ import annotations

import contextlib
import os
import pickle
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from oomtrace.cli import cli
from oomtrace.diagnostics import SourceDiagnostics
from oomtrace.errors import InputError
from oomtrace.ingest import IngestOptions, ingest_paths
from oomtrace.ingest.parser_api import ParseContext
from oomtrace.ingest.text.input_file import InputFile
from oomtrace.ingest.torch.snapshot_parser import PARSER
from oomtrace.trace import Trace
from oomtrace.units import MiB

DATA = Path(__file__).resolve().parents[3] / "data" / "torch"
MTIME = datetime(2025, 2, 1, 12, 0, tzinfo=UTC)
T0_US = 1_738_411_200_000_000  # 2025-02-01 12:00:00 UTC


def segment(device: int, total: int, allocated: int, **extra: Any) -> dict[str, Any]:
    """A segment as torch's _snapshot() writes it (block list shortened)."""
    return {
        "device": device,
        "address": 140_000_000_000 + total,
        "total_size": total,
        "allocated_size": allocated,
        "active_size": allocated,
        "requested_size": allocated,
        "stream": 0,
        "segment_type": "large",
        "segment_pool_id": (0, 0),
        "is_expandable": False,
        "frames": [],
        "blocks": [
            {
                "address": 1,
                "size": allocated,
                "requested_size": allocated,
                "state": "active_allocated",
                "frames": [],
            },
            {
                "address": 2,
                "size": total - allocated,
                "requested_size": 0,
                "state": "inactive",
                "frames": [],
            },
        ],
        **extra,
    }


def entry(action: str, size: int, t: int | None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"action": action, "addr": 1, "size": size, "stream": 0, "frames": []}
    if t is not None:
        out["time_us"] = T0_US + t
    return {**out, **extra}


def _trace(timed: bool = True) -> list[dict[str, Any]]:
    """A ring buffer that starts mid-history (4 MiB already allocated in 40 MiB reserved)."""

    def t(us: int) -> int | None:
        return us if timed else None

    return [
        entry("alloc", 8 * MiB, t(0)),
        entry("segment_alloc", 20 * MiB, t(100)),
        entry("alloc", 16 * MiB, t(100)),  # same microsecond: allocated peaks at 28 within it
        entry("free_requested", 16 * MiB, t(100)),
        entry("free_completed", 16 * MiB, t(100)),
        entry("alloc", 10 * MiB, t(200)),
        {
            "action": "oom",
            "device_free": 3 * MiB,
            "size": 30 * MiB,
            "stream": 0,
            "frames": [],
            **({"time_us": T0_US + 300} if timed else {}),
        },
        entry("free_completed", 10 * MiB, t(400)),
        entry("segment_free", 20 * MiB, t(500)),
    ]


def write_snapshot(path: Path, snapshot: object) -> Path:
    with path.open("wb") as out:
        pickle.dump(snapshot, out)  # what torch.cuda.memory._dump_snapshot does
    os.utime(path, (MTIME.timestamp(), MTIME.timestamp()))
    return path


def _ingest(path: Path) -> Trace:
    return ingest_paths([path], IngestOptions())


def _snapshot(timed: bool = True) -> dict[str, Any]:
    return {
        # at the dump: 40 MiB reserved, 12 MiB allocated on device 0; device 1 untraced
        "segments": [
            segment(0, 20 * MiB, 4 * MiB),
            segment(0, 20 * MiB, 8 * MiB),
            segment(1, 2 * MiB, MiB),
        ],
        "device_traces": [_trace(timed), []],
        "allocator_settings": {
            "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False",
            "max_split_size": -1,
            "roundup_power2_divisions": {"1": 0},
        },
    }


def _metric(trace: Trace, metric: str, device: int = 0) -> list[tuple[int, float]]:
    rows = trace.samples.filter((pl.col("metric") == metric) & (pl.col("device") == device)).sort(
        "ts"
    )
    return [
        (int((ts.timestamp() * 1e6) - T0_US), v) for ts, v in rows.select("ts", "value").iter_rows()
    ]


def test_trace_entries_rebuild_exact_totals_backwards_from_the_segments(tmp_path: Path) -> None:
    trace = _ingest(write_snapshot(tmp_path / "oom.pickle", _snapshot()))
    # allocated: 12 MiB at the dump, so 4 MiB before the first recorded alloc
    assert _metric(trace, "torch_allocated_bytes") == [
        (0, 12 * MiB),
        (100, 12 * MiB),
        (200, 22 * MiB),
        (300, 22 * MiB),
        (400, 12 * MiB),
        (500, 12 * MiB),
    ]
    assert _metric(trace, "torch_allocated_peak_bytes") == [(100, 28 * MiB)]
    assert _metric(trace, "torch_reserved_bytes") == [
        (0, 40 * MiB),
        (100, 60 * MiB),
        (200, 60 * MiB),
        (300, 60 * MiB),
        (400, 60 * MiB),
        (500, 40 * MiB),
    ]
    assert _metric(trace, "torch_reserved_bytes", device=1) == [(500, 2 * MiB)]
    assert _metric(trace, "torch_allocated_bytes", device=1) == [(500, MiB)]


def test_the_oom_entry_becomes_an_event_with_the_allocator_state_at_that_moment(
    tmp_path: Path,
) -> None:
    trace = _ingest(write_snapshot(tmp_path / "oom.pickle", _snapshot()))
    events = trace.events.drop("node", "source", "clock")
    expected = pl.DataFrame(
        {
            "ts": [datetime.fromtimestamp((T0_US + 300) / 1e6, tz=UTC)],
            "device": [0],
            "pid": [None],
            "kind": ["oom"],
            "requested_bytes": [30 * MiB],
            "total_bytes": [None],
            "free_bytes": [3 * MiB],
            "allocated_bytes": [22 * MiB],
            "reserved_unallocated_bytes": [38 * MiB],
            "process_bytes": [None],
            "detail": ["PyTorch memory snapshot: allocator OOM trace entry (device_free, size)"],
            "phase": [None],
            "proc": [None],
        },
        schema=events.schema,
    )
    assert_frame_equal(events, expected)
    assert trace.manifest.engine_config == {
        "pytorch_allocator_settings": {
            "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False",
            "max_split_size": -1,
        }
    }
    (diag,) = trace.manifest.sources
    assert (
        "device 0 at the dump: 2 segment(s), reserved 40.00 MiB, allocated 12.00 MiB, "
        "largest free block 16.00 MiB"
    ) in diag.notes
    assert diag.lines_recognised == diag.lines_read == 9


def test_without_event_times_only_the_dump_and_the_window_peak_are_kept(tmp_path: Path) -> None:
    trace = _ingest(write_snapshot(tmp_path / "old.pickle", _snapshot(timed=False)))
    device0 = trace.samples.filter(pl.col("device") == 0)
    assert device0.select("ts", "metric", "value").sort("metric").rows() == [
        (MTIME, "torch_allocated_bytes", 12 * MiB),
        (MTIME, "torch_allocated_peak_bytes", 28 * MiB),
        (MTIME, "torch_reserved_bytes", 40 * MiB),
        (MTIME, "torch_reserved_peak_bytes", 60 * MiB),
    ]
    assert trace.events["ts"].to_list() == [MTIME]
    (diag,) = trace.manifest.sources
    assert (
        "this snapshot has no event times: its 9 trace entries are in order but not in time, so "
        "only the totals at the dump (file modification time) and the peak of the recorded window "
        "are kept"
    ) in diag.notes


def test_a_real_snapshot_without_history_gives_the_totals_at_the_dump(tmp_path: Path) -> None:
    path = tmp_path / "dump_snapshot.pickle"
    shutil.copy(DATA / "docubox-no-trace.pickle", path)
    os.utime(path, (MTIME.timestamp(), MTIME.timestamp()))
    assert PARSER.sniff(InputFile(path, path.name).head(), path.name) == 0.95
    trace = _ingest(path)
    assert trace.samples.select("ts", "device", "metric", "value").rows() == [
        (MTIME, 0, "torch_reserved_bytes", 109051904.0),
        (MTIME, 0, "torch_allocated_bytes", 90861056.0),
    ]
    assert (
        trace.manifest.engine_config["pytorch_allocator_settings"]["expandable_segments"] is False
    )
    assert trace.manifest.sources[0].parser == "torch-memory-snapshot"


class _RunsCommand:
    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.system, (self.command,))


class _WritesFile:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        return (open, (self.path, "w"))


@pytest.mark.parametrize("payload", ["command", "file"])
def test_a_malicious_pickle_runs_nothing_and_is_a_clear_input_error(
    tmp_path: Path, payload: str
) -> None:
    marker = tmp_path / "pwned"
    evil: object = (
        _RunsCommand(f"touch {marker}") if payload == "command" else _WritesFile(str(marker))
    )
    path = write_snapshot(
        tmp_path / "dump_snapshot.pickle", {"segments": [], "device_traces": [[evil]]}
    )
    with pytest.raises(InputError) as err:
        _ingest(path)
    assert not marker.exists()
    target = "posix.system" if payload == "command" else "io.open"
    assert str(err.value) == (
        f"dump_snapshot.pickle: refused to load: it asks to construct {target}, which a PyTorch "
        "memory snapshot never does (it may be malicious); pass the pickle written by "
        "torch.cuda.memory._dump_snapshot"
    )


def test_the_cli_refuses_a_malicious_snapshot_with_exit_2(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = write_snapshot(tmp_path / "s.pickle", {"segments": [_RunsCommand(f"touch {marker}")]})
    result = CliRunner().invoke(cli, ["ingest", str(path), "--out", str(tmp_path / "t")])
    assert result.exit_code == 2
    assert not marker.exists()
    assert result.output.startswith(
        "oomtrace: error: s.pickle: refused to load: it asks to construct posix.system"
    )


def test_a_pickle_that_is_no_snapshot_is_named_as_such(tmp_path: Path) -> None:
    path = write_snapshot(tmp_path / "x.pickle", [1, 2, 3])
    with pytest.raises(InputError, match=r"^x.pickle: a pickle, but not a PyTorch memory snapshot"):
        ingest_paths([path], IngestOptions(format="torch-memory-snapshot"))


def test_a_truncated_pickle_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "cut.pickle"
    path.write_bytes(pickle.dumps(_snapshot())[:200])
    with pytest.raises(InputError, match=r"^cut.pickle: not a readable pickle \("):
        _ingest(path)


def _parse_bytes(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "s.pickle"
    path.write_bytes(data)
    with contextlib.suppress(InputError):
        PARSER.parse(
            InputFile(path, path.name), ParseContext(mtime=MTIME), SourceDiagnostics("s", "t", "n")
        )


@settings(
    max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None
)
@given(st.binary(max_size=400))
def test_arbitrary_bytes_give_a_result_or_an_input_error(tmp_path: Path, data: bytes) -> None:
    _parse_bytes(tmp_path, b"\x80\x04" + data)


_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=8)
)
_KEYS = st.sampled_from(
    [
        "device",
        "total_size",
        "allocated_size",
        "blocks",
        "state",
        "size",
        "action",
        "time_us",
        "device_free",
        "segments",
        "device_traces",
        "alloc",
        "oom",
    ]
)
_NESTED = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(_KEYS, inner, max_size=4)
        | st.tuples(inner, inner)
    ),
    max_leaves=25,
)


@settings(
    max_examples=80, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None
)
@given(segments=_NESTED, traces=_NESTED, settings_=_NESTED)
def test_arbitrary_nested_structures_give_a_result_or_an_input_error(
    tmp_path: Path, segments: object, traces: object, settings_: object
) -> None:
    snapshot = {"segments": segments, "device_traces": traces, "allocator_settings": settings_}
    _parse_bytes(tmp_path, pickle.dumps(snapshot))


@pytest.mark.parametrize(
    "snapshot",
    [
        {"segments": [segment(2**40, 2 * MiB, MiB)], "device_traces": []},
        {
            "segments": [segment(0, 2**52, 0)] * 2000,
            "device_traces": [[entry("alloc", 2**52, 1)] * 3],
        },
        {"segments": [segment(0, 2 * MiB, MiB)], "device_traces": [[entry("alloc", MiB, 2**70)]]},
    ],
    ids=["huge device number", "sizes beyond any device", "time beyond any clock"],
)
def test_damaged_numbers_are_refused_or_skipped_never_a_crash(
    tmp_path: Path, snapshot: dict[str, Any]
) -> None:
    _parse_bytes(tmp_path, pickle.dumps(snapshot))
