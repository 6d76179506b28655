"""Features, from the feature probes' verified results (``EngineResult.feature_probes``).

A feature counts only once a probe verified it (DESIGN.md: criteria are measured, never
declared). The probes (``harness.loadgen.features``) cover :data:`results.schema.FEATURE_PROBES`:
``structured_output`` (also a declared adapter feature, ``results.features.FEATURES``) and the
probe-only ``tool_calling``, ``n_best``, ``stop``, ``logprobs``, ``max_context``.

- **Verdict over runs**: an engine probed in several runs has a feature verified only when every
  run that probed it verified it; otherwise the first failed run's verdict (else the first
  unsupported one) stands, with its detail.
- **The features criterion**: the number of verified probes, normalised higher-better against
  the best survivor (``n / max n``); an engine without probe results (``--no-feature-probes``,
  a run from before the probes) counts 0, and with no verified feature anywhere every survivor
  scores 0. It weighs 0 in every preset (:data:`harness.scoring.weighted.weights.PRESETS`): which features matter
  depends on the deployment, and a count rewards breadth a user may not need; weight it with
  ``--weights features=N``, or require a feature with ``--feature``.
- **``--feature X``**: for an engine with probe results, a probed feature is met only by a
  verified probe of it; a feature no probe covers (``prefix_caching``, ``lora``, a quantization
  format …) is met by the adapter's declaration, "declared, unverified". For an engine without
  probe results every feature rests on the declaration, and a probe-only feature is unmet.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from results.features import FEATURES
from results.schema import FEATURE_PROBES, FeatureProbe, FeatureStatus

if TYPE_CHECKING:
    from ..measured.gather import EngineRuns

REQUIRABLE_FEATURES: tuple[str, ...] = FEATURES + tuple(f for f in FEATURE_PROBES if f not in FEATURES)
"""The names ``--feature`` accepts besides quantization formats: the adapters' declared features
and the probe-only features."""


def probe_verdicts(engine: "EngineRuns") -> dict[str, FeatureProbe]:
    """``engine``'s verdict per probed feature over its runs (see the module docstring)."""
    combined: dict[str, FeatureProbe] = {}
    for probes in engine.feature_probes:
        for feature, probe in probes.items():
            held = combined.get(feature)
            if held is None or _rank(probe.status) > _rank(held.status):
                combined[feature] = probe
    return combined


def _rank(status: FeatureStatus) -> int:
    """Which verdict wins over runs: failed over unsupported over verified."""
    return {FeatureStatus.VERIFIED: 0, FeatureStatus.UNSUPPORTED: 1, FeatureStatus.FAILED: 2}[status]


def verified_features(engine: "EngineRuns") -> list[str]:
    """The features ``engine``'s probes verified, in :data:`FEATURE_PROBES` order."""
    verdicts = probe_verdicts(engine)
    return [f for f in FEATURE_PROBES if f in verdicts and verdicts[f].status is FeatureStatus.VERIFIED]


def features_scores(engines: "dict[str, EngineRuns]", survivors: Sequence[str]) -> dict[str, float]:
    """Each survivor's features criterion in [0, 1]: verified count / the best survivor's (0 for
    all when no survivor has a verified feature)."""
    counts = {name: len(verified_features(engines[name])) for name in survivors}
    best = max(counts.values(), default=0)
    return {name: (count / best if best else 0.0) for name, count in counts.items()}


def unmet_features(engine: "EngineRuns", required: Sequence[str]) -> str | None:
    """Why ``engine`` does not meet ``required`` (one line), None when it meets all of them. A
    declaration is checked only where capabilities were recorded."""
    verdicts = probe_verdicts(engine)
    declared = engine.capabilities.offered() if engine.capabilities is not None else None
    probed = bool(engine.feature_probes)
    undeclared: list[str] = []
    reasons: list[str] = []
    for feature in required:
        if probed and feature in FEATURE_PROBES:
            probe = verdicts.get(feature)
            if probe is None:
                reasons.append(f"needs {feature}, which its feature probes did not cover (no verdict recorded)")
            elif probe.status is not FeatureStatus.VERIFIED:
                reasons.append(f"needs {feature}, and its {feature} probe {probe.status.value}: {probe.detail}")
        elif feature in FEATURE_PROBES and feature not in FEATURES:
            reasons.append(f"needs {feature}, which only a feature probe verifies, and its runs have none "
                           "(rerun bench run without --no-feature-probes)")
        elif declared is not None and feature not in declared:
            undeclared.append(feature)
    if undeclared:
        reasons.insert(0, f"does not declare {', '.join(undeclared)}, which the workload needs")
    return "; ".join(reasons) or None


def features_note(engines: "dict[str, EngineRuns]", names: Sequence[str]) -> str:
    """One note: how the criterion is computed, each engine's probe verdicts, and the declared,
    unverified features of an engine that was not probed."""
    listed = []
    for name in names:
        engine = engines[name]
        verdicts = probe_verdicts(engine)
        if verdicts:
            groups = []
            for status in (FeatureStatus.VERIFIED, FeatureStatus.FAILED, FeatureStatus.UNSUPPORTED):
                got = [f for f in FEATURE_PROBES if f in verdicts and verdicts[f].status is status]
                if got:
                    groups.append(f"{status.value} {', '.join(got)}")
            listed.append(f"{name}: {'; '.join(groups)}")
        else:
            declared = engine.capabilities.serving_features() if engine.capabilities else []
            listed.append(f"{name}: not probed; declared, unverified: {', '.join(declared) if declared else 'none'}")
    return ("features = the verified feature probes, counted and normalised to the best survivor's count (a declared "
            "feature counts nothing; weight 0 in every preset: --weights features=N weighs it, --feature X requires "
            "one) — " + " | ".join(listed))
