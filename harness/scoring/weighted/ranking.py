"""The soft score over the engines that survive the hard constraints, and the ranking.

Every criterion is normalized relative to the best production survivor (1; not the yardstick,
which would squeeze every production engine's score: a yardstick better than every production
engine scores above 1) with its direction explicit — higher-better ``x / max(x)`` (throughput, goodput), lower-better ``min(x) / x``
(latencies); ``hardware_fit`` is the memory headroom ``1 − required / usable``; ``complexity``
is measured (time to healthy, process count; :mod:`harness.scoring.measured.operational`); ``features`` score 0 until a
probe verifies them; ``cost`` is USD per 1M output tokens on the target, lower-better (:mod:`.cost`). Score = Σ wᵢ·sᵢ / Σ wᵢ. No criterion reads what an adapter declares about
itself.

The reference engine (:data:`REFERENCE_ENGINES`) is scored and ranked like every engine, as a
yardstick, but is never the production recommendation: :attr:`Outcome.winner` is the best
ranked non-reference engine.

Tie-break (``results.recommendation.TIE_BREAK``): equal scores (|Δ| < 1e-9) are ordered by
higher output throughput, then lower p99 TTFT, then engine name.
"""

from __future__ import annotations

import math
from typing import Sequence
from dataclasses import dataclass, field

import numpy as np

from harness.metrics import SLO
from results.hardware import HardwareProfile
from results.recommendation import MemoryFit, RankedEngine

from ..checks.constraints import Elimination, judge_slos
from ..checks.features import features_scores, verified_features
from ..formatting import condition_label
from ..gates import REFERENCE_ENGINES
from ..measured.gather import Condition, EngineRuns
from ..measured.operational import OperationalFacts, complexity_scores, operational_facts
from ..measured.repeats import info_metrics, raw_metrics
from .cost import cost_scores, usd_per_million_output_tokens
from .weights import CRITERIA

EPS = 1e-9  # scores closer than this are equal

RawMetrics = dict[str, float | None]


@dataclass
class ScoringContext:
    """What stays fixed while the sensitivity analysis re-runs :func:`evaluate`."""

    engines: dict[str, EngineRuns]
    hardware: HardwareProfile
    weights: dict[str, float]
    eliminated_before_slos: dict[str, Elimination]
    memory_fits: dict[str, MemoryFit]
    slos_decided: bool = False  # a ladder run: the decision core judged the SLOs (harness.scoring.gates); the lens does not


@dataclass
class Outcome:
    """One evaluation: survivors, ranking, eliminations and the numbers behind them."""

    slos: list[SLO]
    survivors: list[str]
    ranking: list[RankedEngine]
    eliminated: dict[str, Elimination]
    judged_at: dict[str, Condition]
    slo_values: dict[str, dict[str, float]]  # engine → slo key → value at the judged condition
    components: dict[str, dict[str, float]]  # engine → criterion → normalized score
    raw: dict[str, RawMetrics]
    facts: dict[str, OperationalFacts] = field(default_factory=dict)  # survivors' recorded operational facts
    complexity_notes: list[str] = field(default_factory=list)  # what the complexity score (did not) compare
    imported: frozenset[str] = frozenset()  # engines measured by another tool (bench import): compared, never recommended

    @property
    def production(self) -> list[str]:
        """The ranked engines that may be recommended (all but the reference engine and imported
        measurements, which are another client's numbers for an engine, not an engine), best first."""
        return [row.engine for row in self.ranking if row.engine not in REFERENCE_ENGINES and row.engine not in self.imported]

    @property
    def reference(self) -> str | None:
        """The reference engine, when it survived (ranked as a yardstick)."""
        return next((row.engine for row in self.ranking if row.engine in REFERENCE_ENGINES), None)

    @property
    def winner(self) -> str | None:
        """The production recommendation: the best ranked non-reference engine (None = none survives)."""
        production = self.production
        return production[0] if production else None


def normalize(values: dict[str, float | None], higher_better: bool, basis: Sequence[str] | None = None) -> dict[str, float]:
    """Ratio to the best of ``basis`` (default: every survivor): higher-better x/max, lower-better
    min/x (the basis's best scores 1; an engine outside the basis that beats it, above 1); missing →
    0. The basis is the production survivors: the reference engine, a yardstick, must not set the
    scale that squeezes every production engine's score."""
    present = {name: value for name, value in values.items() if value is not None and math.isfinite(value)}
    normalized: dict[str, float] = {}
    if not present:
        return {name: 1.0 for name in values}
    scale = {n: v for n, v in present.items() if basis is None or n in basis} or present
    if higher_better:
        best = max(scale.values())
        for name in values:
            normalized[name] = 0.0 if name not in present else (1.0 if best <= 0 else max(0.0, present[name]) / best)
    else:
        best = min(scale.values())
        for name in values:
            if name not in present:
                normalized[name] = 0.0
            elif present[name] <= 0:
                normalized[name] = 1.0
            else:
                normalized[name] = max(0.0, best) / present[name]
    return normalized


