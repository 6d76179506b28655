"""Completing stored metrics of older runs from their records (so reports render stored data only).

Version-1 run folders lack the per-request samples behind the report's CDFs and the per-turn
p90; this fills exactly those fields from the run's own records, with the same definitions,
and leaves every stored number as it was.
"""

from __future__ import annotations

from typing import Sequence

from results.schema import Metrics, RequestRecord

from .request import ttft_ms
from .stats import distribution
from .summary import metric_values, samples


def complete_metrics(metrics: Metrics, records: Sequence[RequestRecord]) -> Metrics:
    """``metrics`` with ``samples_ms`` and per-turn ``ttft_ms_p90`` filled from ``records`` (one
    engine's measured records) where they are missing; a new object, the input is unchanged."""
    out = metrics.model_copy(deep=True)
    ok = [r for r in records if r.phase == "measured" and r.success]
    if out.samples_ms is None:
        measured = [r for r in records if r.phase == "measured"]
        out.samples_ms = samples(metric_values(ok, measured))
    for turn, row in (out.per_turn or {}).items():
        if row.ttft_ms_p90 is None:
            values = [v for r in ok if str(r.turn_id) == turn and (v := ttft_ms(r)) is not None]
            row.ttft_ms_p90 = distribution(values)["p90"]
    return out
