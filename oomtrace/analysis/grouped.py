"""Window operations within groups of a frame already sorted by its group, without ``over()``.

Millions of tiny groups (one per request or segment) make ``over()`` costly: each call regroups
the frame. Here a group is an integer column that changes value where a group starts (see
:func:`group_id`); a shift across a group boundary is masked, a forward fill keeps the group that
owns each value, and a cumulative sum subtracts the sum at the group's start. All are single
vectorised passes.
"""

from __future__ import annotations

import polars as pl


def group_id(*keys: str) -> pl.Expr:
    """An increasing Int64 id per run of equal ``keys`` (the frame is sorted by them)."""
    changed = pl.lit(value=False)
    for key in keys:
        changed = changed | pl.col(key).ne_missing(pl.col(key).shift(1))
    return changed.cast(pl.Int64).cum_sum()


def is_first(group: str) -> pl.Expr:
    return pl.col(group).ne_missing(pl.col(group).shift(1))


def is_last(group: str) -> pl.Expr:
    return pl.col(group).ne_missing(pl.col(group).shift(-1))


def prev(expr: pl.Expr, group: str) -> pl.Expr:
    """The previous row's value within the group (null on the group's first row)."""
    return pl.when(~is_first(group)).then(expr.shift(1))


def following(expr: pl.Expr, group: str) -> pl.Expr:
    """The next row's value within the group (null on the group's last row)."""
    return pl.when(~is_last(group)).then(expr.shift(-1))


def forward_fill(expr: pl.Expr, group: str) -> pl.Expr:
    """The last non-null value so far within the group."""
    owner = pl.when(expr.is_not_null()).then(pl.col(group)).forward_fill()
    return pl.when(owner == pl.col(group)).then(expr.forward_fill())


def cum_sum(expr: pl.Expr, group: str) -> pl.Expr:
    """Cumulative sum restarting at each group (integers; exact)."""
    total = expr.cum_sum()
    base = pl.when(is_first(group)).then(total - expr).forward_fill()
    return total - base


def per_request(column: pl.Series, key: str = "rid") -> pl.Expr:
    """A column of a per-group table whose row ``i`` belongs to group ``i + 1``, broadcast to
    the rows carrying ``key`` (a gather, not a join)."""
    return pl.lit(column).gather(pl.col(key) - 1)


def merge_runs(frames: list[pl.DataFrame]) -> pl.DataFrame:
    """Frames each sorted by ``(sid, order)`` (their ``order`` distinct from one another), merged
    into one in that order, each frame's own rows keeping theirs: a linear merge, not a sort."""
    key = (pl.col("sid").cast(pl.Int64) * 4 + pl.col("order")).alias("_key")
    out = frames[0].with_columns(key.set_sorted())
    for frame in frames[1:]:
        out = out.merge_sorted(frame.with_columns(key.set_sorted()), key="_key")
    return out.drop("_key")
