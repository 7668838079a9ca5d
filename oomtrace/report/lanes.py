"""Per-request swimlanes for the incident window.

The culprits come first, in rank order, each labelled ``#rank`` and its whole id; then at most
``context`` other requests (those that stored the most tokens), so a day-long trace gives a
chart of the same size as a minute-long one. The section says how many requests it leaves out.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Final

import polars as pl

from oomtrace.isotime import iso_time
from oomtrace.report.document import Chart, Section, Spec
from oomtrace.report.records import parse_time
from oomtrace.report.span import epoch_ns, incident_window

LANE_COLUMNS: Final = (
    "request_id",
    "start",
    "end",
    "state",
    "start_tokens",
    "stored_tokens",
    "kv_bytes",
)
TITLE: Final = "Requests in the incident window"
KEY: Final = "lanes"


def culprit_ranks(incident: Mapping[str, Any] | None) -> dict[str, int]:
    return {
        str(c["request_id"]): rank
        for rank, c in enumerate((incident or {}).get("culprits") or [], start=1)
        if isinstance(c, Mapping) and c.get("request_id") is not None
    }


def ranked_lanes(lanes: pl.DataFrame, culprits: dict[str, int]) -> pl.DataFrame:
    """Every resident interval with ``culprit_rank`` (null for a request that is not one)."""
    frame = lanes.select(*(c for c in LANE_COLUMNS if c in lanes.columns))
    if "start_tokens" not in frame.columns:
        frame = frame.with_columns(pl.lit(None, pl.Int64).alias("start_tokens"))
    return frame.with_columns(
        pl.col("request_id")
        .replace_strict(culprits, default=None, return_dtype=pl.Int64)
        .alias("culprit_rank")
    )


def select_lanes(
    lanes: pl.DataFrame,
    window: tuple[Any, Any] | None,
    context: int,
) -> tuple[pl.DataFrame, int]:
    """Segments inside ``window`` (clipped to it): every culprit's, and those of at most
    ``context`` other requests, the ones that stored the most tokens. Returns the frame and how
    many requests were in the window."""
    frame = lanes
    if window is not None:
        low, high = window
        frame = frame.filter((pl.col("start") <= high) & (pl.col("end") >= low)).with_columns(
            pl.col("start").clip(lower_bound=low), pl.col("end").clip(upper_bound=high)
        )
    ranking = (
        frame.group_by("request_id")
        .agg(pl.col("culprit_rank").min(), pl.col("stored_tokens").max().alias("most"))
        .sort(
            ["culprit_rank", "most", "request_id"], descending=[False, True, False], nulls_last=True
        )
    )
    culprits = ranking.filter(pl.col("culprit_rank").is_not_null())
    others = ranking.filter(pl.col("culprit_rank").is_null()).head(context)
    keep = pl.concat([culprits["request_id"], others["request_id"]])
    chosen = frame.filter(pl.col("request_id").is_in(keep.implode()))
    return chosen.sort(["start", "request_id"]), ranking.height


def _drawn_span(
    chosen: pl.DataFrame, window: tuple[datetime, datetime], peak: datetime | None
) -> tuple[datetime, datetime]:
    """The part of the window the drawn intervals (and the peak) cover, with a tenth of it on
    either side: requests resident for the last second of a minute-long window are drawn over
    that second, not as slivers at the edge."""
    low, high = chosen["start"].min(), chosen["end"].max()
    if not isinstance(low, datetime) or not isinstance(high, datetime):
        return window
    if peak is not None:
        low, high = min(low, peak), max(high, peak)
    pad = max((high - low) / 10, timedelta(milliseconds=50))
    return max(window[0], low - pad), min(window[1], high + pad)


def lanes_section(
    lanes: pl.DataFrame | None,
    incident: Mapping[str, Any] | None,
    marks: pl.DataFrame,
    context: int,
) -> Section:
    """``lanes``: the resident intervals with ``culprit_rank`` (:func:`ranked_lanes`)."""
    if lanes is None or lanes.height == 0:
        return Section(
            KEY,
            TITLE,
            empty="No per-request resident intervals are known for the incident window (the "
            "inputs state no admissions, or there is no incident).",
        )
    window = incident_window(incident)
    chosen, total = select_lanes(lanes, window, context)
    if chosen.height == 0:
        return Section(KEY, TITLE, empty="No request was resident in the incident window.")
    shown = chosen["request_id"].n_unique()
    named = chosen.filter(pl.col("culprit_rank").is_not_null())["request_id"].n_unique()
    where = (
        f"from {iso_time(window[0])} to {iso_time(window[1])}" if window else "over the whole trace"
    )
    text = (
        f"Each bar is one resident interval of one request {where}, coloured by the tokens it "
        "stored. "
    )
    if named:
        text += f"The {named} culprits come first, labelled with their rank and outlined; " + (
            f"then {shown - named} of the other {total - named} requests, those that stored "
            "the most tokens."
            if shown < total
            else "then every other request of the window."
        )
    else:
        text += "The analysis named no request as a culprit; " + (
            f"these are {shown} of the window's {total} requests, those that stored the most "
            "tokens."
            if shown < total
            else "these are all the window's requests."
        )
    in_window = marks
    domain = None
    if window is not None:
        drawn = _drawn_span(chosen, window, parse_time((incident or {}).get("peak_ts")))
        if drawn != window:
            text += (
                f" The chart is drawn from {iso_time(drawn[0])} to {iso_time(drawn[1])}, where "
                "these requests were resident."
            )
        in_window = marks.filter(pl.col("ts").is_between(drawn[0], drawn[1]))
        domain = (epoch_ns(drawn[0]) // 1_000_000, epoch_ns(drawn[1]) // 1_000_000)

    def draw() -> Spec:
        from oomtrace.report.overview_charts import swimlane_chart  # noqa: PLC0415 - Altair

        return swimlane_chart(chosen, in_window, title=TITLE, domain=domain)

    caption = f"{chosen.height:,} intervals of {shown:,} requests."
    return Section(
        KEY, TITLE, paragraphs=(text,), charts=(Chart(KEY, TITLE, caption, draw, chosen),)
    )
