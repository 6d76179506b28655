"""The entry point: runs + a deployment target → a :class:`Recommendation`."""

from __future__ import annotations

from typing import Sequence

from harness.metrics import SLO, slo_table, slos_of
from harness.metrics.failures import MAX_FAILURE_RATE
from results.hardware import HardwareProfile
from results.recommendation import DEFAULT_MEMORY_UTILIZATION, MemoryFit, Recommendation, WeightFlip
from results.store import Run

from ..checks.constraints import before_slos, collect_required_features, needs_fp8
from ..checks.features import features_note
from ..checks.parity import parity_notes
from ..checks.reliability import check_bound, judge_reliability
from ..checks.validity import ValidityVerdict, judge_validity
from ..errors import ScorerError
from ..gates import MEASURED_STAGES, first
from ..measured.gather import Gathered, RunFacts, gather
from ..measured.operational import complexity_note
from .cost import cost_note
from .explanation import deciding_constraint, excluded_clause, yardstick_sentence
from .ranking import Outcome, ScoringContext, evaluate
from .sensitivity import noise_sensitivity, slo_sensitivity, weight_sensitivity
from .ties import TieCheck, attach, tie_check, tie_clause, yardstick_noise
from .weights import resolve_weights


def recommend(
    runs: list[Run],
    *,
    hardware: HardwareProfile,
    slos: list[SLO] | None = None,
    weights: dict[str, float] | None = None,
    preset: str = "balanced",
    required_features: Sequence[str] = (),
    dtype_bytes: int | None = None,
    memory_utilization: float = DEFAULT_MEMORY_UTILIZATION,
    max_failure_rate: float = MAX_FAILURE_RATE,
) -> Recommendation:
    """Rank the engines measured in ``runs`` for a deployment on ``hardware``.

    ``slos``: hard latency constraints (default: the first run's ``summary.json`` SLOs);
    ``weights``: overrides of the ``preset``'s weights (see :data:`.weights.PRESETS`);
    ``required_features``: adapter features (``results.features.FEATURES``) or quantization formats
    (:data:`harness.scoring.checks.constraints.QUANTIZATION_FORMATS`; ``"fp8"`` also needs FP8 hardware) every engine must declare —
    the workload spec's ``required_features`` in the manifest are added;
    ``dtype_bytes``: bytes per weight and KV element (default: from the model's dtype);
    ``memory_utilization``: fraction of device memory an engine may use (vLLM default 0.9);
    ``max_failure_rate``: the failed share of a condition's requests above which an engine is
    eliminated at the ``"reliability"`` stage, before every other (:mod:`harness.scoring.checks.reliability`).

    Returns a :class:`Recommendation` (``winner`` None when nothing survives — never raises for
    that). Raises :class:`ScorerError` for no runs, an unknown preset/weight/feature, a
    ``dtype_bytes`` ≤ 0, a ``memory_utilization`` outside (0, 1] or a ``max_failure_rate``
    outside [0, 1).
    """
    resolved_weights = _checked_weights(runs, preset, weights, dtype_bytes, memory_utilization, max_failure_rate)
    gathered = gather(runs)
    if slos is None:
        slos = _stored_slos(gathered.runs[0])
    required = collect_required_features(required_features, gathered.runs)
    ctx, outcome, validity = _judge(runs, gathered, hardware, resolved_weights, list(slos), required, dtype_bytes,
                                    memory_utilization, max_failure_rate)

    workloads = sorted({measurement.run.workload for engine in gathered.engines.values()
                        for measurement in engine.measurements})
    ties = tie_check(outcome, ctx)
    attach(outcome, ties)
    deciding = _deciding_line(outcome, ctx, preset, ties)
    flips: list[WeightFlip] = []
    sensitivity = [
        *weight_sensitivity(outcome, ctx, flips), *slo_sensitivity(outcome, ctx), *noise_sensitivity(outcome, ctx)
    ]
    message = "" if outcome.winner is not None else _no_winner_message(outcome, gathered)
    yardstick = _yardstick_line(outcome, ties)
    return Recommendation(
        winner=outcome.winner,
        winner_display_name=gathered.engines[outcome.winner].display_name if outcome.winner else None,
        ranking=outcome.ranking,
        eliminated={name: reason for name, (_, reason) in outcome.eliminated.items()},
        elimination_stage={name: stage for name, (stage, _) in outcome.eliminated.items()},
        deciding_constraint=deciding,
        sensitivity=sensitivity,
        weight_flips=flips,
        weights=resolved_weights,
        preset=preset,
        hardware=hardware.to_dict(),
        slos=slo_table(slos),
        required_features=required,
        memory_fit=ctx.memory_fits,
        workloads=workloads,
        runs=[run.run_id for run in gathered.runs],
        notes=([yardstick] if yardstick else []) + validity.notes
        + _notes(gathered, outcome, ctx.memory_fits, workloads, hardware, required, resolved_weights)
        + parity_notes(runs),  # the parity audit's unfair flags: caveats, never eliminations
        message=message,
        yardstick=yardstick,
        score_repeats=ties.repeats,
        on_ladder=ctx.slos_decided,
        tie_groups=ties.groups,
        tied_with_winner=ties.tied_with_winner,
        noise_could_flip=ties.could_flip,
    )


