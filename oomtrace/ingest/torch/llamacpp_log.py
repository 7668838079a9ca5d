"""llama.cpp's own log lines: what marks a llama.cpp log, and what its line prefix is.

llama.cpp's logger (``common/log.cpp``, ``common_log_entry::print``; ``docs/formats/pytorch.md``)
prints, when its prefix and timestamps are on (``--log-prefix --log-timestamps``, as newer
``llama-server`` builds print by default), ``M.SS.mmm.uuu L message``: minutes, seconds,
milliseconds and microseconds since the logger started, then a level letter (``I``, ``W``, ``E``,
``D``), both perhaps wrapped in ANSI colours. That is a duration, not a time of day: the log says
how far apart its lines are, never when they were, so it is read as a log without times.
"""

from __future__ import annotations

import re
from typing import Final

_COLOUR = r"(?:\x1b\[[0-9;]*m)*"
RELATIVE: Final = (
    rf"^{_COLOUR}(\d+)\.(\d{{2}})\.(\d{{3}})\.(\d{{3}}){_COLOUR} (?:{_COLOUR}[IWED] {_COLOUR})?"
)
# Lines only llama.cpp prints (model loading, the server's start), for sniffing a log whose
# allocation failure is beyond the head.
MARKERS: Final = re.compile(
    r"(?m)^(?:\d+\.\d{2}\.\d{3}\.\d{3} [IWED] )?(?:llama_model_loader: |load_tensors: |"
    r"llm_load_tensors: |ggml_cuda_init: found \d+ |llama_context: |"
    r"llama_new_context_with_model: |srv +load_model: |main: server is listening)"
)
DURATIONS_NOTE: Final = (
    "llama.cpp prints how long after its start each line came (minutes.seconds.ms.us), not "
    "when: the order of its lines is kept, their times are not known"
)
