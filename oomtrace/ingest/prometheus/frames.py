"""The frames the modules of the Prometheus parsers hand each other, declared once.

Exposition text: :mod:`.text_parser` classifies lines and hands the sample lines of mapped
families (:data:`SAMPLE_LINES`) to :mod:`.sample_lines`, which reads them into
:data:`PARSED_SAMPLES`; each scrape's time (:data:`SCRAPE_TIMES`) is joined on at the end. Query
JSON (:mod:`.query_parser`) reads its points straight into :data:`RAW_SAMPLES`, the frame both
readers hand :func:`.canonical_map.to_result`.
"""

from __future__ import annotations

from typing import Final

import polars as pl

from oomtrace.ingest.prometheus.dialects import LABELS
from oomtrace.schema import TS

# One sample: its time (null until its scrape's time is known), exposed name, value, and every
# label the dialect table reads (null where the sample lacks it).
RAW_SAMPLES: Final = pl.Schema(
    {"ts": TS, "name": pl.String(), "value": pl.Float64(), **dict.fromkeys(LABELS, pl.String())}
)
# A sample line of a mapped family, with the number of the scrape it belongs to.
SAMPLE_LINES: Final = pl.Schema({"line": pl.String(), "name": pl.String(), "scrape": pl.Int64()})
# A parsed sample line, with its scrape and its series key (name and labels, for messages).
PARSED_SAMPLES: Final = pl.Schema({**RAW_SAMPLES, "scrape": pl.Int64(), "key": pl.String()})
# Each scrape's time.
SCRAPE_TIMES: Final = pl.Schema({"scrape": pl.Int64(), "scrape_ts": TS})
