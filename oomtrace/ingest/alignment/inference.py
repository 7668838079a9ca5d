"""Which year and zone offset put one input's moments on another's: the candidates, their
agreement, the choice.

An input whose year or zone was assumed (``year_free``, ``zone_free``) can only be wrong by
whole years and by a zone offset, which is a whole, half or quarter hour: the candidates are
the years :data:`YEARS` around the assumed one and the offsets :data:`OFFSET_RANGE_MIN` in steps
of :data:`OFFSET_STEP_MIN` (an offset ``+02:00`` means the printed times ran two hours ahead of
UTC, so they move back by two hours). Each candidate whose span overlaps the reference's is
scored by what agrees at it:

* a **point** of the input and one of the reference, of kinds that go together (:data:`RULES`:
  the same OOM in both; an OOM, a death or a start-up refusal and the memory release after it;
  an engine start and the memory or process appearing after it), within the rule's window:
  one per moment of the reference matched;
* a **series** both state (KV usage, running and waiting requests): the correlation of the
  input's values with the reference's nearest ones, where at least :data:`MIN_PAIRS` pairs
  exist and both vary; a correlation of :data:`MIN_R` or more adds ``r``.

The best candidate is chosen when it scores at least 1 and the next best at most half as much;
its agreement is ``strong`` when it scores 2 or more and the next best at most a quarter of
that, else ``weak``. Windows are minutes wide at most and candidates a quarter hour apart, so a
moment agrees with one candidate only. The cost grows with the input's moments (its series
thinned to :data:`SERIES_POINTS`) times the candidates that overlap (a constant, a few hundred at
most), and with the logarithm of the reference's size, never with the product of the two.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final, Literal

import polars as pl

from oomtrace.ingest.alignment.moments import Moments
from oomtrace.isotime import iso_time
from oomtrace.schema import TS

YEARS: Final = (-3, -2, -1, 0, 1)
OFFSET_STEP_MIN: Final = 15
OFFSET_RANGE_MIN: Final = (-14 * 60, 14 * 60)
# Spans closer than this still count as overlapping (a crash seen just after a log ends).
OVERLAP_SLACK_S: Final = 120
MIN_PAIRS: Final = 8
MIN_R: Final = 0.5
# The input's side of a series is thinned to this many points before it is moved to every
# candidate, so that a day of samples costs what ten minutes do.
SERIES_POINTS: Final = 1_000

# (kind in one input, kind in the other, window of t_other - t_one in seconds)
RULES: Final[tuple[tuple[str, str, float, float], ...]] = (
    ("oom", "oom", -3, 3),
    ("oom", "release", -3, 45),
    ("exit", "release", -3, 45),
    ("exit", "exit", -3, 3),
    ("start", "acquire", -10, 180),
    ("start", "start", -3, 3),
    ("release", "release", -10, 10),
    ("acquire", "acquire", -10, 10),
)

Reason = Literal["no_overlap", "no_evidence", "ambiguous"]
Strength = Literal["strong", "weak"]


@dataclass(frozen=True)
class Candidate:
    """Whole years to add, and the UTC offset (minutes) the input's printed times had."""

    years: int = 0
    offset_min: int = 0

    def text(self, *, assumed_year: int | None, zone: bool) -> str:
        """In words: the year (``assumed_year`` moved by :attr:`years`; None: the year is not
        in question) and the offset (``zone``: the zone is in question)."""
        parts = []
        if assumed_year is not None:
            parts.append(f"year {assumed_year + self.years}")
        if zone:
            parts.append(f"offset {offset_text(self.offset_min)}")
        return ", ".join(parts)


@dataclass(frozen=True)
class Inference:
    """The choice for one input, or why there is none."""

    chosen: Candidate | None
    reason: Reason | None
    score: float = 0.0
    runner_up: Candidate | None = None
    runner_score: float = 0.0
    strength: Strength | None = None
    evidence: tuple[str, ...] = ()
    candidates: int = 0
    # The reference's inputs that agreed at the chosen (or best) candidate.
    sources: frozenset[str] = frozenset()
    best: Candidate | None = None


def offset_text(minutes: int) -> str:
    sign = "-" if minutes < 0 else "+"
    return f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


def candidates(year_free: bool, zone_free: bool) -> pl.DataFrame:
    years = list(YEARS) if year_free else [0]
    low, high = OFFSET_RANGE_MIN
    offsets = list(range(low, high + 1, OFFSET_STEP_MIN)) if zone_free else [0]
    return pl.DataFrame({"years": years}, schema={"years": pl.Int32}).join(
        pl.DataFrame({"offset_min": offsets}, schema={"offset_min": pl.Int32}), how="cross"
    )


