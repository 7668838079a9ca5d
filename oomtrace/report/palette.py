"""The report's colours: the Okabe-Ito palette, which readers with any common form of colour
blindness can tell apart, one meaning per colour across every chart.

Series are drawn in the palette's colours; markers (vertical rules for events) are black or
vermillion and differ from each other by dash pattern as well, so a marker is never mistaken for
a series drawn in the same hue (the peak marker and "requests waiting" were both orange once).
"""

from __future__ import annotations

from typing import Final

BLACK: Final = "#000000"
ORANGE: Final = "#E69F00"
SKY: Final = "#56B4E9"
GREEN: Final = "#009E73"
YELLOW: Final = "#F0E442"
BLUE: Final = "#0072B2"
VERMILLION: Final = "#D55E00"
PURPLE: Final = "#CC79A7"
GREY: Final = "#999999"
DARK_GREY: Final = "#555555"

# Series that mean the same thing look the same in every chart.
SERIES: Final[dict[str, str]] = {
    "device total": GREY,
    "device used": BLUE,
    "allocator reserved": SKY,
    "allocator allocated": GREEN,
    "KV observed": ORANGE,
    "KV modelled": PURPLE,
    "weights": DARK_GREY,
    "requests running": BLUE,
    "requests waiting": ORANGE,
    "requests preempted": PURPLE,
}
# Series drawn dashed: limits and models, not measurements of use.
DASHED: Final = frozenset({"device total", "KV modelled"})
# For series the table above does not name (per-process memory, a GPU prefix), in order.
OTHERS: Final = (VERMILLION, ORANGE, PURPLE, GREEN, SKY, YELLOW, DARK_GREY)

# Markers: (colour, dash pattern); an empty pattern is a solid line.
MARKERS: Final[dict[str, tuple[str, tuple[int, ...]]]] = {
    "out of memory": (VERMILLION, ()),
    "refused to start": (VERMILLION, ()),
    "Xid error": (VERMILLION, (2, 2)),
    "engine died": (BLACK, (2, 3)),
    "preemption": (DARK_GREY, (1, 3)),
}
PEAK_MARKER: Final = (BLACK, (6, 3))

# The parts of a device's memory, in the charts that stack them.
PARTS: Final[dict[str, str]] = {
    "model weights": BLUE,
    "KV cache": ORANGE,
    "KV cache pool": ORANGE,
    "runtime reserve": SKY,
    "other processes": PURPLE,
}
# A start-up allocation that failed, on what the device held then.
FAILED_ALLOCATION: Final[dict[str, str]] = {
    "held when it failed": SKY,
    "the allocation that failed": VERMILLION,
}
# What an incident is about, against its limit.
CULPRITS: Final = VERMILLION
REST: Final = SKY
HEADROOM: Final = GREEN
SLACK: Final = SKY
FAILED: Final = VERMILLION
ESTIMATE: Final = ORANGE
LIMIT: Final = BLACK
