"""The verdict: which engine serves the workload best on this hardware, and what decided it.

Gates, not weights. An engine is **excluded**, with one line saying why, when it did not start,
crashed under load, failed more requests than the bound, cannot fit, lacks a required feature,
or misses the SLO at the lowest load of its ladder (:class:`Candidate.excluded`). The client's
own limits never exclude an engine (they mark its figures instead).

Among the rest the **capacity at the SLO** decides (:mod:`harness.scoring.capacity.frontier`): the
production engine with the highest capacity leads; the ratio of its capacity over the
runner-up's carries intervals from the two engines' independent bootstrap draws (each engine
its own random stream; percentile intervals of the ratio of draws). Three outcomes, as an
equivalence test reads them (Schuirmann 1987, two one-sided tests; margin
:data:`EQUIVALENCE_MARGIN`, 5 %: capacities closer than that are no basis for a choice):

- **separated**: the 95 % interval's lower end is above 1 + margin. The leader wins.
- **equivalent**: the 90 % interval (TOST at the 5 % level) lies wholly inside
  [1 / (1 + margin), 1 + margin]. Only then do the tie-breakers speak, in order: start-up time
  (10 % apart or more), server processes, verified features, peak memory (10 % apart or more);
  when none separates them, the higher point estimate stands. A leader whose capacity is a
  lower bound (``open``) never loses on a tie-breaker: it may be the better engine.
- **not separated**: neither. No winner and no tie-breaker: "X leads, not separated from Y";
  the run measures more where its budget allows.

An interval from 1.04 to 1.38 is *not separated* (it was a "tie" before, and the tie-breakers
could pick the engine that is probably 20 % slower).

A capacity whose ladder stopped before an SLO broke (budget, highest load: ``open``) is a lower
bound. A leader with an open capacity can still be separated from a runner-up whose capacity is
known (the ratio is then a lower bound too). Any other production engine with an open capacity
may truly be the best (its ladder has not found its limit), so while one is left the verdict is
**undecided**, and names every such engine (``unsettled``), not only the runner-up, unless its
ceiling is below the leader's floor (:mod:`harness.scoring.capacity.race`: the closed-system model bounds
what its ladder can still reach): such an engine is out of the race, and an open runner-up out of
it leaves the leader *separated*. The reference engine (a yardstick) is ranked on the same scale
and never recommended.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, Sequence

import numpy as np

from ..capacity.frontier import Capacity
from ..capacity.race import ceiling, floor

TIE_BREAK_BAND = 0.10  # start-up time and memory break a tie only when 10 % or more apart
EQUIVALENCE_MARGIN = 0.05  # capacities closer than 5 % are not a basis for a choice
SEPARATION_CONFIDENCE = 0.95  # separated: this interval's lower end above 1 + margin
EQUIVALENCE_CONFIDENCE = 0.90  # equivalent: this interval inside the margin (TOST at 5 %: a 1 - 2α interval)

Outcome = Literal["separated", "equivalent", "not_separated", "undecided", "single", "none"]


@dataclass
class Candidate:
    """One engine before the decision: ``capacity`` (None when it has no ladder), ``excluded``
    (the gate's one-line reason, "" = eligible), ``reference`` (a yardstick), and the
    tie-breakers: ``startup_s`` (s; it breaks a tie only when both were measured alone,
    ``startup_alone``: a start beside other engines' on a shared machine measures the crowd), ``processes``, ``verified_features`` (count),
    ``peak_memory_bytes``."""

    name: str
    capacity: Capacity | None = None
    excluded: str = ""
    reference: bool = False
    startup_s: float | None = None
    startup_alone: bool = True  # measured with no other engine starting: only then does start-up time break a tie
    processes: int | None = None
    verified_features: int | None = None
    peak_memory_bytes: float | None = None


@dataclass
class Verdict:
    """The decision (module docstring): ``outcome``; ``winner`` ("" = none: nothing eligible,
    not separated, or undecided); ``leader`` (the highest capacity among production engines,
    winner or not); ``runner_up``; ``ratio`` (leader ÷ runner-up capacity) with its 95 %
    ``ratio_interval`` and the 90 % ``equivalence_interval``; ``tie`` (outcome equivalent);
    ``tie_breaker`` (what decided an equivalence: a sentence, "" when none was needed);
    ``undecided`` (the first of ``unsettled``: the open engines that could still lead);
    ``ranking`` (eligible production engines, best first), ``yardsticks``, ``excluded`` (name →
    reason)."""

    winner: str = ""
    runner_up: str = ""
    ratio: float | None = None
    ratio_interval: tuple[float, float] | None = None
    tie: bool = False
    tie_breaker: str = ""
    undecided: str = ""
    outcome: Outcome = "none"
    leader: str = ""
    equivalence_interval: tuple[float, float] | None = None
    unsettled: list[str] = field(default_factory=list)
    ranking: list[str] = field(default_factory=list)
    yardsticks: list[str] = field(default_factory=list)
    excluded: dict[str, str] = field(default_factory=dict)


def ratio_interval(a: Capacity, b: Capacity, confidence: float = 0.95) -> tuple[float, float] | None:
    """The percentile interval of ``a / b`` over the two engines' bootstrap draws (paired by
    index; each engine's draws come from its own random stream,
    :func:`harness.scoring.capacity.frontier.engine_stream`, so pairing by index pairs independent draws;
    a draw where ``b``'s capacity is 0 gives an infinite ratio); None without draws. Order
    statistics (``inverted_cdf``), so an infinite end stays infinite."""
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
    if a.startup_alone and b.startup_alone and _apart(a.startup_s, b.startup_s, TIE_BREAK_BAND):
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


def outcome_of(interval: tuple[float, float] | None, equivalence: tuple[float, float] | None,
               margin: float = EQUIVALENCE_MARGIN) -> Outcome:
    """*separated*, *equivalent* or *not_separated* from the ratio's 95 % ``interval`` and its 90 %
    ``equivalence`` interval (module docstring); not separated without intervals."""
    if interval is not None and interval[0] > 1.0 + margin:
        return "separated"
    if equivalence is not None and equivalence[0] >= 1.0 / (1.0 + margin) and equivalence[1] <= 1.0 + margin:
        return "equivalent"
    return "not_separated"


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
    v.leader = best.name
    if len(production) == 1:
        v.winner, v.outcome = best.name, "single"
        return v
    second = production[1]
    assert best.capacity is not None and second.capacity is not None
    v.runner_up = second.name
    v.ratio = best.capacity.output_tps / second.capacity.output_tps if second.capacity.output_tps > 0 else math.inf
    v.ratio_interval = ratio_interval(best.capacity, second.capacity, SEPARATION_CONFIDENCE)
    v.equivalence_interval = ratio_interval(best.capacity, second.capacity, EQUIVALENCE_CONFIDENCE)
    bar = floor(best.capacity)  # an open engine whose ceiling is below the leader's floor cannot lead (race)
    v.unsettled = [c.name for c in production[1:] if c.capacity is not None and c.capacity.open
                   and ceiling(c.capacity) >= bar]
    if v.unsettled:  # an open engine may truly be the best: no winner until its ladder finds its limit
        v.undecided, v.outcome = v.unsettled[0], "undecided"
        return v
    v.outcome = "separated" if second.capacity.open else outcome_of(v.ratio_interval, v.equivalence_interval)
    if v.outcome == "separated":
        v.winner = best.name
    elif v.outcome == "equivalent":
        v.tie = True
        if best.capacity.open:  # a lower bound never loses on a tie-breaker
            v.winner, v.tie_breaker = best.name, ("the leader's lower bound (its capacity is at least this, so no "
                                                  "tie-breaker speaks against it)")
        else:
            chosen, why = break_tie(best, second)
            v.winner, v.runner_up, v.tie_breaker = chosen.name, (second if chosen is best else best).name, why
    return v