def _checked_weights(runs: list[Run], preset: str, weights: dict[str, float] | None, dtype_bytes: int | None,
                     memory_utilization: float, max_failure_rate: float) -> dict[str, float]:
    """The preset's weights with ``weights`` applied, once every argument of :func:`recommend`
    is checked (raises :class:`ScorerError` as documented there)."""
    if not runs:
        raise ScorerError("no runs given: pass at least one run folder or run id")
    resolved_weights = resolve_weights(preset, weights)
    if dtype_bytes is not None and dtype_bytes <= 0:
        raise ScorerError(f"dtype_bytes must be a positive number of bytes, got {dtype_bytes}")
    if not 0 < memory_utilization <= 1:
        raise ScorerError(f"memory_utilization must be in (0, 1], got {memory_utilization}")
    check_bound(max_failure_rate)
    return resolved_weights


def ladder_gates(runs: Sequence[Run]) -> dict[str, tuple[str, str]] | None:
    """The measured gates' eliminations of a ladder run (engine → (stage, reason), :mod:`harness.scoring.gates`),
    None unless ``runs`` is one run decided on load ladders. A stage an older run did not store
    reads ``not measured``."""
    if len(runs) != 1 or runs[0].ladder is None:
        return None
    return {name: (e.excluded_stage or "not measured", e.excluded) for name, e in runs[0].ladder.engines.items()
            if e.excluded and (e.excluded_stage or "not measured") in MEASURED_STAGES}


def _judge(
    runs: Sequence[Run], gathered: Gathered, hardware: HardwareProfile, weights: dict[str, float], slos: list[SLO], required: list[str],
    dtype_bytes: int | None, memory_utilization: float, max_failure_rate: float,
) -> tuple[ScoringContext, Outcome, ValidityVerdict]:
    """The gates in order (reliability, validity, then hardware, features and memory fit), then
    the SLOs and the score (:func:`.ranking.evaluate`): the later stages see only the engines
    and conditions the earlier ones keep."""
    validity = judge_validity(gathered.engines, gathered.runs)
    decided = ladder_gates(runs)
    if decided is not None:  # a ladder run: its measured gates are the ladder's (.gates), never judged twice
        validity = ValidityVerdict(engines=dict(gathered.engines), eliminated=dict(decided), left_out={},
                                   notes=validity.notes)
    else:
        for name, elimination in judge_reliability(gathered.engines, max_failure_rate).items():
            validity.eliminated[name] = elimination
            validity.left_out.pop(name, None)
    eliminated_later, memory_fits = before_slos(
        {name: engine for name, engine in validity.engines.items() if name not in validity.eliminated
         or decided is not None},
        hardware,
        required,
        fp8_needed=needs_fp8(required, dtype_bytes, gathered.runs),
        dtype_bytes=dtype_bytes,
        memory_utilization=memory_utilization,
    )
    eliminated = {name: found for name in gathered.engines
                  if (found := first(validity.eliminated.get(name), eliminated_later.get(name))) is not None}
    ctx = ScoringContext(validity.engines, hardware, weights, eliminated, memory_fits, slos_decided=decided is not None)
    outcome = evaluate(ctx, slos)
    _mark_left_out(outcome, validity)
    return ctx, outcome, validity


def _deciding_line(outcome: Outcome, ctx: ScoringContext, preset: str, ties: TieCheck) -> str:
    """The deciding constraint; with a winner it also names the engines the reliability and
    validity gates left out."""
    clause = tie_clause(outcome, ties)
    if ctx.slos_decided and ties.repeats < 2 and clause:  # a ladder run: --repeats is not how its noise is measured
        clause = "no tie check in this lens: the verdict's capacity intervals carry the noise"
    deciding = deciding_constraint(outcome, ctx, preset, clause)
    if outcome.winner is not None:
        invalid = [part for part in excluded_clause(outcome, ("reliability", "validity")) if part not in deciding]
        deciding = "; ".join([deciding, *invalid])
    return deciding


