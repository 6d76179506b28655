"""The criteria a score weighs, the named weight presets, and parsing ``--weights``."""

from __future__ import annotations

import math

from results.pairs import parse_pairs

from ..errors import ScorerError

CRITERIA: tuple[str, ...] = ("throughput", "latency", "hardware_fit", "features", "complexity", "cost")

PRESETS: dict[str, dict[str, float]] = {
    "latency": {"throughput": 1.0, "latency": 4.0, "hardware_fit": 1.0, "features": 0.0, "complexity": 0.5},
    "throughput": {"throughput": 4.0, "latency": 1.0, "hardware_fit": 1.0, "features": 0.0, "complexity": 0.5},
    "balanced": {"throughput": 2.0, "latency": 2.0, "hardware_fit": 1.0, "features": 0.0, "complexity": 1.0},
    "agentic": {"throughput": 1.5, "latency": 3.0, "hardware_fit": 1.0, "features": 0.0, "complexity": 0.5},
}
"""Weights over :data:`CRITERIA`; ``--weights`` overrides the named ones.

``features`` (the verified feature probes' count, normalised to the best survivor's:
:mod:`harness.scoring.checks.features`) weighs 0 in every preset: which features matter depends on the deployment (an
agent needs tool calling, a batch summariser none of them), so a count of verified features
would reward breadth a user may not need, and runs without probes would all be scaled down.
Weigh it with ``--weights features=N``; a feature the deployment cannot do without is a hard
requirement (``--feature tool_calling``), met only by a verified probe."""


for _preset in PRESETS.values():  # cost (harness.scoring.weighted.cost) weighs 0 unless asked for: rankings stay as they were
    _preset.setdefault("cost", 0.0)
PRESETS["cost"] = {"throughput": 0.0, "latency": 1.0, "hardware_fit": 1.0, "features": 0.0, "complexity": 0.5,
                   "cost": 4.0}
"""``cost`` preset: USD per 1M output tokens first (throughput at 0, since with one price for every
engine the cost score is the output-throughput ratio), latency and fit as tie-breakers."""


def parse_weights(text: str) -> dict[str, float]:
    """Parse ``"throughput=2,latency=1"`` into ``{"throughput": 2.0, "latency": 1.0}``.

    Keys must be in :data:`CRITERIA`, each given once; values finite and ≥ 0. Raises :class:`ScorerError`
    (a ValueError) with one line naming the bad part and the fix.
    """
    weights: dict[str, float] = {}
    if text is None or not text.strip():
        raise ScorerError("--weights is empty: write e.g. throughput=2,latency=1")
    def no_value(part: str) -> ScorerError:
        return ScorerError(f"weight {part!r} has no value: write it as e.g. latency=2")

    for key, value_text in parse_pairs(text, no_value):
        key = key.strip().lower().replace("-", "_")
        if key not in CRITERIA:
            raise ScorerError(f"unknown weight {key!r}: use {', '.join(CRITERIA)}")
        if key in weights:  # which one was meant? (the last one used to win silently)
            raise ScorerError(f"weight {key} is given twice in --weights: give each criterion once")
        try:
            weight = float(value_text)
        except ValueError:
            raise ScorerError(f"weight {key} needs a number, got {value_text.strip()!r}") from None
        if not math.isfinite(weight) or weight < 0:
            raise ScorerError(f"weight {key} must be a finite number ≥ 0, got {value_text.strip()!r}")
        weights[key] = weight
    if not weights:
        raise ScorerError("--weights is empty: write e.g. throughput=2,latency=1")
    return weights


def resolve_weights(preset: str, overrides: dict[str, float] | None) -> dict[str, float]:
    """The preset's weights with ``overrides`` replacing the named criteria.

    Raises :class:`ScorerError` for an unknown preset/criterion or when all weights are 0.
    """
    if preset not in PRESETS:
        raise ScorerError(f"unknown preset {preset!r}: use one of {', '.join(PRESETS)}")
    weights = dict(PRESETS[preset])
    for criterion, weight in (overrides or {}).items():
        if criterion not in CRITERIA:
            raise ScorerError(f"unknown weight {criterion!r}: use {', '.join(CRITERIA)}")
        if not math.isfinite(weight) or weight < 0:
            raise ScorerError(f"weight {criterion} must be a finite number ≥ 0, got {weight!r}")
        weights[criterion] = float(weight)
    if sum(weights.values()) <= 0:
        raise ScorerError("all weights are 0: give at least one criterion a positive weight")
    return weights
