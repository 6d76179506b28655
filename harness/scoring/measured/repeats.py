"""Combining the repeats of one condition into the numbers the score and the SLO check use.

Repeats are combined by their median (numpy, linear); the noise check instead takes each
metric's best or worst repeat.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from harness.metrics import SLO, meets_slos, slo_table

from .gather import Measurement

HIGHER_IS_BETTER: dict[str, bool] = {
    "output_throughput": True,
    "request_throughput": True,
    "ttft_p50_ms": False,
    "ttft_p99_ms": False,
    "tpot_p50_ms": False,
    "tpot_p99_ms": False,
    "itl_p99_ms": False,
    "e2el_p99_ms": False,
}
"""The scoring metrics (``gather.SCORING_METRICS``) in the order a ranking shows them."""


def median(values: Sequence[float]) -> float:
    """numpy's median as a float."""
    return float(np.median(np.asarray(values, dtype=np.float64)))


def median_slo_value(repeats: Sequence[Measurement], slo: SLO) -> float:
    """The SLO's value (ms) over the repeats of one condition: their median."""
    return median([repeat.slo_value(slo) for repeat in repeats])


def goodput(measurement: Measurement, slos: Sequence[SLO]) -> float | None:
    """Requests/s meeting every SLO (DistServe), recomputed from records for the given SLOs;
    without records the stored goodput when it was computed for the same SLOs, else None."""
    measured = [record for record in measurement.records if record.phase == "measured"]
    if measured and measurement.duration_s > 0:
        return sum(1 for record in measured if meets_slos(record, slos)) / measurement.duration_s
    if measurement.stored_goodput_slos == slo_table(slos):
        return measurement.stored_request_goodput
    return None


def raw_metrics(
    repeats: list[Measurement], slos: Sequence[SLO], pick: str = "median"
) -> dict[str, float | None]:
    """Scoring metrics over repeats: ``pick`` = ``"median"``, or the ``"best"``/``"worst"``
    repeat per metric. Keys: :data:`HIGHER_IS_BETTER`, then with SLOs ``goodput`` and
    ``slo:<key>`` (None when infinite)."""

    def combine(values: list[float], higher_better: bool) -> float | None:
        if not values:
            return None
        if pick == "median":
            return median(values)
        best = pick == "best"
        return max(values) if best == higher_better else min(values)

    combined: dict[str, float | None] = {}
    for key, higher_better in HIGHER_IS_BETTER.items():
        values = [value for repeat in repeats if (value := repeat.values.get(key)) is not None]
        combined[key] = combine(values, higher_better)
    if slos:
        goodputs = [value for repeat in repeats if (value := goodput(repeat, slos)) is not None]
        combined["goodput"] = combine(goodputs, True)
        for slo in slos:
            value = combine([repeat.slo_value(slo) for repeat in repeats], False)
            combined[f"slo:{slo.key}"] = None if value is None or math.isinf(value) else value
    return combined


def info_metrics(repeats: list[Measurement]) -> dict[str, float | bool | None]:
    """Shown next to the score, not scored: request counts (median over repeats), the first
    repeat's offered/achieved rate and the engine's own counters."""
    first = repeats[0]
    return {
        "requests_completed": median([repeat.requests_completed for repeat in repeats]),
        "requests_failed": median([repeat.requests_failed for repeat in repeats]),
        "offered_rate": first.recorded_offered_rate,
        "achieved_rate": first.achieved_rate,
        "rate_valid": first.rate_valid,
        "prefix_cache_hit_rate": first.prefix_cache_hit_rate,
        "spec_acceptance_rate": first.spec_acceptance_rate,
    }