def _no_winner_message(outcome: Outcome, gathered: Gathered) -> str:
    """Why there is no recommendation, and what to change."""
    message = (
        "no engine survives the hard constraints; loosen an SLO (--slo), pick other hardware "
        "(--hardware/--gpus) or measure more engines"
    )
    if outcome.reference:
        message = (f"no production engine survives the hard constraints (the reference engine "
                   f"{outcome.reference} is a yardstick, never the recommendation); loosen an SLO (--slo), "
                   "pick other hardware (--hardware/--gpus) or measure more engines")
    return _validity_message(message, outcome, gathered)


def _yardstick_line(outcome: Outcome, ties: TieCheck) -> str:
    """Where the reference engine stands, with whether noise could move it ("" without one)."""
    yardstick = yardstick_sentence(outcome)
    if yardstick and (noise := yardstick_noise(outcome, ties)):
        yardstick += f"; {noise}"
    return yardstick


def _mark_left_out(outcome: Outcome, validity: ValidityVerdict) -> None:
    """A ranked engine judged on some of its conditions says so on its row."""
    for row in outcome.ranking:
        if left_out := validity.left_out.get(row.engine):
            row.notes.append("judged on its valid conditions only; left out as invalid: "
                             + ", ".join(entry.label for entry in left_out))


def _validity_message(message: str, outcome: Outcome, gathered: Gathered) -> str:
    """The no-recommendation message when the validity gates took out every (or some) engine."""
    invalid = [name for name, (stage, _) in outcome.eliminated.items() if stage == "validity"]
    if not invalid:
        return message
    measured = [name for name, engine in gathered.engines.items() if engine.measurements]
    if set(measured) <= set(invalid):
        return ("no valid measurement to decide on: every measured condition missed its offered load (±5%) or "
                "ran the client near its own limit (reasons in the eliminated list, stage validity); rerun at a "
                "load the engines can sustain (a lower --request-rate) or where the client has headroom")
    return f"{message}; no valid condition for {', '.join(invalid)} (validity stage)"


def _stored_slos(first_run: RunFacts) -> list[SLO]:
    """The SLOs stored in the first run's summary; none when there are none or they do not parse."""
    stored = first_run.slos
    try:
        return slos_of(stored)
    except ValueError:
        return []


def _notes(
    gathered: Gathered, outcome: Outcome, memory_fits: dict[str, MemoryFit], workloads: list[str],
    hardware: HardwareProfile, required: list[str], weights: dict[str, float],
) -> list[str]:
    """Caveats a reader needs: how complexity was measured, the price behind the cost, the
    declared, unverified features; which constraints rest on declarations; several workloads, survivors at different
    conditions, measured on other hardware than the target, memory fits that could not be checked."""
    notes: list[str] = []
    if outcome.survivors:
        notes.append(complexity_note(outcome.facts, outcome.complexity_notes))
        notes.append(cost_note(hardware, {name: outcome.raw[name] for name in outcome.survivors},
                               weight=weights.get("cost", 0.0)))
        notes.append(features_note(gathered.engines, outcome.survivors))
    declared_stages = [stage for stage, _ in outcome.eliminated.values() if stage in ("hardware", "feature")]
    probed = [name for name, engine in gathered.engines.items() if engine.feature_probes]
    if (declared_stages or required) and not probed:
        notes.append("the hardware and required-feature constraints use what each adapter declares "
                     "(capabilities.hardware/features/quantization), not a verified probe")
    elif declared_stages or required:
        notes.append("the hardware constraint uses what each adapter declares (capabilities.hardware), not a verified "
                     "probe; a required feature is met by a verified feature probe for the engines probed "
                     f"({', '.join(probed)}; declared, unverified only for a feature no probe covers), by the "
                     "declaration for the others")
    if len(workloads) > 1:
        notes.append(f"the runs cover several workloads ({', '.join(workloads)}); each engine is scored at its "
                     "highest-load condition that meets the SLOs")
    if len({outcome.judged_at[name] for name in outcome.survivors}) > 1:
        notes.append("survivors are scored at different conditions (workload/offered rate): compare with care")
    measured_on = {"cpu" if run.measured_on.kind == "cpu" else "gpu"
                   for run in gathered.runs if run.measured_on is not None}
    target = "cpu" if hardware.kind == "cpu" else "gpu"
    if measured_on and measured_on != {target}:
        notes.append(f"measured on {'/'.join(sorted(measured_on))}, target {hardware.name} is {hardware.kind}: "
                     "latency and throughput will differ there; the measured SLO verdicts are kept as the best evidence")
    for name, fit in memory_fits.items():
        if fit.fits is None:
            notes.append(f"{name}: {fit.arithmetic}")
    return notes
