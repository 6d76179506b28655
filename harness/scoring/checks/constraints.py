"""The hard constraints, first failure wins, each with a one-line reason.

In order: measured at all; reliable (:mod:`.reliability`: at most 5 % of a condition's requests
failed); valid (the gates of :mod:`.validity`, applied by the recommender
before the rest, which see only the conditions they keep); hardware (the engine's *declared*
``capabilities.hardware`` must include the target's kind; an FP8 requirement needs
``HardwareProfile.supports_fp8``, i.e. compute capability ≥ 8.9); required features
(a verified feature probe where the engine was probed, else the *declared*
``features``/``quantization``: :mod:`.features`); memory fit (:mod:`.memory_fit`); the SLOs
(``harness.metrics.slo_percentile_value`` at the offered load, repeats combined by their
median). An engine is judged at its highest-load condition that meets every SLO (without SLOs:
its highest-load condition).

The hardware constraint rests on what the adapters declare, and so does a required feature that
no probe covers or of an engine without probe results; their reasons say so. They only
exclude, never score.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from harness.metrics import SLO
from results.hardware import FP8_MIN_COMPUTE_CAPABILITY, HardwareProfile
from results.recommendation import MemoryFit

from ..errors import ScorerError
from ..formatting import METRIC_LABELS, condition_label, format_ms
from ..measured.gather import Condition, EngineRuns, RunFacts
from ..measured.repeats import median_slo_value
from .features import REQUIRABLE_FEATURES, unmet_features
from .memory_fit import memory_fit

QUANTIZATION_FORMATS = ("fp8", "int8", "int4", "awq", "gptq", "fp4", "nvfp4", "mxfp4", "gguf", "bnb")

Elimination = tuple[str, str]
"""(stage, one-line reason); stage ∈ "not measured" | "reliability" (:mod:`.reliability`) | "validity" (:mod:`.validity`) | "hardware" |
"fidelity" (outputs below the floor, or the check asked for but not run or on under 90 % of its prompts without
``--allow-unchecked``: ``harness.metrics.fidelity``) | "feature" | "memory" | "slo"."""

_HARDWARE_WORDS = {"nvidia": "an NVIDIA GPU", "amd": "an AMD GPU", "cpu": "a CPU"}


def collect_required_features(requested: Sequence[str], runs: Sequence[RunFacts]) -> list[str]:
    """``requested`` (lower case, blanks dropped) plus each run's workload ``required_features``.

    Raises :class:`ScorerError` for a name that is neither an adapter feature
    (``results.features.FEATURES``), a probed feature (``results.schema.FEATURE_PROBES``) nor a
    quantization format (:data:`QUANTIZATION_FORMATS`).
    """
    required = [feature.strip().lower() for feature in requested if feature and feature.strip()]
    for run in runs:
        for feature in run.required_features:
            if feature not in required:
                required.append(feature)
    for feature in required:
        if feature not in REQUIRABLE_FEATURES and feature not in QUANTIZATION_FORMATS:
            raise ScorerError(
                f"unknown feature {feature!r}: use one of {', '.join(REQUIRABLE_FEATURES + QUANTIZATION_FORMATS)}"
            )
    return required


def needs_fp8(required: Sequence[str], dtype_bytes: int | None, runs: Sequence[RunFacts]) -> bool:
    """FP8 is required, or 1-byte elements were asked for on a model recorded as FP8."""
    return "fp8" in required or dtype_bytes == 1 and any("fp8" in run.model.dtype.lower() for run in runs)


def not_measured_reason(engine: EngineRuns) -> str:
    """Why an engine has no measurement: its last non-ok status and reason (the reason alone when it
    says the status itself: "interrupted by SIGTERM ...")."""
    not_ok = [(status, reason) for status, reason in engine.statuses if status != "ok"]
    if not_ok:
        status, reason = not_ok[-1]
        return reason if reason.startswith(status) else f"not measured ({status}): {reason or 'no reason recorded'}"
    return "not measured: no successful request in any run"


def before_slos(
    engines: dict[str, EngineRuns],
    hardware: HardwareProfile,
    required: Sequence[str],
    *,
    fp8_needed: bool,
    dtype_bytes: int | None,
    memory_utilization: float,
) -> tuple[dict[str, Elimination], dict[str, MemoryFit]]:
    """Every constraint but the SLOs: the engines they eliminate, and each checked engine's
    memory fit."""
    eliminated: dict[str, Elimination] = {}
    fits: dict[str, MemoryFit] = {}
    for name, engine in engines.items():
        if not engine.measurements:
            eliminated[name] = ("not measured", not_measured_reason(engine))
            continue
        declared = engine.capabilities
        if declared is not None and hardware.kind not in declared.hardware:
            wants = " or ".join(_HARDWARE_WORDS.get(kind, kind) for kind in declared.hardware) or "no declared hardware"
            eliminated[name] = ("hardware", f"its adapter declares {wants} only; target {hardware.name} is {hardware.kind}")
            continue
        if fp8_needed and not hardware.supports_fp8:
            capability = hardware.compute_capability
            has = f"has compute capability {capability[0]}.{capability[1]}" if capability else f"is {hardware.kind}"
            minimum = ".".join(map(str, FP8_MIN_COMPUTE_CAPABILITY))
            eliminated[name] = (
                "hardware", f"FP8 needs compute capability ≥ {minimum} (Ada/Hopper or newer); {hardware.name} {has}"
            )
            continue
        # below the floor, or checked but not vouched for (an error, too few prompts) without --allow-unchecked
        allowed = engine.unchecked_allowed + [False] * (len(engine.fidelity) - len(engine.unchecked_allowed))
        if failed := [why for f, allow in zip(engine.fidelity, allowed) if (why := f.exclusion(allow))]:
            eliminated[name] = ("fidelity", failed[0])
            continue
        if required and (lacking := unmet_features(engine, required)):
            eliminated[name] = ("feature", lacking)
            continue
        first = engine.measurements[0]
        fit = memory_fit(
            name,
            first.run.model,
            [record for measurement in engine.measurements for record in measurement.records],
            first.run.max_concurrency,
            hardware,
            dtype_bytes=dtype_bytes,
            memory_utilization=memory_utilization,
            tensor_parallel=("tensor_parallel" in declared.features) if declared is not None else True,
        )
        fits[name] = fit
        if fit.fits is False:
            eliminated[name] = ("memory", f"does not fit: {fit.arithmetic}")
    return eliminated, fits


@dataclass
class SloVerdict:
    """The SLO stage's outcome. ``judged_at``: each survivor's highest-load condition meeting
    every SLO; ``slo_values``: engine → SLO key → median value (ms) at the judged condition
    (for an eliminated engine: its lowest-load condition)."""

    survivors: list[str]
    eliminated: dict[str, Elimination]  # the earlier eliminations plus the SLO stage's
    judged_at: dict[str, Condition]
    slo_values: dict[str, dict[str, float]]


def judge_slos(
    engines: dict[str, EngineRuns], eliminated_before: dict[str, Elimination], slos: Sequence[SLO], *,
    decided: bool = False,
) -> SloVerdict:
    """Apply ``slos`` to every engine not in ``eliminated_before``. An engine meeting them at
    no condition is eliminated with the misses at its lowest-load condition. ``decided``: the
    SLOs were judged by the decision core already (a ladder run, :mod:`harness.scoring.gates`: its eliminations
    are in ``eliminated_before``, and each engine's one condition is the point it passed at), so
    no condition is held against them here; the values are still read for the report."""
    eliminated = dict(eliminated_before)
    verdict = SloVerdict([], eliminated, {}, {})
    for name, engine in engines.items():
        if name in eliminated:
            if decided and eliminated[name][0] == "slo" and engine.measurements:  # the ladder's: its lowest point's values
                lowest = engine.conditions()[0]
                verdict.slo_values[name] = {slo.key: median_slo_value(engine.at(lowest), slo) for slo in slos}
            continue
        conditions = engine.conditions()
        passing: list[Condition] = []
        misses_at: dict[Condition, list[str]] = {}
        values_at: dict[Condition, dict[str, float]] = {}
        for condition in conditions:
            values = {slo.key: median_slo_value(engine.at(condition), slo) for slo in slos}
            values_at[condition] = values
            misses = [
                f"p{slo.percentile:g} {METRIC_LABELS[slo.metric]} "
                f"{format_ms(values[slo.key], slo.key)} > {slo.threshold_ms:g} ms"
                for slo in slos
                if values[slo.key] > slo.threshold_ms and not decided
            ]
            if misses:
                misses_at[condition] = misses
            else:
                passing.append(condition)
        if slos and not passing:
            lowest = conditions[0]
            repeats = len(engine.at(lowest))
            repeat_note = f" (median of {repeats} repeats)" if repeats > 1 else ""
            eliminated[name] = (
                "slo", f"misses the SLO: {'; '.join(misses_at[lowest])} on {condition_label(lowest, engine.at(lowest))}{repeat_note}"
            )
            verdict.slo_values[name] = values_at[lowest]
            continue
        chosen = passing[-1]
        verdict.judged_at[name] = chosen
        verdict.slo_values[name] = values_at[chosen]
        verdict.survivors.append(name)
    return verdict
