"""Engines ranked by their capacity under SLOs (``bench search``), and the deciding sentence.

An engine's capacity is the offered load (requests/s, session starts/s or in-flight requests)
at which every SLO just holds, found by bracketing and bisection (``harness.app.search.capacity``;
the method of vLLM's ``vllm bench sweep serve_sla`` and AIPerf's goodput search). The search
leaves a bracket ``[p, f)``: ``p`` passed, ``f`` (the lowest failing load above it) failed, so
the true threshold lies in between; the capacity is read inside it where the SLO margin crosses
1 (``harness.scoring.capacity.frontier.capacity_from``, the estimator ``bench run``'s ladder uses). The bracket is the
resolution of the measurement: two engines whose brackets overlap cannot be told apart by
this search and are **tied** (said so in the sentence); a search that stopped before any
failing load was found (budget, probe limit, ``--high``) has the open bracket ``[p, inf)``
and its capacity reads "≥ p". An engine that never met the SLOs at the lowest load has
capacity 0 and the bracket ``[0, low)``.

The reference engine (:data:`~harness.scoring.gates.REFERENCE_ENGINES`, ``own``) is ranked
like every engine, as a yardstick, but is never the recommendation: the recommended engine is
the highest-capacity production engine with a capacity above 0. Ranking ties (equal
capacities, not overlapping brackets) are ordered by engine name.
"""

from __future__ import annotations

import math
from typing import Sequence

from harness.metrics import SLO
from results.schema import CapacityRank, CapacityRecommendation, EngineSearch, EngineStatus

from ..formatting import slo_text
from ..gates import REFERENCE_ENGINES

METHOD = ("capacity = the offered load at which the SLO margin crosses 1, read between the last passing and the "
          "first failing probe (the decision core bench run's ladder uses), found by bracketing (doubling) and "
          "bisection to the stated tolerance (vLLM `vllm bench sweep serve_sla`, AIPerf goodput search); a saturated probe "
          "(achieved rate below the offered one beyond 5 %) counts as a fail; engines whose [passing, failing) "
          "brackets overlap are tied; the reference engine is a yardstick, never the recommendation")


def interval(e: EngineSearch) -> tuple[float, float]:
    """``[low, high)`` where ``e``'s true capacity lies (the search's bracket; ``inf`` when no
    failing load above the capacity was found; ``[0, low)`` when it never met the SLOs)."""
    passing, failing = e.bracket
    lo = float(passing) if passing is not None and e.capacity > 0 else 0.0
    hi = math.inf if failing is None else float(failing)
    return lo, hi


def overlaps(a: EngineSearch, b: EngineSearch) -> bool:
    """True when the two engines' capacity brackets overlap (the search cannot tell them apart)."""
    (alo, ahi), (blo, bhi) = interval(a), interval(b)
    return max(alo, blo) < min(ahi, bhi)


def capacity_text(e: EngineSearch) -> str:
    """``"3.1"``, ``"4.43"`` (read between two probes), ``"≥ 2"`` (open bracket), ``"0"``."""
    c = e.capacity
    num = f"{c:g}" if float(c).is_integer() else f"{c:.3g}"
    return f"≥ {num}" if c > 0 and interval(e)[1] == math.inf else num


def _groups(names: list[str], engines: dict[str, EngineSearch]) -> list[list[str]]:
    """Connected components (size >= 2) of the overlap graph, in ranking order."""
    seen: set[str] = set()
    out = []
    for n in names:
        if n in seen:
            continue
        group, todo = [], [n]
        while todo:
            x = todo.pop()
            if x in seen:
                continue
            seen.add(x)
            group.append(x)
            todo += [y for y in names if y not in seen and overlaps(engines[x], engines[y])]
        if len(group) > 1:
            out.append(sorted(group, key=names.index))
    return out


