"""The verdict: which engine serves the workload best on this hardware, and what decided it.

Gates, not weights. An engine is **excluded**, with one line saying why, when it did not start,
crashed under load, failed more requests than the bound, cannot fit, lacks a required feature,
or misses the SLO at the lowest load of its ladder (:class:`Candidate.excluded`). The client's
own limits never exclude an engine (they mark its figures instead).

Among the rest the **capacity at the SLO** decides (:mod:`harness.scoring.frontier`): the
production engine with the highest capacity wins; the ratio of its capacity over the
runner-up's carries a 95 % interval from the two engines' independent bootstrap draws
(percentile interval of the ratio of draws). An interval that reaches down to 1 +
:data:`EQUIVALENCE_MARGIN` (1.05) is a **tie**, said as such: the difference is inside the noise,
or too small (under 5 %) to choose an engine by (a margin of practical equivalence, as in
equivalence testing: Schuirmann 1987). Why 5 %: on the decision test bed (benchmarks/decision_bed.py)
engines 3 % apart are then called a tie in 40 of 40 seeded trials at the bed's usual noise and 39 of
40 at twice it (with a 3 % margin: 36 of 40), while one 15 % better still wins all 40 at both. The
bootstrap interval covers the requests' noise, not where the ladder happened to bracket the boundary,
so it runs a little narrow; the margin absorbs that. Only then do the tie-breakers speak, in order: start-up time (10 % apart or more), server
processes, verified features, peak memory (10 % apart or more); when none separates them, the
higher point estimate stands. The reference engine (a yardstick) is ranked on the same scale
and never recommended.

A capacity whose ladder stopped before an SLO broke (budget, highest load: ``open``) is a lower
bound. A leader with an open capacity still wins over a runner-up whose capacity is known (the
ratio is then a lower bound too); a runner-up with an open capacity may truly be the better
engine, so the verdict is then **undecided**, and says which ladder to climb further.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from .frontier import Capacity

TIE_BREAK_BAND = 0.10  # start-up time and memory break a tie only when 10 % or more apart
EQUIVALENCE_MARGIN = 0.05  # capacities closer than 5 % are not a basis for a choice


@dataclass
class Candidate:
    """One engine before the decision: ``capacity`` (None when it has no ladder), ``excluded``
    (the gate's one-line reason, "" = eligible), ``reference`` (a yardstick), and the
    tie-breakers: ``startup_s`` (s), ``processes``, ``verified_features`` (count),
    ``peak_memory_bytes``."""

    name: str
    capacity: Capacity | None = None
    excluded: str = ""
    reference: bool = False
    startup_s: float | None = None
    processes: int | None = None
    verified_features: int | None = None
    peak_memory_bytes: float | None = None


@dataclass
class Verdict:
    """The decision: ``winner`` ("" = none eligible), ``runner_up``, ``ratio`` (winner ÷
    runner-up capacity) and its 95 % ``ratio_interval``, ``tie`` (the interval reaches 1.05),
    ``tie_breaker`` (what decided a tie: a sentence, "" when none was needed), ``ranking``
    (eligible production engines, best first), ``yardsticks``, ``excluded`` (name → reason)."""

    winner: str = ""
    runner_up: str = ""
    ratio: float | None = None
    ratio_interval: tuple[float, float] | None = None
    tie: bool = False
    tie_breaker: str = ""
    undecided: str = ""
    ranking: list[str] = field(default_factory=list)
    yardsticks: list[str] = field(default_factory=list)
    excluded: dict[str, str] = field(default_factory=dict)


def ratio_interval(a: Capacity, b: Capacity, confidence: float = 0.95) -> tuple[float, float] | None:
    """The percentile interval of ``a / b`` over the two engines' bootstrap draws (paired by
    index, drawn independently; a draw where ``b``'s capacity is 0 gives an infinite ratio);
    None without draws. Order statistics (``inverted_cdf``), so an infinite end stays infinite."""
    n = min(a.draws.size, b.draws.size)
    if n == 0:
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.where(b.draws[:n] > 0, a.draws[:n] / np.where(b.draws[:n] > 0, b.draws[:n], 1.0), np.inf)
    tail = (1 - confidence) / 2
    lo, hi = np.quantile(ratios, [tail, 1 - tail], method="inverted_cdf")
    return float(lo), float(hi)


def _eligible(c: Candidate) -> bool:
    return not c.excluded and c.capacity is not None and not c.capacity.never_met and c.capacity.output_tps > 0


def _apart(a: float | None, b: float | None, band: float) -> bool:
    return a is not None and b is not None and abs(a - b) > band * max(abs(a), abs(b))


def break_tie(a: Candidate, b: Candidate) -> tuple[Candidate, str]:
    """The engine the tie-breakers pick between ``a`` and ``b`` (capacities tied) and why; ``a``
    (the higher point estimate) when none separates them."""
    if _apart(a.startup_s, b.startup_s, TIE_BREAK_BAND):
        first, other = (a, b) if (a.startup_s or 0) < (b.startup_s or 0) else (b, a)
        return first, f"start-up time ({first.startup_s:.0f} s vs {other.startup_s:.0f} s)"
    if a.processes is not None and b.processes is not None and a.processes != b.processes:
        first, other = (a, b) if a.processes < b.processes else (b, a)
        return first, f"fewer server processes ({first.processes} vs {other.processes})"
    if a.verified_features is not None and b.verified_features is not None and a.verified_features != b.verified_features:
        first, other = (a, b) if a.verified_features > b.verified_features else (b, a)
        return first, f"more verified features ({first.verified_features} vs {other.verified_features})"
    if _apart(a.peak_memory_bytes, b.peak_memory_bytes, TIE_BREAK_BAND):
        first, other = (a, b) if (a.peak_memory_bytes or 0) < (b.peak_memory_bytes or 0) else (b, a)
        return first, (f"lower peak memory ({(first.peak_memory_bytes or 0) / 2**30:.1f} GiB vs "
                       f"{(other.peak_memory_bytes or 0) / 2**30:.1f} GiB)")
    return a, "the higher point estimate (no tie-breaker separates them)"


def decide(candidates: Sequence[Candidate]) -> Verdict:
    """The verdict over ``candidates`` (module docstring)."""
    v = Verdict(excluded={c.name: c.excluded for c in candidates if c.excluded})
    for c in candidates:
        if not c.excluded and c.capacity is not None and c.capacity.never_met:
            v.excluded[c.name] = "misses the SLO at the lowest load"
    eligible = sorted((c for c in candidates if _eligible(c)), key=lambda c: -c.capacity.output_tps)  # type: ignore[union-attr]
    v.yardsticks = [c.name for c in eligible if c.reference]
    production = [c for c in eligible if not c.reference]
    v.ranking = [c.name for c in production]
    if not production:
        return v
    best = production[0]
    if len(production) == 1:
        v.winner = best.name
        return v
    second = production[1]
    assert best.capacity is not None and second.capacity is not None
    v.ratio = best.capacity.output_tps / second.capacity.output_tps if second.capacity.output_tps > 0 else math.inf
    v.ratio_interval = ratio_interval(best.capacity, second.capacity)
    if second.capacity.open:  # its ladder stopped before an SLO broke: it may be better than it looks
        v.runner_up, v.undecided = second.name, second.name
        return v
    v.tie = v.ratio_interval is None or v.ratio_interval[0] <= 1.0 + EQUIVALENCE_MARGIN
    if v.tie:
        chosen, why = break_tie(best, second)
        v.winner, v.runner_up, v.tie_breaker = chosen.name, (second if chosen is best else best).name, why
    else:
        v.winner, v.runner_up = best.name, second.name
    return v
