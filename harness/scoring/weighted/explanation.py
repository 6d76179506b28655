"""The deciding constraint: one sentence that says why the winner won.

Only production engines compete for it: the reference engine is ranked as a yardstick and
:func:`yardstick_sentence` says where it stands. With one production survivor: the constraint
that left only it (the SLO that the runner-up, the eliminated engine closest to meeting every
SLO, misses, or the other eliminations). With several: the criterion with the largest share of
the winner's margin over the runner-up (the next production engine), its raw numbers, and the
criteria that pulled the other way; a tie names the tie-break.
"""

from __future__ import annotations

import math
from typing import Iterable

from harness.metrics import SLO
from results.recommendation import TIE_BREAK

from ..checks.features import verified_features
from ..formatting import METRIC_LABELS, condition_label, format_ms, slo_text, tps_text
from ..gates import REFERENCE_ENGINES
from .cost import usd_per_million_output_tokens
from .ranking import EPS, Outcome, ScoringContext
from .weights import CRITERIA
from results.schema.metric_registry import usd_figure

_BEFORE_SLO_STAGES = ("not measured", "reliability", "validity", "hardware", "fidelity", "feature", "memory")


def _criterion_detail(criterion: str, winner: str, runner_up: str, outcome: Outcome, ctx: ScoringContext) -> str:
    """The raw numbers behind one criterion, winner first (``"output 120.0 vs 80.0 tokens/s, 1.50×"``)."""
    winner_raw, runner_up_raw = outcome.raw[winner], outcome.raw[runner_up]
    if criterion == "latency":
        key = f"slo:{outcome.slos[0].key}" if outcome.slos else "ttft_p99_ms"
        label = slo_text(outcome.slos[0]).split(" ≤")[0] if outcome.slos else "p99 TTFT"
        winner_ms, runner_up_ms = winner_raw.get(key), runner_up_raw.get(key)
        ratio = f", {runner_up_ms / winner_ms:.2f}×" if winner_ms and runner_up_ms else ""
        return f"{label} {format_ms(winner_ms, key)} vs {format_ms(runner_up_ms, key)}{ratio}"
    if criterion == "throughput":
        winner_tps, runner_up_tps = winner_raw.get("output_throughput"), runner_up_raw.get("output_throughput")
        ratio = f", {winner_tps / runner_up_tps:.2f}×" if winner_tps and runner_up_tps else ""
        return f"output {tps_text(winner_tps)} vs {tps_text(runner_up_tps)} tokens/s{ratio}"
    if criterion == "features":
        won, lost = (verified_features(ctx.engines[name]) for name in (winner, runner_up))
        if not won and not lost:
            return "no feature verified for either engine: features score 0"
        return (f"verified features {len(won)} vs {len(lost)} "
                f"({', '.join(won) or 'none'} vs {', '.join(lost) or 'none'})")
    if criterion == "cost":
        winner_cost = usd_per_million_output_tokens(ctx.hardware, winner_raw)
        runner_up_cost = usd_per_million_output_tokens(ctx.hardware, runner_up_raw)
        if winner_cost is None or runner_up_cost is None:
            return "no cost for one of them (no price or no output throughput)"
        return f"{usd_figure(winner_cost)} vs {usd_figure(runner_up_cost)} per 1M output tokens"
    if criterion == "complexity":
        winner_facts, runner_up_facts = outcome.facts[winner], outcome.facts[runner_up]
        parts = []
        if winner_facts.time_to_healthy_s is not None and runner_up_facts.time_to_healthy_s is not None:
            parts.append(f"time to healthy {winner_facts.time_to_healthy_s:,.1f} s vs "
                         f"{runner_up_facts.time_to_healthy_s:,.1f} s")
        if winner_facts.processes is not None and runner_up_facts.processes is not None:
            parts.append(f"{winner_facts.processes:g} vs {runner_up_facts.processes:g} processes")
        return ", ".join(parts) or "no comparable operational fact recorded"
    winner_headroom = outcome.components[winner]["hardware_fit"]
    runner_up_headroom = outcome.components[runner_up]["hardware_fit"]
    return f"memory headroom {winner_headroom:.0%} vs {runner_up_headroom:.0%}"