def shifted(times: pl.Expr, years: pl.Expr, offset_min: pl.Expr) -> pl.Expr:
    """``times`` moved by whole ``years`` (calendar years) and back by ``offset_min``."""
    moved = times.dt.offset_by(pl.format("{}y", years))
    return (moved - pl.duration(minutes=offset_min, time_unit="ns")).cast(TS)


def infer(free: Moments, ref: Moments, *, year_free: bool, zone_free: bool) -> Inference:
    """The candidate that puts ``free``'s moments on ``ref``'s, or why none can be chosen."""
    cands = _overlapping(candidates(year_free, zone_free), free, ref)
    if cands.height == 0:
        return Inference(None, "no_overlap")
    points = _point_matches(free.points, ref.points, cands)
    series = _series_agreement(free.series, ref.series, cands)
    scores = (
        cands.join(_point_scores(points), on=["years", "offset_min"], how="left")
        .join(_series_scores(series), on=["years", "offset_min"], how="left")
        .with_columns(
            score=pl.col("points").fill_null(0) + pl.col("series").fill_null(0.0),
            # Among equals, the assumption itself, then whole hours, then the smaller change.
            _pref=(pl.col("years") != 0).cast(pl.Int32) * 4
            + (pl.col("offset_min") % 60 != 0).cast(pl.Int32) * 2
            + (pl.col("offset_min") != 0).cast(pl.Int32),
        )
        .sort(["score", "_pref"], descending=[True, False])
    )
    best = scores.row(0, named=True)
    runner = scores.row(1, named=True) if scores.height > 1 else None
    chosen = Candidate(int(best["years"]), int(best["offset_min"]))
    runner_score = float(runner["score"]) if runner else 0.0
    second = Candidate(int(runner["years"]), int(runner["offset_min"])) if runner else None
    score = float(best["score"])
    if score < 1:
        return Inference(None, "no_evidence", score, second, runner_score, None, (), cands.height)
    evidence, sources = _evidence(points, series, chosen)
    if runner_score > score / 2:
        return Inference(
            None, "ambiguous", score, second, runner_score, None, evidence, cands.height, sources,
            best=chosen,
        )  # fmt: skip
    strength: Strength = "strong" if score >= 2 and runner_score <= score / 4 else "weak"
    return Inference(
        chosen, None, score, second, runner_score, strength, evidence, cands.height, sources
    )


def _overlapping(cands: pl.DataFrame, free: Moments, ref: Moments) -> pl.DataFrame:
    if free.first is None or free.last is None or ref.first is None or ref.last is None:
        return cands.clear()
    slack = pl.duration(seconds=OVERLAP_SLACK_S)
    first = shifted(pl.lit(free.first), pl.col("years"), pl.col("offset_min"))
    last = shifted(pl.lit(free.last), pl.col("years"), pl.col("offset_min"))
    return cands.filter((last >= pl.lit(ref.first) - slack) & (first <= pl.lit(ref.last) + slack))


def _point_matches(free: pl.DataFrame, ref: pl.DataFrame, cands: pl.DataFrame) -> pl.DataFrame:
    """Every (candidate, free point) and the first reference point it agrees with."""
    columns = ["years", "offset_min", "t_free", "what_free", "t_ref", "what_ref", "source"]
    if free.height == 0 or ref.height == 0:
        return pl.DataFrame(schema={c: _MATCH_TYPES[c] for c in columns})
    moved = free.drop("source").with_row_index("i").join(cands, how="cross")
    moved = moved.with_columns(t_free=shifted(pl.col("t"), pl.col("years"), pl.col("offset_min")))
    found: list[pl.DataFrame] = []
    for one, other, low, high in RULES:
        for mine, theirs, lo, hi in ((one, other, low, high), (other, one, -high, -low)):
            left = moved.filter(pl.col("kind") == mine)
            right = ref.filter(pl.col("kind") == theirs).select(
                t_ref="t", what_ref="what", source="source", _j="t"
            )
            if left.height == 0 or right.height == 0:
                continue
            left = left.with_columns(
                _j=(pl.col("t_free") + pl.duration(milliseconds=lo * 1000, time_unit="ns")).cast(TS)
            )
            joined = left.sort("_j").join_asof(
                right.sort("_j"),
                on="_j",
                strategy="forward",
                tolerance=timedelta(seconds=hi - lo),
            )
            found.append(
                joined.filter(pl.col("t_ref").is_not_null()).select(
                    "years",
                    "offset_min",
                    "i",
                    "t_free",
                    pl.col("what").alias("what_free"),
                    "t_ref",
                    "what_ref",
                    "source",
                )
            )
    if not found:
        return pl.DataFrame(schema={c: _MATCH_TYPES[c] for c in columns})
    # One match per moment of the reference and per point of the input, the closest pairs
    # first (a restart loop puts several deaths within one window of a release).
    lag = (pl.col("t_ref") - pl.col("t_free")).abs()
    return (
        pl.concat(found)
        .sort(["years", "offset_min", lag, "i"])
        .unique(["years", "offset_min", "t_ref"], keep="first", maintain_order=True)
        .unique(["years", "offset_min", "i"], keep="first", maintain_order=True)
        .select(columns)
    )


