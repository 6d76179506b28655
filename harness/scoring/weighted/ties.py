"""Ties in the ranking: each survivor's score with a 95 % interval over repeats.

Repeat ``k`` of every engine is scored together: the engines' metrics of their ``k``-th
measurement at the judged condition (repeats inside one run folder are interleaved A B C,
A B C, and several run folders of one condition are repeats in run order, so repeat ``k`` of
every engine saw the same machine state as closely as the harness can arrange) go through
the same scoring as the medians (:func:`.ranking.evaluate` with those metrics; every
criterion normalised against the best survivor *of that repeat*). An engine's interval is
:func:`harness.metrics.median_ci_over_repeats` of its per-repeat scores (bootstrap of the
median of per-repeat numbers, seed 0, 2000 resamples; coarse below 5 repeats, see
:mod:`harness.metrics.intervals`). With survivors measured a different number of times,
the first ``min`` repeats of each are used.

Ties: engines whose intervals overlap are tied (:func:`harness.metrics.rank_with_ties`,
groups led by their best engine; overlap of two 95 % intervals is a conservative test, so
"tied" reads "not shown different"). Noise could flip the winner when its interval overlaps
that of a production rival (:func:`harness.metrics.could_flip`). With fewer than 2 repeats no
interval exists: the deciding line says noise was not measured and no tie check was possible.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from harness.metrics import ConfidenceInterval, could_flip, median_ci_over_repeats, rank_with_ties
from results.schema import Interval

from ..measured.repeats import raw_metrics
from .ranking import Outcome, ScoringContext, evaluate

SEED = 0  # bootstrap seed: the same data give the same intervals


@dataclass
class TieCheck:
    """The tie check of one outcome. ``repeats``: aligned repeats used (< 2: none possible);
    ``intervals``: engine → its score interval (score units, in [0, 1]); ``groups``: the
    survivors in tie groups, best first; ``tied_with_winner``: production engines whose
    interval overlaps the winner's; ``could_flip``: None when not measured."""

    repeats: int
    intervals: dict[str, ConfidenceInterval] = field(default_factory=dict)
    groups: list[list[str]] = field(default_factory=list)
    tied_with_winner: list[str] = field(default_factory=list)
    could_flip: bool | None = None
    scores: dict[str, list[float]] = field(default_factory=dict)  # engine → its score in repeat 0, 1, …

    def stored(self, engine: str) -> Interval | None:
        """``engine``'s interval as the stored model (None without one)."""
        interval = self.intervals.get(engine)
        if interval is None:
            return None
        return Interval(point=interval.point, low=interval.low, high=interval.high, n=interval.n,
                              confidence=interval.confidence, method=f"{interval.method} (per-repeat scores)",
                              basis=interval.basis, cv=interval.cv)


def per_repeat_scores(outcome: Outcome, ctx: ScoringContext) -> dict[str, list[float]]:
    """Each survivor's score in repeat 0, 1, … (the first ``min`` repeats of every survivor)."""
    repeats = {name: ctx.engines[name].at(outcome.judged_at[name]) for name in outcome.survivors}
    count = min((len(measured) for measured in repeats.values()), default=0)
    scores: dict[str, list[float]] = {name: [] for name in outcome.survivors}
    for index in range(count):
        override = {name: raw_metrics([measured[index]], outcome.slos) for name, measured in repeats.items()}
        for row in evaluate(ctx, outcome.slos, raw_override=override).ranking:
            scores[row.engine].append(row.score)
    return scores