def excluded_clause(outcome: Outcome, stages: Iterable[str]) -> list[str]:
    """Why each engine of ``stages`` is out; engines skipped before measuring (not installed,
    no such hardware) are only named - their reasons are in the table, not the deciding line."""
    stages = tuple(stages)
    skipped = [name for name, (stage, reason) in outcome.eliminated.items()
               if stage == "not measured" and stage in stages and reason.startswith("not measured (skipped)")]
    parts = [f"{name} excluded: {reason}" for name, (stage, reason) in outcome.eliminated.items()
             if stage in stages and name not in skipped]
    if skipped:
        parts.append(f"not measured (skipped; reasons in the not-measured list): {', '.join(skipped)}")
    return parts


def _only_survivor(outcome: Outcome, winner: str, condition: str) -> str:
    """The deciding line when one production engine survives (the reference engine may too)."""
    kind = "production engine" if outcome.reference else "engine"
    slo_eliminated = [name for name, (stage, _) in outcome.eliminated.items() if stage == "slo"]
    if slo_eliminated and outcome.slos:
        slos_met = " and ".join(slo_text(slo) for slo in outcome.slos)

        # the runner-up: the SLO-eliminated engine closest to meeting every SLO
        def worst_ratio(name: str) -> tuple[float, SLO]:
            return max(((outcome.slo_values[name][slo.key] / slo.threshold_ms, slo) for slo in outcome.slos),
                       key=lambda ratio_and_slo: ratio_and_slo[0])

        runner_up = min(slo_eliminated, key=lambda name: (worst_ratio(name)[0], name))
        _, missed = worst_ratio(runner_up)
        label = METRIC_LABELS[missed.metric]
        winner_ms, runner_up_ms = outcome.slo_values[winner][missed.key], outcome.slo_values[runner_up][missed.key]
        if math.isinf(runner_up_ms):
            runner_up_text = f"{runner_up} 2nd, p{missed.percentile:g} {label} lands on failed requests"
        elif winner_ms > 0:
            runner_up_text = f"{runner_up} 2nd, {runner_up_ms / winner_ms:.1f}× the {label}"
        else:
            runner_up_text = f"{runner_up} 2nd, {label} {format_ms(runner_up_ms, missed.key)}"
        others = [f"{name} also misses it" for name in slo_eliminated if name != runner_up]
        parts = [f"{winner}: the only {kind} meeting {slos_met} on {condition}", runner_up_text, *others]
        parts += excluded_clause(outcome, _BEFORE_SLO_STAGES)
        return "; ".join(parts)
    excluded = excluded_clause(outcome, _BEFORE_SLO_STAGES)
    if not excluded:
        return f"{winner}: the only {kind} measured ({condition}); no other {kind} to compare with"
    return "; ".join([f"{winner}: the only {kind} left after the hard constraints ({condition})", *excluded])


