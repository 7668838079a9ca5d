"""Deterministic filler a real log would carry: token ids, generated text, request ids, clients.

Nothing here is a real prompt: the words are drawn from a small fixed vocabulary, so a sample log
has the shape and the size of a real one (a 6,000-token answer is a long line) without anyone's
text in it.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

_WORDS = (
    "the model memory request cache block token batch server window schedule latency queue "
    "report contract clause section summary section analysis table figure result value growth "
    "limit budget device process worker engine customer invoice quarter revenue forecast risk "
    "policy review draft answer question context document page chapter note appendix source "
    "data record event metric sample series total share peak level capacity reserve profile "
    "and of to in for with on by from as at is are was were be this that these those which "
    "each every more less than about into over under after before while during between"
)
WORDS = tuple(_WORDS.split(" "))
VOCAB = 128_000


class Filler:
    """Seeded filler; every call advances one private generator, so the order of calls is part
    of the output (keep it fixed)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)  # noqa: S311 - reproducible filler, not a secret

    def hex_id(self, digits: int = 32) -> str:
        return "".join(self.rng.choice("0123456789abcdef") for _ in range(digits))

    def token_ids(self, n: int, *, first: int | None = None) -> str:
        """A Python list of ``n`` token ids, as ``str(list)`` prints it."""
        ids = [self.rng.randrange(100, VOCAB) for _ in range(n)]
        if first is not None and ids:
            ids[0] = first
        return "[" + ", ".join(map(str, ids)) + "]"

    def text(self, tokens: int) -> str:
        """Words for about ``tokens`` tokens (four words make about five tokens)."""
        words = max(1, tokens * 4 // 5)
        out = [self.rng.choice(WORDS) for _ in range(words)]
        for k in range(11, len(out), 17):
            out[k] = out[k] + "."
        return " ".join(out)

    def client(self) -> str:
        """A client address and port, as uvicorn's access line prints it."""
        a, b, c = (self.rng.randrange(lo, hi) for lo, hi in ((0, 4), (1, 255), (2, 254)))
        return f"10.{a}.{b}.{c}:{self.rng.randrange(32768, 60999)}"

    def jitter_us(self, low: int, high: int) -> int:
        return self.rng.randrange(low, high)

    def uniform(self, low: float, high: float) -> float:
        return self.rng.uniform(low, high)

    def choice(self, items: tuple[str, ...]) -> str:
        return self.rng.choice(items)


def iso_ns(ts: datetime, extra_ns: int = 0) -> str:
    """RFC 3339 with nanoseconds, as ``docker logs -t`` prints it."""
    ts = ts.astimezone(UTC)
    ns = ts.microsecond * 1000 + extra_ns
    return ts.strftime("%Y-%m-%dT%H:%M:%S") + f".{ns:09d}Z"


def local(ts: datetime, offset: timedelta) -> datetime:
    """The wall clock of a host ``offset`` ahead of UTC (naive)."""
    return (ts.astimezone(UTC) + offset).replace(tzinfo=None)
