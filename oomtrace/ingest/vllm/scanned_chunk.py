"""A chunk of a large log read by the compiled scanner first (:mod:`._line_scan`, a C extension).

The scanner reads the request records and access lines of a busy server's log in one pass over
the bytes, and gives their fields as arrays. Every line it does not take is handed to the
vectorised reader as a string view into the chunk's bytes: nothing is copied until a field is
kept.

The scanner is built with the package (``oomtrace/ingest/vllm/_line_scan.c``); where it was not
(no C compiler), or for a small input (``chunk_reading.SCAN_MIN_BYTES``), every line goes to the
vectorised reader, and this module is never imported.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from itertools import pairwise
from typing import Final

import numpy as np
import polars as pl
import pyarrow as pa

from oomtrace.ingest.frame_check import check_frame
from oomtrace.ingest.text.input_file import TextChunk
from oomtrace.ingest.vllm import _line_scan as scanner
from oomtrace.ingest.vllm.frames import REQUEST_FIELDS, SCANNED_RUNS
from oomtrace.ingest.vllm.line_records import numbered_lines, piece_first_line
from oomtrace.ingest.vllm.skipped_lines import EXAMPLE_HEAD, PRIVATE, example_rows
from oomtrace.schema import TS

NO_TIME: Final = scanner.NO_TIME
# The lines a piece leaves to the vectorised reader are copied out of it where they hold at most
# this share of its bytes (see _lines).
OWN_SHARE: Final = 8


@dataclass(frozen=True)
class ScannedChunk:
    """A chunk as the scanner split it.

    * ``general``: ``record_seq`` and ``line`` of the lines the vectorised reader must read;
    * ``runs``: :data:`~.frames.SCANNED_RUNS`, the printed and full times of the request
      records the scanner read, a row per run of them (``_line_scan.scan_lines``);
      ``bracketed``: how many of those records had a bracketed header;
    * ``requests``: the ``record_seq``, :data:`~.frames.REQUEST_FIELDS` (their text copied out
      of the chunk), ``outer_ts`` and ``run`` of those records, but for an "Added request" right
      after its "Received request" (the request table would drop it:
      ``request_table.drop_told_additions``); ``records``: how many records there were;
    * ``access``: the count of access lines it read, and in ``access_head`` the few of them
      (``record_seq``, ``line``, ``has_header``) to choose the skipped-line example from;
    * ``lines``: how many lines it held, ``invalid_lines`` how many held invalid UTF-8;
    * ``widest``: the characters of its longest line, all kinds (0: unknown, a piece not all
      ASCII): the fold test of the lines left needs the chunk's
      (``text.split_records.find_split_records``).
    """

    general: pl.DataFrame
    runs: pl.DataFrame
    bracketed: int
    requests: pl.DataFrame
    records: int
    access: int
    access_head: pl.DataFrame
    lines: int
    invalid_lines: int = 0
    widest: int = 0


def scan_piece(piece: TextChunk, number: int) -> tuple[ScannedChunk, bool]:
    """The file's piece ``number`` read by the scanner, and whether the result still holds the
    piece's bytes (not where the lines it left were copied out: the piece can go). A piece with
    invalid UTF-8 is left to the vectorised reader whole, its bytes replaced and counted."""
    scanned = scan_chunk(piece, piece_first_line(number))
    if scanned is not None:
        return scanned
    general, bad = numbered_lines(piece, number)
    return ScannedChunk(
        general, _NO_RUNS, 0, _NO_REQUESTS, 0, 0, _NO_ACCESS, general.height, bad
    ), True


def joined(parts: list[ScannedChunk]) -> ScannedChunk:
    """Consecutive pieces of a file read as one chunk: the vectorised reader's work on the
    lines the scanner leaves costs per call, not per line, so a chunk is several of the pieces
    the file is read in."""
    if len(parts) == 1:
        return parts[0]
    # Runs are numbered within each piece: from the piece's first run on in the whole.
    offsets = np.cumsum([0, *(part.runs.height for part in parts[:-1])])
    return ScannedChunk(
        general=pl.concat([part.general for part in parts]),
        runs=pl.concat([part.runs for part in parts]),
        bracketed=sum(part.bracketed for part in parts),
        requests=pl.concat(
            part.requests.with_columns(pl.col("run") + int(offset))
            for part, offset in zip(parts, offsets, strict=True)
        ),
        records=sum(part.records for part in parts),
        access=sum(part.access for part in parts),
        access_head=pl.concat([part.access_head for part in parts]),
        lines=sum(part.lines for part in parts),
        invalid_lines=sum(part.invalid_lines for part in parts),
        widest=max(part.widest for part in parts),
    )


def scan_chunk(piece: TextChunk, first_line: int) -> tuple[ScannedChunk, bool] | None:
    """``piece`` read by the scanner, its lines numbered from ``first_line``, and whether the
    result holds its bytes (see :func:`scan_piece`); None when it holds invalid UTF-8 (the
    vectorised reader then reads it all, replacing and counting the bytes)."""
    buf = np.frombuffer(piece.data, np.uint8, count=piece.size)
    general, access, records, runs, ids = outputs = _outputs(buf)
    scanned = scanner.scan_lines(buf, *outputs)
    if scanned is None:  # more lines than the outputs have room for: count them, read again
        general, access, records, runs, ids = outputs = _outputs(buf, scanner.count_lines(buf))
        scanned = scanner.scan_lines(buf, *outputs)
        if scanned is None:
            raise AssertionError("the scanner's outputs hold a column per line")
    n_general, n_access, n_records, n_runs, n, non_ascii, widest = scanned
    if non_ascii and not _valid_utf8(piece):
        return None
    general, access = general[:, :n_general], access[:, :n_access]
    records, runs = records[:, :n_records], runs[:, :n_runs]
    head = access[:, : EXAMPLE_HEAD + 1]
    head_lines = _views(piece.data, buf, head[scanner.L_START], head[scanner.L_STOP])
    if n_access > EXAMPLE_HEAD and head_lines.head(EXAMPLE_HEAD).str.contains(PRIVATE).all():
        head = access
        head_lines = _views(piece.data, buf, head[scanner.L_START], head[scanner.L_STOP])
    head = head[:, example_rows(head_lines).to_numpy()]
    (general_lines, head_lines), held = _lines(piece, buf, [general, head])
    return ScannedChunk(
        general=pl.DataFrame(
            {"record_seq": _seq(general[scanner.L_LINE], first_line), "line": general_lines}
        ),
        runs=_runs(records, runs, first_line),
        bracketed=int(records[scanner.R_BRACKETED].sum()),
        requests=_requests(records, first_line, ids),
        records=n_records,
        access=n_access,
        access_head=pl.DataFrame(
            {"record_seq": _seq(head[scanner.L_LINE], first_line), "line": head_lines}
        ).with_columns(has_header=pl.lit(value=False)),
        lines=n,
        widest=0 if non_ascii else widest,  # bytes are characters where all are ASCII
    ), held


def _lines(
    piece: TextChunk, buf: np.ndarray, parts: list[np.ndarray]
) -> tuple[list[pl.Series], bool]:
    """The lines of each of ``parts`` (rows :data:`_line_scan.L_START`, ``L_STOP``) as strings,
    and whether they hold the piece's bytes. Few (at most 1/:data:`OWN_SHARE` of the piece's
    bytes: a busy server's log, whose lines the scanner reads nearly all), they are copied into
    a buffer of their own, and the piece can go; else they are views into the piece."""
    starts = [np.ascontiguousarray(part[scanner.L_START]) for part in parts]
    stops = [np.ascontiguousarray(part[scanner.L_STOP]) for part in parts]
    sizes = [stop - start for start, stop in zip(starts, stops, strict=True)]
    total = sum(int(size.sum()) for size in sizes)
    if total * OWN_SHARE > piece.size:
        views = [_views(piece.data, buf, *span) for span in zip(starts, stops, strict=True)]
        return views, True
    size = np.concatenate(sizes)
    new_stop = np.cumsum(size)
    new_start = new_stop - size
    own = buf[np.repeat(np.concatenate(starts) - new_start, size) + np.arange(total)]
    bounds = np.cumsum([0, *(len(part) for part in sizes)])
    return [_views(own, own, new_start[a:b], new_stop[a:b]) for a, b in pairwise(bounds)], False


class _Outputs(threading.local):
    """The scanner's output arrays, kept by each thread from piece to piece. Fresh ones cost as
    much as the scan itself: the kernel zeroes every page a new array touches (``perf record``
    of a 1 GB ingest: a tenth of the command's CPU). Nothing in them outlives a piece: what is
    kept is copied out (:func:`scan_chunk`)."""

    arrays: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
    ids: np.ndarray | None = None


_SCRATCH: Final = _Outputs()


def _outputs(
    buf: np.ndarray, lines: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """This thread's outputs for the piece ``buf``: ``general``, ``access``, ``records``,
    ``runs`` (a column per line: those of the pieces before, or ``lines`` at least) and ``ids``
    (a byte per byte). The scanner counts lines as it reads and says when the columns were too
    few; only a thread's first piece is counted before it is read."""
    arrays = _SCRATCH.arrays
    if arrays is None or arrays[0].shape[1] < lines:
        if arrays is None and not lines:
            lines = scanner.count_lines(buf)
        columns = lines + lines // 4  # a few more: the next piece may hold more lines

        def rows(count: int) -> np.ndarray:
            return np.empty((count, columns), np.int64)

        arrays = (
            rows(scanner.LINE_FIELDS),
            rows(scanner.LINE_FIELDS),
            rows(scanner.RECORD_FIELDS),
            rows(scanner.RUN_FIELDS),
        )
        _SCRATCH.arrays = arrays
    ids, size = _SCRATCH.ids, buf.shape[0]
    if ids is None or ids.shape[0] < size:
        ids = _SCRATCH.ids = np.empty(size + size // 4, np.uint8)
    return (*arrays, ids)


def _seq(lines: np.ndarray, first_line: int) -> np.ndarray:
    """``record_seq`` of lines numbered within their piece (see :mod:`.frames`)."""
    return (lines + first_line) * 256


def _outer_ts(ns: np.ndarray) -> pl.Series:
    return pl.Series(ns).set(pl.Series(ns == NO_TIME), None).cast(TS)


def _runs(records: np.ndarray, runs: np.ndarray, first_line: int) -> pl.DataFrame:
    last = runs[scanner.RUN_LAST]
    frame = pl.DataFrame(
        {
            "record_seq": _seq(records[scanner.R_LINE, last], first_line),
            "printed_month_day": records[scanner.R_MONTH_DAY, last].astype(np.int32),
            "printed_second_of_day": records[scanner.R_SECOND, last].astype(np.int32),
            "outer_ts": _outer_ts(records[scanner.R_OUTER, last]),
            "weight": runs[scanner.RUN_WEIGHT].astype(np.uint32),
        }
    )
    return check_frame(frame, SCANNED_RUNS, "scanned runs")


def _requests(records: np.ndarray, first_line: int, ids: np.ndarray) -> pl.DataFrame:
    """The request fields (:data:`~.frames.REQUEST_FIELDS`) of the scanner's records, as
    :func:`~.request_lines.read_requests` makes them of the same lines; their ids are in
    ``ids``, copied there by the scanner."""
    keep = np.flatnonzero(records[scanner.R_TOLD] == 0)

    def field(row: int) -> np.ndarray:
        return np.take(records[row], keep)

    starts, stops = field(scanner.R_ID_START), field(scanner.R_ID_STOP)
    # A buffer of their own size: the rows are kept to the end of the file.
    kept = ids[: stops[-1] if stops.shape[0] else 0].copy()
    kind = field(scanner.R_KIND)
    frame = pl.DataFrame(
        {
            "record_seq": _seq(field(scanner.R_LINE), first_line),
            "request_id": _views(kept, kept, starts, stops),
            "event": _EVENTS.gather(kind - scanner.RECEIVED),
            "_kind": kind,
            "_max": field(scanner.R_MAX_TOKENS),
            "_n": field(scanner.R_N),
            "_best_of": field(scanner.R_BEST_OF),
            "_logprobs": field(scanner.R_LOGPROBS),
            "_prompt_logprobs": field(scanner.R_PROMPT_LOGPROBS),
            "_prompt": field(scanner.R_PROMPT_TOKENS),
            "_params_first": field(scanner.R_PARAMS_FIRST) == 1,
            "outer_ts": _outer_ts(field(scanner.R_OUTER)),
            "run": field(scanner.R_RUN),
        }
    ).select(_REQUEST_COLUMNS)
    return check_frame(frame, _REQUESTS, "scanned requests")


def _request_columns() -> list[pl.Expr]:
    """:func:`_requests`' columns from the scanner's fields (-1 for null), built once."""
    arrived = pl.col("_kind") == scanner.RECEIVED
    known = pl.col("_prompt") >= 0

    def stated(name: str) -> pl.Expr:
        return pl.when(arrived & (pl.col(f"_{name}") >= 0)).then(pl.col(f"_{name}")).alias(name)

    return [
        pl.col("record_seq"),
        pl.col("request_id"),
        pl.col("event"),
        pl.when(arrived & known).then(pl.col("_prompt")).alias("prompt_tokens"),
        pl.when(arrived & (pl.col("_max") >= 0)).then(pl.col("_max")).alias("max_tokens"),
        pl.lit(None, pl.Int64).alias("output_tokens"),
        *(stated(name) for name in ("n", "best_of", "logprobs", "prompt_logprobs")),
        pl.col("event").alias("line_kind"),
        (arrived & known & pl.col("_params_first")).alias("count_may_be_capped"),
        pl.col("outer_ts"),
        pl.col("run"),
    ]


_REQUEST_COLUMNS: Final = _request_columns()
# What each kind of record is in the request table (_line_scan's RECEIVED, ADDED, ABORTED).
_EVENTS: Final = pl.Series(["arrived", "admitted", "aborted"])
_REQUESTS: Final = pl.Schema(
    {"record_seq": pl.Int64(), **REQUEST_FIELDS, "outer_ts": TS, "run": pl.Int64()}
)
_NO_RUNS: Final = pl.DataFrame(schema=SCANNED_RUNS)
_NO_REQUESTS: Final = pl.DataFrame(schema=_REQUESTS)
_NO_ACCESS: Final = pl.DataFrame(
    schema={"record_seq": pl.Int64(), "line": pl.String(), "has_header": pl.Boolean()}
)


def _views(
    data: bytes | np.ndarray, buf: np.ndarray, starts: np.ndarray, stops: np.ndarray
) -> pl.Series:
    """``data[starts[k]:stops[k]]`` (``buf`` is ``data`` as an array) as a Polars string column
    of views into ``data``: the text stays where it is (it is valid UTF-8, cut at ASCII
    bytes)."""
    views = np.empty((starts.shape[0], 16), np.uint8)
    if starts.shape[0]:
        scanner.write_views(buf, np.ascontiguousarray(starts), np.ascontiguousarray(stops), views)
    return _from_views(views, data)


def _from_views(views: np.ndarray, data: bytes | np.ndarray) -> pl.Series:
    array = pa.Array.from_buffers(
        pa.string_view(), views.shape[0], [None, pa.py_buffer(views), pa.py_buffer(data)]
    )
    # Handed over through the Arrow C data interface, as is (the buffers stay pyarrow's until
    # Polars releases them): pl.from_arrow costs about 0.6 ms a call and loads pyarrow.compute.
    return pl.Series(_ArrowArray(array))


class _ArrowArray:
    """An Arrow array as Polars takes it through the PyCapsule interface, and nothing else."""

    def __init__(self, array: pa.Array) -> None:
        self._array = array

    def __arrow_c_array__(self, requested_schema: object = None) -> tuple[object, object]:
        return self._array.__arrow_c_array__(requested_schema)  # type: ignore[no-any-return]


def _valid_utf8(piece: TextChunk) -> bool:
    try:
        pl.Series([piece.data[: piece.size]], dtype=pl.Binary).cast(pl.String)
    except pl.exceptions.ComputeError:
        return False
    return True
