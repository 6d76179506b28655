"""Where the next measurement goes: the main job's one allocation rule, after every engine's
first climb (:mod:`harness.app.run.ladder_run` on live engines, :mod:`harness.app.run.testbed`
on scripted ones: the same rule).

Each engine's first climb measures its low end (1 and 2 in flight; no bisection yet). Then, in
rounds, the measuring goes where the verdict is uncertain (:mod:`harness.scoring.capacity.race` bounds each engine;
:mod:`harness.scoring.verdict.verdict` decides), one step at a time:

1. an engine **out of the race** (its ceiling below the leader's floor) is measured no more;
2. while an open engine that could still lead is left (the verdict is *undecided*), an open
   leader **climbs** on first (its climb raises the bar the others must reach: the one step
   that can put them out of the race, and one the leader needs whoever it stays ahead of), then
   the best placed of the others (doubling from its highest load, aimed at its projected
   boundary);
3. while the leader and the runner-up are *not separated*: whichever of them has a bracket wider
   than one load **bisects** it (the wider first); when both are bisected, both are **repeated**
   (their bracket points measured once more each, on a fresh start, the pair interleaved), at
   most ``max_repeats`` times;
4. once the verdict is *separated*, *equivalent* or *single*: an open leader climbs until its
   capacity is found (the figure the verdict and the recipe print), then its bracket is bisected
   until its loads are at most :data:`PRECISION` apart;
   then its bracket points are repeated once (the spread between starts in its interval) if it
   was never repeated and the spread between measurements is not settled yet (fewer than
   :data:`SETTLED_DF` degrees of freedom: on a machine whose earlier runs settled it, the
   interval already holds the spread between runs, and one more pair would narrow t's quantile
   by a few per cent for a whole fresh start's time). Then nothing is left to measure.

Each engine climbs on at most ``max_climbs`` times. The caller stops earlier when its time budget
cannot pay for the next step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Mapping

from results.schema.metric_registry import tps_figure

from ..capacity.race import Standing
from .verdict import Verdict

Action = Literal["climb", "bisect", "repeat"]
PRECISION = 0.25  # a separated leader's bracket is bisected until its loads are at most 25 % apart
SETTLED_DF = 10  # the spread between measurements is settled from this many degrees of freedom (t's 97.5 % quantile
# 2.23; 2.18 with the two more a leader's repeat adds, where at 2 they take it from 4.30 to 2.78)


@dataclass(frozen=True)
class Step:
    """One step of the allocation: ``engine`` and what to do (``action``), and why (``why``, a
    clause for the console)."""

    engine: str
    action: Action
    why: str


@dataclass(frozen=True)
class Ladders:
    """What the rule reads of each engine's ladder besides its standing: ``gap`` (failing load
    minus passing load of its bracket; 0 when open or never met), ``passing`` (its bracket's passing
    load), ``climbable`` (an open ladder
    that can climb on: not at ``--max-load``, not crashed), ``climbs`` and ``repeats`` done so far."""

    gap: Mapping[str, float]
    passing: Mapping[str, float]
    climbable: Mapping[str, bool]
    climbs: Mapping[str, int]
    repeats: Mapping[str, int]


def next_steps(race: list[Standing], verdict: Verdict, ladders: Ladders, *, max_climbs: int = 3,
               max_repeats: int = 3, spread_df: int = 0) -> list[Step]:
    """The next steps (module docstring): one, or the leader and runner-up's interleaved pair of
    repeats; [] when nothing is left to measure. ``spread_df``: the degrees of freedom of the
    spread between measurements the verdict was judged with (:class:`harness.scoring.capacity.spread.Spread`)."""
    if not race:
        return []
    leader = race[0]
    can_climb = lambda s: ladders.climbable.get(s.name, False) and ladders.climbs.get(s.name, 0) < max_climbs  # noqa: E731
    if verdict.outcome == "undecided":
        if leader.open and can_climb(leader):
            return [Step(leader.name, "climb", "the leader's capacity is not found yet, and an open engine could still "
                                               "pass it: its climb raises the bar the others must reach")]
        for s in race[1:]:
            if not s.out and s.open and can_climb(s):
                return [Step(s.name, "climb", f"its ladder stopped before any SLO broke and it could still lead "
                                              f"{leader.name} (at most {tps_figure(s.ceiling)} tok/s)")]
    if verdict.outcome in ("not_separated", "undecided") and len(race) > 1:
        second = race[1]
        pair = [leader, second]
        for s in pair:
            if s.open and can_climb(s):
                return [Step(s.name, "climb", "its ladder stopped before any SLO broke, not separated yet")]
        wide = sorted((s for s in pair if ladders.gap.get(s.name, 0) > 1), key=lambda s: -ladders.gap[s.name])
        if wide:
            return [Step(wide[0].name, "bisect", f"not separated from {(second if wide[0] is leader else leader).name} "
                                                 "yet: its boundary narrowed")]
        if all(ladders.repeats.get(s.name, 0) < max_repeats for s in pair):
            return [Step(s.name, "repeat", "not separated yet: its bracket points measured once more") for s in pair]
        return []
    if verdict.outcome in ("separated", "equivalent", "single"):
        if leader.open and can_climb(leader):
            return [Step(leader.name, "climb", "the leader's capacity is not found yet (no SLO broke)")]
        if ladders.gap.get(leader.name, 0) > max(1.0, PRECISION * ladders.passing.get(leader.name, 0)):
            return [Step(leader.name, "bisect", "the leader's boundary narrowed")]
        if spread_df < SETTLED_DF and not leader.open and ladders.repeats.get(leader.name, 0) < 1:
            return [Step(leader.name, "repeat", "the leader's bracket measured on a fresh start (the spread between "
                                                "starts, in its interval)")]
    return []
