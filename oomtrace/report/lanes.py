"""Per-request swimlanes for the incident window.

Only the window is drawn, and at most ``max_lanes`` requests (every culprit, then the ones that
stored the most tokens), so a day-long trace gives a chart of the same size as a minute-long
one. The section says how many requests it leaves out.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Final

import polars as pl

from oomtrace.isotime import iso_time
from oomtrace.report import charts
from oomtrace.report.document import Chart, Section
from oomtrace.report.records import parse_time

LANE_COLUMNS: Final = ("request_id", "start", "end", "state", "stored_tokens", "kv_bytes")
TITLE: Final = "Requests in the incident window"


def incident_window(incident: Mapping[str, Any] | None) -> tuple[datetime, datetime] | None:
    """``start`` to the peak (or ``end``), with a tenth of the window after the peak so the
    reader sees what happened next."""
    if incident is None:
        return None
    start = parse_time(incident.get("start"))
    peak = parse_time(incident.get("peak_ts"))
    end = parse_time(incident.get("end")) or peak
    if start is None or end is None:
        return None
    margin = max((end - start) / 10, timedelta(seconds=1))
    return start, end + margin


def select_lanes(
    lanes: pl.DataFrame,
    window: tuple[datetime, datetime] | None,
    culprits: dict[str, int],
    max_lanes: int,
) -> tuple[pl.DataFrame, int]:
    """Segments inside ``window`` (clipped to it), for at most ``max_lanes`` requests; returns
    the frame and how many requests were in the window."""
    frame = lanes.select(*LANE_COLUMNS)
    if window is not None:
        low, high = window
        frame = frame.filter((pl.col("start") <= high) & (pl.col("end") >= low)).with_columns(
            pl.col("start").clip(lower_bound=low), pl.col("end").clip(upper_bound=high)
        )
    frame = frame.with_columns(
        pl.col("request_id")
        .replace_strict(culprits, default=None, return_dtype=pl.Int64)
        .alias("culprit_rank")
    )
    ranking = (
        frame.group_by("request_id")
        .agg(pl.col("culprit_rank").min(), pl.col("stored_tokens").max().alias("most"))
        .sort(
            ["culprit_rank", "most", "request_id"], descending=[False, True, False], nulls_last=True
        )
    )
    keep = ranking.head(max_lanes)["request_id"]
    chosen = frame.filter(pl.col("request_id").is_in(keep.implode()))
    return chosen.sort(["start", "request_id"]), ranking.height


def lanes_section(
    lanes: pl.DataFrame | None,
    incident: Mapping[str, Any] | None,
    marks: pl.DataFrame,
    max_lanes: int,
) -> Section:
    if lanes is None or lanes.height == 0:
        return Section(
            "lanes",
            TITLE,
            empty="No per-request resident intervals are known for the incident window (the "
            "inputs state no admissions, or there is no incident).",
        )
    culprits = {
        str(c["request_id"]): rank
        for rank, c in enumerate((incident or {}).get("culprits") or [], start=1)
        if isinstance(c, Mapping) and c.get("request_id") is not None
    }
    window = incident_window(incident)
    chosen, total = select_lanes(lanes, window, culprits, max_lanes)
    if chosen.height == 0:
        return Section("lanes", TITLE, empty="No request was resident in the incident window.")
    shown = chosen["request_id"].n_unique()
    where = (
        f"from {iso_time(window[0])} to {iso_time(window[1])}" if window else "over the whole trace"
    )
    text = (
        f"Each bar is one resident interval of one request {where}, coloured by the tokens it "
        "stored; culprits are outlined in red with their rank. "
        + (
            f"Showing {shown} of {total} requests: every culprit, then those that stored the "
            "most tokens."
            if shown < total
            else f"All {total} requests are shown."
        )
    )
    in_window = marks
    if window is not None:
        in_window = marks.filter(pl.col("ts").is_between(window[0], window[1]))
    spec = charts.swimlane_chart(chosen, in_window, title=TITLE)
    caption = f"{chosen.height:,} intervals of {shown:,} requests."
    return Section(
        "lanes", TITLE, paragraphs=(text,), charts=(Chart("lanes", TITLE, caption, spec, chosen),)
    )