def tie_check(outcome: Outcome, ctx: ScoringContext) -> TieCheck:
    """Intervals, tie groups and the could-flip verdict (module docstring)."""
    if not outcome.survivors:
        return TieCheck(repeats=0)
    scores = per_repeat_scores(outcome, ctx)
    count = min(len(values) for values in scores.values())
    if count < 2:
        return TieCheck(repeats=count)
    intervals = {name: median_ci_over_repeats(values, seed=SEED) for name, values in scores.items()}
    check = TieCheck(repeats=count, intervals=intervals, groups=rank_with_ties(intervals), scores=scores)
    winner = outcome.winner
    if winner is not None:
        rivals = [name for name in outcome.production if name != winner]
        check.tied_with_winner = [name for name in rivals if could_flip(intervals[winner], intervals[name])]
        check.could_flip = bool(check.tied_with_winner) if rivals else None
    return check


def _score_text(interval: ConfidenceInterval) -> str:
    return f"{interval.point:.3f} [{interval.low:.3f}, {interval.high:.3f}]"


def tie_clause(outcome: Outcome, check: TieCheck) -> str:
    """The deciding line's sentence on noise, for a winner with production rivals ("" otherwise)."""
    winner = outcome.winner
    production = outcome.production
    if winner is None or len(production) < 2:
        return ""
    if check.repeats < 2:
        return ("run-to-run noise was not measured (1 repeat): no tie check was possible; rerun with "
                "--repeats 2 or more")
    n = f"median per-repeat score with its 95% interval over {check.repeats} repeats"
    if check.tied_with_winner:
        rivals = ", ".join(f"{name} {_score_text(check.intervals[name])}" for name in check.tied_with_winner)
        return (f"tied with {', '.join(check.tied_with_winner)} within the noise ({n}: {winner} "
                f"{_score_text(check.intervals[winner])} vs {rivals}): noise could flip the winner")
    runner_up = production[1]
    wins = sum(a > b for a, b in zip(check.scores.get(winner, []), check.scores.get(runner_up, [])))
    paired = f"{winner} scored above {runner_up} in {wins} of {check.repeats} paired repeats"
    chance = chance_separated(check.repeats)
    intervals = (f"({n}: {winner} {_score_text(check.intervals[winner])} vs {runner_up} "
                 f"{_score_text(check.intervals[runner_up])})")
    if chance > 0.05:
        return (f"the intervals do not overlap {intervals} and {paired}, but with {check.repeats} repeats two "
                f"identical engines come out this separated by chance 1 time in {round(1 / chance)}: provisional, "
                f"rerun with --repeats {_repeats_for(0.05)} or more to rule noise out")
    return (f"noise cannot flip the winner on this data: the intervals do not overlap {intervals}; {paired} "
            f"(by chance between identical engines: 1 in {round(1 / chance)})")


def chance_separated(repeats: int) -> float:
    """Probability that two engines with identical score distributions come out with all ``repeats``
    per-repeat scores of one above all of the other's (their intervals over repeats then cannot
    overlap): 2 / C(2n, n) for n repeats each, exchangeable scores (a permutation argument:
    each of the C(2n, n) splits of the 2n pooled scores is equally likely, and 2 of them
    separate). 1/3 for 2 repeats, 1/10 for 3, 1/35 for 4."""
    return 2 / math.comb(2 * repeats, repeats)


def _repeats_for(alpha: float) -> int:
    """The fewest repeats for which :func:`chance_separated` is at most ``alpha``."""
    n = 2
    while chance_separated(n) > alpha:
        n += 1
    return n


def yardstick_noise(outcome: Outcome, check: TieCheck) -> str:
    """Whether the reference engine's score interval overlaps the winner's ("" without intervals)."""
    reference, winner = outcome.reference, outcome.winner
    if reference is None or winner is None or reference not in check.intervals:
        return ""
    within = could_flip(check.intervals[reference], check.intervals[winner])
    return (f"{'within' if within else 'outside'} the noise of {winner} (score {_score_text(check.intervals[reference])} "
            f"vs {_score_text(check.intervals[winner])}, {check.repeats} repeats)")


def attach(outcome: Outcome, check: TieCheck) -> None:
    """Put each ranked engine's interval on its :class:`results.recommendation.RankedEngine`."""
    for row in outcome.ranking:
        row.score_interval = check.stored(row.engine)