def deciding_constraint(outcome: Outcome, ctx: ScoringContext, preset: str, noise: str = "") -> str:
    """The one sentence that names what decided the recommendation (see the module docstring);
    ``noise``: the tie check's clause (:func:`.ties.tie_clause`), put after the margin."""
    if outcome.winner is None:
        parts = [f"{name}: {reason}" for name, (_, reason) in outcome.eliminated.items()]
        head = "no engine survives the hard constraints: "
        imported = [row.engine for row in outcome.ranking if row.engine in outcome.imported]
        if outcome.reference and not imported:
            head = (f"no production engine survives the hard constraints; only the reference engine "
                    f"{outcome.reference} does, and it is a yardstick, never the recommendation"
                    + (": " if parts else ""))
            return head + "; ".join(parts)
        if imported:
            kept = ([f"the reference engine {outcome.reference} (a yardstick)"] if outcome.reference else []) + \
                   [f"{name} (imported: another client's measurement)" for name in imported]
            head = (f"no production engine survives the hard constraints; only {' and '.join(kept)} "
                    f"{'does' if len(kept) == 1 else 'do'}, and {'it is' if len(kept) == 1 else 'they are'} "
                    "never the recommendation" + (": " if parts else ""))
            return head + "; ".join(parts)
        return head + ("; ".join(parts) if parts else "the runs hold no engines")
    winner = outcome.winner
    condition = condition_label(outcome.judged_at[winner], ctx.engines[winner].at(outcome.judged_at[winner]))
    production = outcome.production
    if len(production) == 1:
        return _only_survivor(outcome, winner, condition)
    runner_up = production[1]
    weight_sum = sum(ctx.weights.values())
    winner_components, runner_up_components = outcome.components[winner], outcome.components[runner_up]
    margin_by_criterion = {
        criterion: ctx.weights[criterion] * (winner_components[criterion] - runner_up_components[criterion]) / weight_sum
        for criterion in CRITERIA
    }
    margin = sum(margin_by_criterion.values())
    scores = {row.engine: row.score for row in outcome.ranking}
    winner_score, runner_up_score = scores[winner], scores[runner_up]
    if abs(margin) < EPS:
        head = (
            f"{winner}: tied with {runner_up} on score {winner_score:.3f} under the {preset} weights; "
            f"tie broken by the stated rule ({TIE_BREAK})"
        )
    else:
        top = max(CRITERIA, key=lambda criterion: margin_by_criterion[criterion])
        against = {criterion: share for criterion, share in margin_by_criterion.items() if share < -EPS}
        offset = (
            "; " + ", ".join(f"{criterion} {share:+.3f}"
                             for criterion, share in sorted(against.items(), key=lambda item: item[1]))
            + f" in {runner_up}'s favour" if against else ""
        )
        head = (
            f"{winner}: highest score {winner_score:.3f} vs {runner_up} {runner_up_score:.3f} under the {preset} "
            f"weights on {condition}; decided by {top} ({_criterion_detail(top, winner, runner_up, outcome, ctx)}; "
            f"{top} {margin_by_criterion[top]:+.3f} to the margin of {margin:+.3f}{offset})"
        )
    return "; ".join([head, *([noise] if noise else []), *excluded_clause(outcome, _BEFORE_SLO_STAGES + ("slo",))])


def yardstick_sentence(outcome: Outcome) -> str:
    """Where the reference engine stands against the recommended engine ("" when it was not
    among the engines; its elimination reason when it did not survive)."""
    reference = outcome.reference
    if reference is None:
        out = [name for name in outcome.eliminated if name in REFERENCE_ENGINES]
        if not out:
            return ""
        return f"{out[0]} (reference engine, a yardstick) is out: {outcome.eliminated[out[0]][1]}"
    rank = {row.engine: row for row in outcome.ranking}
    row = rank[reference]
    place = f"ranks {row.rank} of {len(outcome.ranking)} with score {row.score:.3f}"
    winner = outcome.winner
    if winner is None:
        return f"{reference} (reference engine, a yardstick, never the recommendation) {place}"
    winner_row = rank[winner]
    relation = "above" if row.rank < winner_row.rank else "below"
    ref_raw, win_raw = outcome.raw[reference], outcome.raw[winner]
    details = [f"output {tps_text(ref_raw.get('output_throughput'))} vs {tps_text(win_raw.get('output_throughput'))} tokens/s"]
    key, label = (f"slo:{outcome.slos[0].key}", slo_text(outcome.slos[0]).split(" ≤")[0]) if outcome.slos \
        else ("ttft_p99_ms", "p99 TTFT")
    details.append(f"{label} {format_ms(ref_raw.get(key), key)} vs {format_ms(win_raw.get(key), key)}")
    return (f"{reference} (reference engine, a yardstick, never the recommendation) {place}, {relation} the "
            f"recommended {winner} ({winner_row.score:.3f}): {'; '.join(details)}")