def _components(
    ctx: ScoringContext, survivors: list[str], raw: dict[str, RawMetrics], slos: list[SLO]
) -> tuple[dict[str, dict[str, float]], dict[str, OperationalFacts], list[str]]:
    """Each survivor's normalized score per criterion, its operational facts and the
    complexity notes."""
    throughput_keys = ["output_throughput"] + (["goodput"] if slos else [])
    latency_keys = [f"slo:{slo.key}" for slo in slos] if slos else ["ttft_p99_ms", "tpot_p99_ms"]
    basis = [n for n in survivors if n not in REFERENCE_ENGINES and not ctx.engines[n].imported_from]
    throughput_scores = [normalize({name: raw[name].get(key) for name in survivors}, True, basis) for key in throughput_keys]
    latency_scores = [normalize({name: raw[name].get(key) for name in survivors}, False, basis) for key in latency_keys]
    facts = {name: operational_facts(ctx.engines[name].operations) for name in survivors}
    complexity, notes = complexity_scores(facts)
    features = features_scores(ctx.engines, survivors)
    cost = cost_scores(ctx.hardware, {name: raw[name] for name in survivors})
    components: dict[str, dict[str, float]] = {}
    for name in survivors:
        fit = ctx.memory_fits.get(name)
        components[name] = {
            "throughput": float(np.mean([scores[name] for scores in throughput_scores])),
            "latency": float(np.mean([scores[name] for scores in latency_scores])),
            "hardware_fit": 1.0 if fit is None or fit.headroom is None else float(fit.headroom),
            "features": features[name],  # verified feature probes / the best survivor's (.features)
            "complexity": complexity[name],
            "cost": cost[name],  # USD per 1M output tokens, lower better (.cost)
        }
    return components, facts, notes


def evaluate(ctx: ScoringContext, slos: list[SLO], *, raw_override: dict[str, RawMetrics] | None = None) -> Outcome:
    """SLO stage, then score and rank the survivors (``raw_override``: engine → raw metrics to
    use instead of the medians, for the noise check)."""
    verdict = judge_slos(ctx.engines, ctx.eliminated_before_slos, slos, decided=ctx.slos_decided)
    survivors, judged_at = verdict.survivors, verdict.judged_at
    raw: dict[str, RawMetrics] = {}
    for name in survivors:
        raw[name] = (raw_override or {}).get(name) or raw_metrics(ctx.engines[name].at(judged_at[name]), slos)
    components, facts, complexity_notes = _components(ctx, survivors, raw, slos) if survivors else ({}, {}, [])

    weight_sum = sum(ctx.weights.values())
    rows: list[tuple[str, float, dict[str, float]]] = []  # (engine, score, contributions)
    for name in survivors:
        contributions = {criterion: ctx.weights[criterion] * components[name][criterion] / weight_sum
                         for criterion in CRITERIA}
        rows.append((name, sum(contributions.values()), contributions))

    def tie_break_order(row: tuple[str, float, dict[str, float]]) -> tuple[float, float, float, str]:
        name, score, _ = row
        throughput = raw[name].get("output_throughput") or 0.0
        ttft = raw[name].get("ttft_p99_ms")
        return (-round(score, 9), -throughput, ttft if ttft is not None else math.inf, name)

    rows.sort(key=tie_break_order)
    ranking: list[RankedEngine] = []
    for rank, (name, score, contributions) in enumerate(rows, 1):
        engine = ctx.engines[name]
        repeats = engine.at(judged_at[name])
        notes = []
        if name in REFERENCE_ENGINES:
            notes.append("reference engine: ranked as a yardstick, never the production recommendation")
        if engine.imported_from:
            notes.append(f"imported from {engine.imported_from}: another client's measurement, ranked for comparison, "
                         "never the recommendation")
        if not engine.capabilities:
            notes.append("capabilities not recorded: the declared hardware/feature checks were skipped")
        declared = engine.capabilities.serving_features() if engine.capabilities else []
        metrics: dict[str, float | bool | None] = {**raw[name], **info_metrics(repeats)}
        if (cost := usd_per_million_output_tokens(ctx.hardware, raw[name])) is not None:  # USD per 1M output tokens (.cost)
            metrics["cost_per_1m_output_tokens"] = cost
        ranking.append(
            RankedEngine(
                rank=rank,
                engine=name,
                display_name=engine.display_name,
                score=round(score, 6),
                components={criterion: round(value, 6) for criterion, value in components[name].items()},
                contributions={criterion: round(value, 6) for criterion, value in contributions.items()},
                metrics=metrics,
                condition=condition_label(judged_at[name], repeats),
                repeats=len(repeats),
                notes=notes,
                reference=name in REFERENCE_ENGINES,
                declared_features=declared,
                verified_features=verified_features(engine),
            )
        )
    return Outcome(slos, survivors, ranking, verdict.eliminated, judged_at, verdict.slo_values, components, raw,
                   facts, complexity_notes, frozenset(n for n, e in ctx.engines.items() if e.imported_from))
