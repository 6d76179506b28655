"""Sensitivity: what small change would change the winner (the best production engine: the
reference engine is a yardstick and never becomes the winner, so it is no rival here).

- one weight: closed form, since the score difference is linear in each weight;
- one SLO threshold: steps 2-3 re-run at each measured value of that SLO's metric;
- run-to-run noise, when repeats exist: the SLO verdicts individual repeats disagree with, and
  whether the winner at its worst repeat still beats each rival at its best.
"""

from __future__ import annotations

import math

from harness.metrics import SLO
from results.recommendation import WeightFlip
from results.schema.metric_registry import metric_figure

from ..formatting import METRIC_LABELS, format_weight, slo_text
from ..measured.repeats import median_slo_value, raw_metrics
from .ranking import EPS, Outcome, ScoringContext, evaluate
from .weights import CRITERIA

# A weight change larger than this many times the sum of all weights is reported as "no
# realistic change": it only flips a near-tie on that one criterion.
_EXTREME_WEIGHT = 10.0


def weight_sensitivity(outcome: Outcome, ctx: ScoringContext, flips: list[WeightFlip]) -> list[str]:
    """Closed form: with D_e = Σ_c w_c (s_ec − s_wc) ≤ 0 for each rival e, changing w_c by δ
    changes D_e by δ·(s_ec − s_wc); the winner changes once some D_e > 0. Appends the smallest
    change per criterion to ``flips``."""
    if outcome.winner is None:
        return []
    rivals = [name for name in outcome.production if name != outcome.winner]
    if not rivals:
        kind = "production engine" if outcome.reference else "engine"
        return [f"no weight change can change the winner: only one {kind} survives the hard constraints"]
    winner = outcome.winner
    weight_sum = sum(ctx.weights.values())
    found: list[tuple[float, str]] = []  # (change, sentence): the smallest lever per criterion
    lines: list[str] = []
    for criterion in CRITERIA:
        weight = ctx.weights[criterion]
        best_raise: tuple[float, str] | None = None  # (δ, rival)
        best_lower: tuple[float, str] | None = None
        for rival in rivals:
            # D_e = Σ_c w_c (s_ec − s_wc) < 0 (≤ 0 on a tie); changing w_c by δ adds δ·d_ec.
            score_gap = sum(
                ctx.weights[other] * (outcome.components[rival][other] - outcome.components[winner][other])
                for other in CRITERIA
            )
            slope = outcome.components[rival][criterion] - outcome.components[winner][criterion]
            if slope > EPS:
                change = max(0.0, -score_gap / slope)
                if best_raise is None or change < best_raise[0]:
                    best_raise = (change, rival)
            elif slope < -EPS:
                change = max(0.0, score_gap / slope)  # amount to decrease
                if change <= weight + EPS and (best_lower is None or change < best_lower[0]):
                    best_lower = (change, rival)
        options = []
        extreme = None
        if best_raise is not None:
            change, rival = best_raise
            flips.append(WeightFlip(criterion=criterion, from_weight=weight, to_weight=weight + change,
                                    new_winner=rival))
            if change > _EXTREME_WEIGHT * weight_sum:  # a near-tie on this criterion: no realistic weighting
                extreme = (f"no realistic change of the {criterion} weight alone changes the winner (it would take "
                           f"more than {format_weight(weight + change)} to make {rival} the winner)")
            else:
                options.append((change, f"raising the {criterion} weight from {weight:g} to above "
                                        f"{format_weight(weight + change)} (+{format_weight(change)}) "
                                        f"makes {rival} the winner"))
        if best_lower is not None:
            change, rival = best_lower
            flips.append(WeightFlip(criterion=criterion, from_weight=weight, to_weight=weight - change,
                                    new_winner=rival))
            options.append((change, f"lowering the {criterion} weight from {weight:g} to below "
                                    f"{format_weight(weight - change)} (−{format_weight(change)}) "
                                    f"makes {rival} the winner"))
        if options:
            options.sort(key=lambda option: option[0])
            found.append(options[0])
            lines.append(options[0][1])
        elif criterion == "features" and not any(outcome.components[name]["features"] for name in outcome.survivors):
            lines.append("no change of the features weight changes the winner: no survivor has a verified feature "
                         "(no feature probe passed, or the runs have none), so features score 0 for every engine")
        else:
            lines.append(extreme or f"no change of the {criterion} weight alone changes the winner")
    if found:
        _, smallest = min(found, key=lambda option: option[0])
        others = [line for line in lines if line != smallest]
        return [f"smallest weight change that changes the winner: {smallest}", *others]
    return [f"no change of any single weight changes the winner: {winner} scores at least as high on every criterion"]