def rank_capacity(engines: dict[str, EngineSearch], slos: Sequence[SLO], unit: str,
                  low: float | None = None) -> CapacityRecommendation:
    """Rank the searched engines (status ok, at least one probe) by capacity, highest first;
    the others are listed in ``excluded`` with their reason. ``slos``: the SLOs the search
    judged by (for the sentence); ``unit``: the load's unit; ``low``: the lowest load searched."""
    excluded: dict[str, str] = {}
    ranked: dict[str, EngineSearch] = {}
    for name, e in engines.items():
        if e.status is not EngineStatus.OK:
            excluded[name] = f"{e.status.value}: {e.reason}" if e.reason else e.status.value
        elif not e.probes:
            excluded[name] = f"no probe ran ({e.message})" if e.message else "no probe ran"
        else:
            ranked[name] = e
    names = sorted(ranked, key=lambda n: (-ranked[n].capacity, n))
    probed = [p.load for e in ranked.values() for p in e.probes]
    if probed:  # the lowest load any engine was probed at (a failing first load is halved)
        low = min(probed)
    ranking: list[CapacityRank] = []
    for i, n in enumerate(names):
        rank = ranking[-1].rank if i and overlaps(ranked[n], ranked[names[i - 1]]) else i + 1
        ranking.append(CapacityRank(
            engine=n, rank=rank, capacity=ranked[n].capacity, bracket=ranked[n].bracket,
            tied_with=[m for m in names if m != n and overlaps(ranked[n], ranked[m])],
            reference=n in REFERENCE_ENGINES, at_least=ranked[n].capacity > 0 and interval(ranked[n])[1] == math.inf))
    winner = next((r.engine for r in ranking if not r.reference and r.capacity > 0), None)
    sentence = _sentence(ranking, ranked, winner, slos, unit, low, excluded)
    return CapacityRecommendation(recommended=winner, sentence=sentence, unit=unit, ranking=ranking,
                                  tie_groups=_groups(names, ranked), excluded=excluded, method=METHOD)


def _sentence(ranking: list[CapacityRank], engines: dict[str, EngineSearch], winner: str | None,
              slos: Sequence[SLO], unit: str, low: float | None, excluded: dict[str, str]) -> str:
    """The deciding sentence (see :class:`results.schema.CapacityRecommendation`)."""
    under = " and ".join(slo_text(s) for s in slos) or "no SLO"
    at_low = f" at the lowest load searched ({low:g} {unit})" if low is not None else ""

    def entry(r: CapacityRank, tied_to: str | None = None) -> str:
        text = f"{r.engine} {capacity_text(engines[r.engine])}"
        notes = (["yardstick"] if r.reference else []) + ([f"tied with {tied_to}"] if tied_to in r.tied_with else [])
        return text + (f" ({', '.join(notes)})" if notes else "")

    if not ranking:
        head = "no engine was searched"
    elif winner is None:
        refs = [r for r in ranking if r.reference and r.capacity > 0]
        if refs and len(ranking) == len(refs):
            r = refs[0]
            head = (f"only the reference engine {r.engine} was searched: it sustains {capacity_text(engines[r.engine])} "
                    f"{unit} at {under} (a yardstick, never the recommendation)")
        else:
            who = "no production engine" if refs else "no engine"
            head = f"{who} sustains {under}{at_low}: " + "; ".join(entry(r) for r in ranking)
    else:
        w = next(r for r in ranking if r.engine == winner)
        head = f"{winner} sustains {capacity_text(engines[winner])} {unit} at {under}"
        prod_ties = [m for m in w.tied_with if m not in REFERENCE_ENGINES]
        if prod_ties:
            head += (f", tied with {' and '.join(prod_ties)} (their capacity brackets overlap: "
                     "the search cannot tell them apart)")
        rest = [entry(r, winner) for r in ranking if r.engine != winner]
        head = "; ".join([head, *rest])
    if any(r.at_least for r in ranking):
        head += " (≥: the search stopped before a failing load was found)"
    if excluded:
        head += "; not ranked: " + ", ".join(f"{n} ({why})" for n, why in excluded.items())
    return head