_MATCH_TYPES: Final[dict[str, pl.DataType]] = {
    "years": pl.Int32(),
    "offset_min": pl.Int32(),
    "t_free": TS,
    "what_free": pl.String(),
    "t_ref": TS,
    "what_ref": pl.String(),
    "source": pl.String(),
}


def _point_scores(matches: pl.DataFrame) -> pl.DataFrame:
    return matches.group_by("years", "offset_min").agg(points=pl.len().cast(pl.Float64))


def _series_agreement(free: pl.DataFrame, ref: pl.DataFrame, cands: pl.DataFrame) -> pl.DataFrame:
    """Per candidate and metric: the pairs of nearest values and their correlation."""
    schema = {
        "years": pl.Int32, "offset_min": pl.Int32, "metric": pl.String, "pairs": pl.UInt32,
        "source": pl.String, "r": pl.Float64,
    }  # fmt: skip
    metrics = set(free["metric"].unique()) & set(ref["metric"].unique())
    if not metrics:
        return pl.DataFrame(schema=schema)
    out: list[pl.DataFrame] = []
    for metric in sorted(metrics):
        mine = free.filter(pl.col("metric") == metric)
        theirs = ref.filter(pl.col("metric") == metric).select(
            _j="t", v_ref="value", source_ref="source"
        )
        tolerance = _tolerance(mine["t"], theirs["_j"])
        mine = mine.gather_every(max(1, mine.height // SERIES_POINTS))
        moved = mine.join(cands, how="cross").with_columns(
            _j=shifted(pl.col("t"), pl.col("years"), pl.col("offset_min"))
        )
        paired = moved.sort("_j").join_asof(
            theirs.sort("_j"), on="_j", strategy="nearest", tolerance=tolerance
        )
        out.append(
            paired.filter(pl.col("v_ref").is_not_null())
            .group_by("years", "offset_min")
            .agg(
                metric=pl.lit(metric),
                pairs=pl.len(),
                source=pl.col("source_ref").mode().first(),
                r=pl.when((pl.col("value").std() > 0) & (pl.col("v_ref").std() > 0)).then(
                    pl.corr("value", "v_ref")
                ),
            )
            .select(list(schema))
            .cast(schema)  # type: ignore[arg-type]
        )
    return pl.concat(out)


def _tolerance(mine: pl.Series, theirs: pl.Series) -> timedelta:
    """Half the coarser of the two sampling intervals, and a second for printed whole seconds."""
    steps = [s.sort().diff().dt.total_seconds().median() for s in (mine, theirs) if s.len() > 1]
    coarse = max((float(s) for s in steps if isinstance(s, int | float)), default=10.0)
    return timedelta(seconds=coarse / 2 + 1)


def _series_scores(series: pl.DataFrame) -> pl.DataFrame:
    good = series.filter((pl.col("pairs") >= MIN_PAIRS) & (pl.col("r") >= MIN_R))
    return good.group_by("years", "offset_min").agg(series=pl.col("r").sum())


def _evidence(
    points: pl.DataFrame, series: pl.DataFrame, chosen: Candidate
) -> tuple[tuple[str, ...], frozenset[str]]:
    """What agrees at ``chosen``, as sentences, and the reference inputs it came from."""
    at = (pl.col("years") == chosen.years) & (pl.col("offset_min") == chosen.offset_min)
    matched = points.filter(at).sort("t_free")
    lines = [
        f"{row['what_free']} at {_when(row['t_free'])} and {row['what_ref']} in "
        f"{row['source']} at {_when(row['t_ref'])}"
        for row in matched.iter_rows(named=True)
    ]
    good = series.filter(at & (pl.col("pairs") >= MIN_PAIRS) & (pl.col("r") >= MIN_R))
    lines += [
        f"{row['metric']} agrees with {row['source']} (r = {row['r']:.2f} over "
        f"{row['pairs']:,} pairs)"
        for row in good.sort("metric").iter_rows(named=True)
    ]
    sources = frozenset([*matched["source"].to_list(), *good["source"].to_list()])
    return tuple(lines), sources


def _when(ts: datetime) -> str:
    return iso_time(ts, 1)
