"""The one ordered list of gates: what can exclude an engine from the decision, in the order
they are applied, each with the stage name every verdict, recommendation and report uses.

An engine meets the gates in this order, and the first it fails is its one-line reason:

1. ``not measured``: it did not start, was skipped, crashed under load, or measured nothing;
2. ``hardware``: the target's hardware is not what the engine's adapter declares (or FP8 is
   needed and the target lacks it);
3. ``reliability``: its requests failed above the bound (``--max-failure-rate``, 5 %) beyond the
   noise (the one-sided 95 % Wilson lower bound of the failure rate is above it,
   :mod:`harness.scoring.capacity.samples`);
4. ``slo``: it misses the SLO at the lowest load measured;
5. ``fidelity``: its outputs fell below the fidelity floor, or the check asked for could not run
   or covered under 90 % of its prompts (without ``--allow-unchecked``; ``harness.metrics.fidelity``);
6. ``feature``: a required feature is not verified or declared (:mod:`.checks.features`);
7. ``memory``: the model does not fit the target's device memory (:mod:`.checks.memory_fit`).

``not measured``, ``reliability``, ``slo`` and ``fidelity`` are judged from what was measured, by the decision core
(:func:`harness.scoring.verdict.decision.gate` for ``bench run``'s ladders; ``bench search`` by its
probes); ``hardware``, ``feature`` and ``memory`` from the target and the engines' declared facts, by the scorer
(:func:`harness.scoring.checks.constraints.before_slos`), whose eliminations the ladder decision takes
(``harness.app.run.reporting.regate_ladder``). The weighted lens (``--weights``) on a ladder run
takes every gate's outcome from the ladder's decision and judges none of its own, so the two
can order engines differently but never exclude differently. ``validity`` (the client's own
checks: :mod:`.checks.validity`) is a stage of the weighted lens on one-point runs only: on a ladder
run the client's limits are marked on the points (``client_limited``) and never exclude.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Gate:
    """One gate: its ``stage`` name, what it checks (``what``), and whether it is judged from
    the measurement (``measured``) or from the target and declared facts."""

    stage: str
    what: str
    measured: bool


GATES: tuple[Gate, ...] = (
    Gate("not measured", "did not start, was skipped, crashed under load or measured nothing", True),
    Gate("hardware", "the target's hardware is not what the adapter declares", False),
    Gate("reliability", "failed requests above the bound, beyond the noise (Wilson lower bound)", True),
    Gate("slo", "misses the SLO at the lowest load", True),
    Gate("fidelity", "outputs below the fidelity floor, or the check not run or under 90 % of its prompts", True),
    Gate("feature", "a required feature is not verified or declared", False),
    Gate("memory", "the model does not fit the target's device memory", False),
)
"""The gates, in the order they are applied (module docstring)."""

STAGES: tuple[str, ...] = tuple(g.stage for g in GATES)
MEASURED_STAGES: tuple[str, ...] = tuple(g.stage for g in GATES if g.measured)
DECLARED_STAGES: tuple[str, ...] = tuple(g.stage for g in GATES if not g.measured)
LENS_ONLY_STAGES: tuple[str, ...] = ("validity",)
"""Stages only the weighted lens applies, on one-point runs (module docstring)."""

REFERENCE_ENGINES = frozenset({"own"})
"""The reference engine (``own_engine``, adapter ``adapters.engines.own``): a yardstick, never
recommended. It passes the same gates and is ranked by both lenses, but never wins. Declared on
the adapter class (``reference = True``, read by ``adapters.registry.reference_engines()``); kept
here because the scorer imports nothing of ``adapters`` (tests/adapters/test_registry.py checks
the two agree). A new engine is no yardstick unless its class says so, so it needs no edit here."""


def first(*eliminations: tuple[str, str] | None) -> tuple[str, str] | None:
    """The elimination ``(stage, reason)`` of the earliest gate among ``eliminations`` (None
    entries ignored; None when there is none): where two places each exclude an engine, the
    earlier gate's reason is the one said."""
    found = [e for e in eliminations if e is not None]
    return min(found, key=lambda e: stage_order(e[0])) if found else None


def stage_order(stage: str) -> int:
    """Where ``stage`` stands in :data:`GATES` (a lens-only stage after them). Raises
    ValueError for a stage that is not a gate."""
    if stage in STAGES:
        return STAGES.index(stage)
    if stage in LENS_ONLY_STAGES:
        return len(STAGES) + LENS_ONLY_STAGES.index(stage)
    raise ValueError(f"{stage!r} is not a gate: the gates are {', '.join(STAGES + LENS_ONLY_STAGES)}")
