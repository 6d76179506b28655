"""One request's latencies from its ``perf_counter_ns`` stamps (DESIGN.md "Metric definitions").

Each formula lives with its declaration in :mod:`harness.metrics.definitions` (one module per
metric: unit ms, formula and source in its docstring); this module gathers them under the names
the rest of the harness imports.
"""

from __future__ import annotations

from .definitions.connect import connect_ms
from .definitions.e2el import e2el_ms
from .definitions.e2el_from_scheduled import e2el_from_scheduled_ms
from .definitions.itl import itls_ms
from .definitions.tpot import tpot_ms
from .definitions.ttfat import ttfat_ms
from .definitions.ttft import ttft_ms
from .definitions.ttft_from_scheduled import ttft_from_scheduled_ms
from .definitions.units import NS_PER_MS, NS_PER_S

__all__ = ["NS_PER_MS", "NS_PER_S", "connect_ms", "e2el_from_scheduled_ms", "e2el_ms", "itls_ms", "tpot_ms",
           "ttfat_ms", "ttft_from_scheduled_ms", "ttft_ms"]
