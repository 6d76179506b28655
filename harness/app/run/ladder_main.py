"""``bench run`` with load ladders (the default): the run orchestrator's plans, workload and
writer handed to :class:`harness.app.run.ladder_run.LadderJob`, and what it found handed back
(equivalence outputs, effective settings, the decision's SLOs in ``summary.json``).

A run asks for one load point instead (no ladder) when ``--request-rate``, ``--max-concurrency``,
``--duration`` or ``--ramp-up-strategy`` is given, or the workload replays a trace's own times
(:attr:`harness.app.core.settings.RunSettings.ladder`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from harness.app.core.executor import TrialExecutor
from harness.app.core.plan import EnginePlan
from harness.app.core.trial import trial_spec
from harness.app.run.ladder_run import EngineClimb, LadderJob, skipped_ladder
from harness.app.run.ladder_trial import LadderSpec
from harness.scoring.decision import default_slos, slos_text


def ladder_spec(cfg: Any, kind: str, workload: Any, slos: list[Any], fidelity: Any = None) -> LadderSpec:
    """The ladder settings of run settings ``cfg`` on ``kind`` hardware: the base ``workload``
    (built) sizes agentic points by its turns per session; the budget is per engine; ``fidelity``:
    the reference each engine's first session checks its outputs against (None = no check)."""
    spec = trial_spec(cfg, kind, fidelity=fidelity)
    spec = replace(spec, measure=replace(spec.measure, slos=tuple(slos), max_concurrency=None))
    stats = workload.stats or {}
    sessions = len(workload.sessions) or 1
    turns = float(stats.get("turns") or stats.get("requests") or sessions) / sessions
    return LadderSpec(trial=spec, workload=cfg.workload.model_copy(update={"seed": cfg.workload.seed or 0}),
                      slos=tuple(slos), max_failure_rate=cfg.max_failure_rate, budget_s=cfg.ladder_budget_s,
                      max_load=cfg.max_load, turns_per_session=max(1.0, turns), start_load=cfg.client_workers)


def climb_all(orch: Any, executor: TrialExecutor, plans: list[EnginePlan], state: Any) -> str:
    """The main job over ``plans`` (module docstring); returns who interrupted it ("" = nobody)."""
    cfg, writer, console = orch.cfg, state.writer, orch.console
    executor.begin(plans)
    interrupted, engines, job = "", [EngineClimb(p) for p in plans], None
    try:
        orch._build_workload(executor, state, plans)
        slos = list(cfg.slos) or default_slos(orch.kind, cfg.workload.name)
        note = "" if cfg.slos else " (the defaults for this workload and hardware; --slo sets yours)"
        console.print(f"Load ladders under {slos_text(slos)}{note}: closed-loop concurrency from 1, doubling until an "
                      f"SLO breaks or throughput stops rising, then bisected; {cfg.ladder_budget_s:g} s of measuring "
                      "per engine", highlight=False)
        spec = ladder_spec(cfg, orch.kind, state.workload, slos, state.fidelity_reference)
        job = LadderJob(spec, executor, writer, console, tokenizer=state.tokenizer, boundary_repeats=max(2, cfg.repeats),
                        target_tps=cfg.target_load)
        interrupted = job.climb(engines)
        if not interrupted:
            interrupted = job.settle(engines)
        if not interrupted:
            interrupted = job.decisive_repeats(engines)
    finally:
        executor.end()
    if job is None:
        return interrupted
    writer.summary.slos = {s.key: s.threshold_ms for s in slos}
    planned = {p.name for p in plans}  # the others were recorded before measuring (skipped, failed to install)
    skipped = {n: skipped_ladder(n, r) for n, r in writer.summary.engines.items() if n not in planned}
    state.ladder = job.summary(engines, skipped, writer.summary.run_id, cfg.workload.name, slos_default=not cfg.slos,
                               interrupted=interrupted)
    for e in engines:
        if e.outcome is not None:
            if e.outcome.effective is not None:
                orch.parity.keep(e.name, e.outcome.effective)
            if e.outcome.equivalence is not None and state.equivalence is not None and not e.failure:
                state.equivalence[e.name] = e.outcome.equivalence
            if e.outcome.fidelity is not None:
                state.fidelity[e.name] = e.outcome.fidelity
            if e.outcome.accuracy is not None:
                state.accuracy[e.name] = e.outcome.accuracy
    for name, ladder in state.ladder.engines.items():
        if ladder.status.value == "ok":
            orch.parity.attach(name, writer.summary.engines[name])
    writer.write_summary()
    return interrupted
