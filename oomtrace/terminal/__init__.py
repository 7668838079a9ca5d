"""Everything oomtrace prints for a person at a terminal, one module per command's output (as
memray keeps its ``reporters/``): renderers take a library result and return text; they never
compute, never read files and never print (the command echoes what they return).

* :mod:`oomtrace.terminal.findings_text` — ``oomtrace analyze``: the incident summary;
* :mod:`oomtrace.terminal.report_text` — ``oomtrace report``: the summary fitted to the
  terminal, and the whole report as text (``--format text``);
* :mod:`oomtrace.terminal.replay_text` — ``oomtrace replay``: replay, search and calibration;
* :mod:`oomtrace.terminal.worksheet_text` — ``oomtrace budget``: the worksheet and the ledger;
* :mod:`oomtrace.terminal.inspect_text` — ``oomtrace inspect`` and the sources ``oomtrace
  ingest`` read.

Text from logs and user files goes through one escape, :func:`oomtrace.escape.terminal`, and
times through one formatter, :func:`oomtrace.isotime.iso_time`. This layer sits above every
library package and below :mod:`oomtrace.cli` (``tests/unit/test_layers.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from oomtrace import lazy

if TYPE_CHECKING:
    from oomtrace.terminal.findings_text import render_summary
    from oomtrace.terminal.inspect_text import render_formats, render_inspection, sources_table
    from oomtrace.terminal.replay_text import (
        render_calibration,
        render_replay,
        render_run,
        render_search,
    )
    from oomtrace.terminal.report_text import render_report, render_report_summary
    from oomtrace.terminal.worksheet_text import render_ledger, render_worksheet

# Names are loaded on first use: each command pulls in only its own result's package (the
# replay renderer would otherwise load the compiled simulator for ``oomtrace analyze``).
_EXPORTS = {
    "render_calibration": "oomtrace.terminal.replay_text",
    "render_formats": "oomtrace.terminal.inspect_text",
    "render_inspection": "oomtrace.terminal.inspect_text",
    "render_ledger": "oomtrace.terminal.worksheet_text",
    "render_replay": "oomtrace.terminal.replay_text",
    "render_report": "oomtrace.terminal.report_text",
    "render_report_summary": "oomtrace.terminal.report_text",
    "render_run": "oomtrace.terminal.replay_text",
    "render_search": "oomtrace.terminal.replay_text",
    "render_summary": "oomtrace.terminal.findings_text",
    "render_worksheet": "oomtrace.terminal.worksheet_text",
    "sources_table": "oomtrace.terminal.inspect_text",
}
__all__ = [
    "render_calibration",
    "render_formats",
    "render_inspection",
    "render_ledger",
    "render_replay",
    "render_report",
    "render_report_summary",
    "render_run",
    "render_search",
    "render_summary",
    "render_worksheet",
    "sources_table",
]


__getattr__ = lazy.exports("oomtrace.terminal", _EXPORTS)
