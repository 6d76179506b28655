"""The soft score over the engines that survive the hard constraints, and the ranking.

Every criterion is normalized to (0, 1] relative to the best survivor with its direction
explicit — higher-better ``x / max(x)`` (throughput, goodput, features), lower-better
``min(x) / x`` (latencies, complexity); ``hardware_fit`` is the memory headroom
``1 − required / usable``. Score = Σ wᵢ·sᵢ / Σ wᵢ.

Tie-break (``results.recommendation.TIE_BREAK``): equal scores (|Δ| < 1e-9) are ordered by
higher output throughput, then lower p99 TTFT, then engine name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from adapters.hardware import HardwareProfile
from harness.metrics import SLO
from results.recommendation import MemoryFit, RankedEngine

from .constraints import Elimination, judge_slos
from .formatting import condition_label
from .gather import Condition, EngineRuns
from .repeats import info_metrics, raw_metrics
from .weights import CRITERIA

DEFAULT_COMPLEXITY = 2  # adapters.base.Capabilities default
EPS = 1e-9  # scores closer than this are equal

RawMetrics = dict[str, float | None]


def declared_complexity(engine: EngineRuns) -> int | float:
    """The operational complexity the adapter declared (1 … 5), else :data:`DEFAULT_COMPLEXITY`."""
    return (engine.capabilities.complexity if engine.capabilities else None) or DEFAULT_COMPLEXITY


def serving_feature_count(engine: EngineRuns) -> int:
    """How many serving features (``adapters.base.FEATURES``) the adapter declared."""
    return engine.capabilities.serving_feature_count() if engine.capabilities else 0


@dataclass
class ScoringContext:
    """What stays fixed while the sensitivity analysis re-runs :func:`evaluate`."""

    engines: dict[str, EngineRuns]
    hardware: HardwareProfile
    weights: dict[str, float]
    eliminated_before_slos: dict[str, Elimination]
    memory_fits: dict[str, MemoryFit]


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

    @property
    def winner(self) -> str | None:
        return self.ranking[0].engine if self.ranking else None


def normalize(values: dict[str, float | None], higher_better: bool) -> dict[str, float]:
    """Ratio to the best survivor: higher-better x/max, lower-better min/x; missing → 0."""
    present = {name: value for name, value in values.items() if value is not None and math.isfinite(value)}
    normalized: dict[str, float] = {}
    if not present:
        return {name: 1.0 for name in values}
    if higher_better:
        best = max(present.values())
        for name in values:
            normalized[name] = 0.0 if name not in present else (1.0 if best <= 0 else max(0.0, present[name]) / best)
    else:
        best = min(present.values())
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
) -> dict[str, dict[str, float]]:
    """Each survivor's normalized score per criterion."""
    throughput_keys = ["output_throughput"] + (["goodput"] if slos else [])
    latency_keys = [f"slo:{slo.key}" for slo in slos] if slos else ["ttft_p99_ms", "tpot_p99_ms"]
    throughput_scores = [normalize({name: raw[name].get(key) for name in survivors}, True) for key in throughput_keys]
    latency_scores = [normalize({name: raw[name].get(key) for name in survivors}, False) for key in latency_keys]
    feature_scores = normalize({name: float(serving_feature_count(ctx.engines[name])) for name in survivors}, True)
    complexity_scores = normalize({name: float(declared_complexity(ctx.engines[name])) for name in survivors}, False)
    components: dict[str, dict[str, float]] = {}
    for name in survivors:
        fit = ctx.memory_fits.get(name)
        components[name] = {
            "throughput": float(np.mean([scores[name] for scores in throughput_scores])),
            "latency": float(np.mean([scores[name] for scores in latency_scores])),
            "hardware_fit": 1.0 if fit is None or fit.headroom is None else float(fit.headroom),
            "features": feature_scores[name],
            "complexity": complexity_scores[name],
        }
    return components


def evaluate(ctx: ScoringContext, slos: list[SLO], *, raw_override: dict[str, RawMetrics] | None = None) -> Outcome:
    """SLO stage, then score and rank the survivors (``raw_override``: engine → raw metrics to
    use instead of the medians, for the noise check)."""
    verdict = judge_slos(ctx.engines, ctx.eliminated_before_slos, slos)
    survivors, judged_at = verdict.survivors, verdict.judged_at
    raw: dict[str, RawMetrics] = {}
    for name in survivors:
        raw[name] = (raw_override or {}).get(name) or raw_metrics(ctx.engines[name].at(judged_at[name]), slos)
    components = _components(ctx, survivors, raw, slos) if survivors else {}

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
        if not engine.capabilities:
            notes.append("capabilities not recorded: hardware/feature checks skipped, complexity assumed 2")
        metrics: dict[str, float | bool | None] = {**raw[name], **info_metrics(repeats)}
        ranking.append(
            RankedEngine(
                rank=rank,
                engine=name,
                display_name=engine.display_name,
                score=round(score, 6),
                components={criterion: round(value, 6) for criterion, value in components[name].items()},
                contributions={criterion: round(value, 6) for criterion, value in contributions.items()},
                metrics=metrics,
                condition=condition_label(judged_at[name]),
                repeats=len(repeats),
                notes=notes,
            )
        )
    return Outcome(slos, survivors, ranking, verdict.eliminated, judged_at, verdict.slo_values, components, raw)