def slo_sensitivity(outcome: Outcome, ctx: ScoringContext) -> list[str]:
    """Per SLO: the tightening and the loosening (to a measured value) that change the winner."""
    if not outcome.slos:
        return ["no SLOs given: pass e.g. --slo ttft_p99=500 to make latency a hard constraint"]
    lines = []
    baseline_winner = outcome.winner
    for index, slo in enumerate(outcome.slos):
        measured_values = sorted(
            {
                value
                for name, engine in ctx.engines.items()
                if name not in ctx.eliminated_before_slos
                for condition in engine.conditions()
                if math.isfinite(value := median_slo_value(engine.at(condition), slo))
            }
        )

        def winner_with_threshold(threshold_ms: float) -> str | None:
            changed = list(outcome.slos)
            changed[index] = SLO(slo.metric, threshold_ms, slo.percentile)
            return evaluate(ctx, changed).winner

        label = f"p{slo.percentile:g} {METRIC_LABELS[slo.metric]}"
        tighter = None  # (measured value, new winner)
        for value in sorted((value for value in measured_values if value <= slo.threshold_ms), reverse=True):
            threshold = value * (1 - 1e-6)
            if threshold <= 0:
                continue
            new_winner = winner_with_threshold(threshold)
            if new_winner != baseline_winner:
                tighter = (value, new_winner)
                break
        looser = None
        for value in (value for value in measured_values if value > slo.threshold_ms):
            new_winner = winner_with_threshold(value)
            if new_winner != baseline_winner:
                looser = (value, new_winner)
                break
        if tighter:
            who = f"makes {tighter[1]} the winner" if tighter[1] else "leaves no engine"
            lines.append(f"tightening {label} from {slo.threshold_ms:g} ms to below {metric_figure(slo.key, tighter[0])} ms {who}")
        else:
            lines.append(f"no tightening of {label} changes the winner")
        if looser:
            who = f"makes {looser[1]} the winner" if looser[1] else "leaves no engine"
            lines.append(f"loosening {label} from {slo.threshold_ms:g} ms to {metric_figure(slo.key, looser[0])} ms {who}")
        else:
            lines.append(f"no loosening of {label} changes the winner")
    return lines


def noise_sensitivity(outcome: Outcome, ctx: ScoringContext) -> list[str]:
    """Could run-to-run noise (the spread over repeats) change the verdicts or the winner?"""
    repeat_counts = {name: len(ctx.engines[name].at(outcome.judged_at[name])) for name in outcome.survivors}
    slo_eliminated = [name for name, (stage, _) in outcome.eliminated.items() if stage == "slo"]
    if not any(count > 1 for count in repeat_counts.values()) and not any(
        len(ctx.engines[name].at(ctx.engines[name].conditions()[0])) > 1 for name in slo_eliminated
    ):
        if ctx.slos_decided:  # a ladder run: the lens reads each engine's passing point, measured once here
            return ["this lens reads each engine's point pooled over its measurements, so it has no spread of its own "
                    "to test: the verdict's capacity intervals carry the noise (fresh starts included where the point "
                    "was measured again)"]
        return ["no repeats of the same engine and workload: run-to-run noise was not measured; "
                "repeat the run to check whether it could flip the ranking"]
    lines = []
    winner = outcome.winner
    # SLO verdicts that individual repeats disagree with
    for name in outcome.survivors + slo_eliminated:
        engine = ctx.engines[name]
        condition = outcome.judged_at.get(name) or engine.conditions()[0]
        repeats = engine.at(condition)
        if len(repeats) < 2:
            continue
        for slo in outcome.slos:
            misses = sum(1 for repeat in repeats if repeat.slo_value(slo) > slo.threshold_ms)
            if name in outcome.survivors and misses:
                lines.append(f"{name} missed {slo_text(slo)} in {misses} of {len(repeats)} repeats: "
                             "noise could eliminate it")
            if name in slo_eliminated and misses < len(repeats):
                lines.append(f"{name} met {slo_text(slo)} in {len(repeats) - misses} of {len(repeats)} repeats: "
                             "noise could readmit it")
    if winner is not None and len(outcome.production) > 1:
        flips = []
        for rival in outcome.production:
            if rival == winner:
                continue
            override = {name: outcome.raw[name] for name in outcome.survivors}
            override[winner] = raw_metrics(ctx.engines[winner].at(outcome.judged_at[winner]), outcome.slos, "worst")
            override[rival] = raw_metrics(ctx.engines[rival].at(outcome.judged_at[rival]), outcome.slos, "best")
            alternative = evaluate(ctx, outcome.slos, raw_override=override)
            winner_worst = next(row.score for row in alternative.ranking if row.engine == winner)
            rival_best = next(row.score for row in alternative.ranking if row.engine == rival)
            if alternative.winner != winner:
                flips.append(f"{rival} with every metric at its best repeat scores {rival_best:.3f} "
                             f"vs {winner} with every metric at its worst {winner_worst:.3f}")
            else:
                lines.append(
                    f"the spread over repeats cannot flip {winner} vs {rival}: {winner} with every metric at its "
                    f"worst repeat {winner_worst:.3f} ≥ {rival} with every metric at its best {rival_best:.3f} "
                    f"({repeat_counts[winner]} vs {repeat_counts[rival]} repeats)"
                )
        if flips:
            lines.insert(0, "in the unpaired worst case (each metric at the winner's worst repeat against the rival's "
                            "best, a bound beyond the paired per-repeat intervals of the deciding line) the winner "
                            "changes: " + "; ".join(flips))
    return lines
