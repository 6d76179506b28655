"""``bench run`` with load ladders (the default mode, :class:`LadderMode`; ``--tune``:
:class:`TunedLadderMode`) over the run's typed context (:class:`harness.app.run.context.RunContext`).

The job reads top to bottom: the workload is built while the engines start; the allocation
(:class:`harness.app.run.allocate.Allocation`, the job's one scheduler) measures every engine's
low end, then spends the time budget where the verdict is uncertain; the decision is read from
the stored records (``ladder.json``, the recipe), and what the run's audits need is handed back
to the context's state (effective settings, equivalence outputs, fidelity, accuracy, validity).

A run asks for one load point instead (:mod:`harness.app.run.point_mode`) when
``--num-requests``, ``--request-rate``, ``--max-concurrency``, ``--duration`` or
``--ramp-up-strategy`` is given, or the workload replays a trace's own times
(:attr:`harness.app.settings.run.RunSettings.ladder`).

One budget vocabulary, all durations (900, 900s, 15m): ``--time-budget`` is the whole job;
``--tune`` is each engine's configuration search within it; ``--ladder-budget`` caps one climb's
measuring within it.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from harness.app.trial.plan import EnginePlan
from harness.app.settings.tune_options import recipe_climb_to
from harness.app.trial.steps import trial_spec
from harness.app.run.allocate import Allocation
from harness.app.run.context import RunContext
from harness.app.run.ladder_run import EngineClimb, LadderJob, skipped_ladder
from harness.app.run.spread_history import prior_spread, spread_line
from harness.app.run.ladder_trial import LadderSpec
from harness.app.run.tune import Tuner, recipe
from harness.metrics import slo_table
from harness.scoring.verdict.decision import default_slos, slos_text
from rich.console import Console


if TYPE_CHECKING:
    from harness.app.settings.run import RunSettings
    from harness.metrics import SLO
    from results.schema import EnergySource, FidelityReference
    from workloads.base import Workload


def ladder_spec(cfg: RunSettings, kind: str, workload: Workload, slos: list[SLO],
                fidelity: FidelityReference | None = None, energy: EnergySource | None = None) -> LadderSpec:
    """The ladder settings of run settings ``cfg`` on ``kind`` hardware: the base ``workload``
    (built) sizes agentic points by its turns per session; the budget is per engine; ``fidelity``:
    the reference each engine's first session checks its outputs against (None = no check);
    ``energy``: the run's energy source (every point's phases read it)."""
    spec = trial_spec(cfg, kind, energy, fidelity=fidelity)
    spec = replace(spec, measure=replace(spec.measure, slos=tuple(slos), max_concurrency=None))
    stats = workload.stats or {}
    sessions = len(workload.sessions) or 1
    turns = float(stats.get("turns") or stats.get("requests") or sessions) / sessions
    return LadderSpec(trial=spec, workload=cfg.workload.model_copy(update={"seed": cfg.workload.seed or 0}),
                      slos=tuple(slos), max_failure_rate=cfg.decision.max_failure_rate, budget_s=cfg.load.ladder_budget_s,
                      max_load=cfg.load.max_load, turns_per_session=max(1.0, turns), start_load=cfg.measure.client_workers,
                      min_load=min(recipe_climb_to(cfg.engine.config), cfg.load.max_load) if cfg.engine.config else 1,
                      allow_unchecked=cfg.check.allow_unchecked)


REPORT_RESERVE_S = 15.0  # of the time budget: the decision from the records, the reports and their plots (~7 s)
FIRST_SHARE = 0.4  # of the time left when the ladders start, in equal shares: the yardstick's first climb
MIN_FIRST_S = 20.0  # a first climb gets at least this much measuring (its first points whatever it gets)


def first_climb_budget(cfg: "RunSettings", deadline: float, engines: int) -> float:
    """Seconds of measuring for each engine's first climb: an equal share of :data:`FIRST_SHARE`
    of the time left before ``deadline``, at least :data:`MIN_FIRST_S`, at most ``--ladder-budget``."""
    share = FIRST_SHARE * max(0.0, deadline - time.monotonic()) / max(1, engines)
    return min(cfg.load.ladder_budget_s, max(MIN_FIRST_S, share))


OVERRUN_GRACE = 0.02  # a job within 2 % of its --time-budget kept it (the overrun line is not printed)


def overrun_line(budget_s: float, took_s: float) -> str:
    """One line when the job took longer than ``--time-budget`` (``budget_s``, ``took_s`` in s; ""
    within it): what ran past it (what runs whatever the budget: each engine's low end, the
    output-fidelity check of the engines the verdict rests on; a step begun within the budget
    that took longer than its estimate), and the budget that keeps it. Within :data:`OVERRUN_GRACE`
    of the budget is within it (a 15-minute job that took 15 min 2 s kept its budget)."""
    if took_s <= budget_s * (1 + OVERRUN_GRACE):
        return ""
    keep, took = math.ceil(took_s / 60), f"{int(took_s // 60)} min {int(took_s % 60)} s"
    return (f"Time budget: {_duration(budget_s)} asked, the job took {took}: what runs whatever the budget (each "
            "engine's low end, and the output-fidelity check of the engines the verdict decides between) and the "
            f"steps begun within it took longer here; --time-budget {keep}m or more covers it.")


def _duration(seconds: float) -> str:
    if seconds == float("inf"):
        return "no bound"
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"


class LadderMode:
    """The main job (module docstring): every engine's low end, then the allocation, then the
    decision; :class:`TunedLadderMode` searches each engine's configuration first."""

    name = "ladder"

    def run(self, ctx: RunContext, plans: list[EnginePlan]) -> str:
        """The main job over ``plans``; returns who interrupted it ("" = nobody)."""
        cfg, state, console, executor = ctx.cfg, ctx.state, ctx.console, ctx.executor
        started = time.monotonic()
        deadline = started + cfg.load.time_budget_s - REPORT_RESERVE_S  # the decision and the reports within it too
        executor.begin(self.started(plans))
        interrupted, engines, job = "", [EngineClimb(p) for p in plans], None
        try:
            ctx.prepare_workload(plans)
            slos = list(cfg.decision.slos) or default_slos(ctx.kind, cfg.workload.name)
            self._announce(ctx, slos, deadline, len(plans))
            spec = ladder_spec(cfg, ctx.kind, state.workload, slos, state.fidelity_reference, state.energy)
            job = LadderJob(spec, executor, state.writer, console, tokenizer=state.tokenizer,
                            boundary_repeats=max(3, cfg.measure.repeats), target_tps=cfg.load.target_load, time_budget_s=cfg.load.time_budget_s)
            job.t0 = started  # ladder.json's wall_s: the whole job, the reference and the search included
            job.spread_prior = prior_spread(state.writer.run_dir.parent, state.writer.manifest, exclude=state.writer.run_dir.name)
            console.print(spread_line(job.spread_prior), highlight=False)
            engines, interrupted = self.configure(ctx, job, plans, engines)
            if not interrupted:
                interrupted = Allocation(job, deadline, max_repeats=job.boundary_repeats).run(
                    engines, first_climb_budget(cfg, deadline, len(engines)))
        finally:
            executor.end()
        if job is None:
            return interrupted
        self._decide(ctx, job, engines, slos, interrupted)
        if not interrupted and (line := overrun_line(cfg.load.time_budget_s, time.monotonic() - started)):
            console.print(line, highlight=False)
        return interrupted

    # -- what the tuned mode changes -----------------------------------------------------------
    def started(self, plans: list[EnginePlan]) -> list[EnginePlan]:
        """The engines started while the workload is built: all of them."""
        return plans

    def configure(self, ctx: RunContext, job: LadderJob, plans: list[EnginePlan],
                  engines: list[EngineClimb]) -> tuple[list[EngineClimb], str]:
        """The engines the ladders climb, at their configuration (here: as planned), and who
        interrupted choosing it ("" = nobody)."""
        return engines, ""

    def then(self) -> Any:
        """What adds to the ladder's summary before it is written (None: nothing)."""
        return None

    def search_line(self, cfg: "RunSettings") -> str:
        return ""

    # -- the steps -----------------------------------------------------------------------------
    def _announce(self, ctx: RunContext, slos: list[Any], deadline: float, engines: int) -> None:
        cfg, console = ctx.cfg, ctx.console
        note = "" if cfg.decision.slos else " (the defaults for this workload and hardware; --slo sets yours)"
        share = first_climb_budget(cfg, deadline, engines)
        console.print(f"Load ladders under {slos_text(slos)}{note}: closed-loop concurrency from 1, doubling until an "
                      f"SLO breaks or throughput stops rising; every engine's low end first (1 and 2 in flight; the "
                      f"yardstick climbs for {share:.0f} s){self.search_line(cfg)}, then the measuring goes where the verdict is "
                      f"uncertain (engines that cannot win dropped, the others climbed on, boundaries bisected, bracket "
                      f"points repeated on fresh starts), within a time budget of {_duration(cfg.load.time_budget_s)} for the "
                      f"whole job ({_duration(max(0.0, deadline - time.monotonic()))} left)", highlight=False)
        if deadline <= time.monotonic():
            console.print("Time budget: spent before the ladders (the engines' starts and the fidelity reference took it): "
                          "each engine's low end is measured anyway, the least a verdict rests on, and nothing more "
                          "(--time-budget gives more).", highlight=False)
        if cfg.engine.config and (climb_to := recipe_climb_to(cfg.engine.config)) > 1:
            capped = (f", except that --max-load {cfg.load.max_load} stops it first: raise --max-load to compare like for like"
                      if climb_to > cfg.load.max_load else "")
            console.print(f"The recipe's capacity was read at up to {climb_to} in flight: this ladder climbs at least that "
                          f"far whatever its budget, so the two are read at the same loads{capped}.", highlight=False)

    def _decide(self, ctx: RunContext, job: LadderJob, engines: list[EngineClimb], slos: list[Any],
                interrupted: str) -> None:
        """The decision from the stored records (``ladder.json``, the recipe) and what the run's
        audits read of it: effective settings, equivalence outputs, fidelity, accuracy, validity."""
        cfg, state, writer = ctx.cfg, ctx.state, ctx.state.writer
        writer.summary.slos = slo_table(slos)
        planned = {e.name for e in engines}  # the others were recorded before measuring (skipped, failed to install)
        skipped = {n: skipped_ladder(n, r) for n, r in writer.summary.engines.items() if n not in planned}
        from harness.app.run.replay_check import optimal_hit_rate

        state.ladder = job.summary(engines, skipped, writer.summary.run_id, cfg.workload.name, slos_default=not cfg.decision.slos,
                                   interrupted=interrupted, then=self.then(), cache_optimal=optimal_hit_rate(cfg, state))
        _recipe(state.ladder, writer, ctx.console)
        for e in engines:
            if e.outcome is not None:
                if e.outcome.effective is not None:
                    ctx.parity.keep(e.name, e.outcome.effective)
                if e.outcome.equivalence is not None and state.equivalence is not None and not e.failure:
                    state.equivalence[e.name] = e.outcome.equivalence
                if e.outcome.fidelity is not None:
                    state.fidelity[e.name] = e.outcome.fidelity
                if e.outcome.accuracy is not None:
                    state.accuracy[e.name] = e.outcome.accuracy
        for name, ladder in state.ladder.engines.items():
            if ladder.status.value == "ok":
                ctx.parity.attach(name, writer.summary.engines[name])
            if (entry := writer.summary.engines.get(name)) is not None and entry.metrics is not None:
                ctx.validity(name, entry.metrics)  # token drift and rates: the ladder's too
        writer.write_summary()


class TunedLadderMode(LadderMode):
    """``--tune``: each engine's configuration searched first (:class:`harness.app.run.tune.Tuner`,
    the engines started only then, at their chosen configurations), then the main job."""

    name = "tuned ladder"

    def __init__(self) -> None:
        self.tuner: Tuner | None = None

    def started(self, plans: list[EnginePlan]) -> list[EnginePlan]:
        return []  # each search starts its configurations; the main job's engines start after it

    def search_line(self, cfg: "RunSettings") -> str:
        return f", after a configuration search of {cfg.tune.seconds:g} s per engine (--tune)"

    def configure(self, ctx: RunContext, job: LadderJob, plans: list[EnginePlan],
                  engines: list[EngineClimb]) -> tuple[list[EngineClimb], str]:
        cfg = ctx.cfg
        self.tuner = Tuner(job, cfg.tune.seconds, cfg.tune.configs, ctx.kind, lower_precision=cfg.tune.lower_precision)
        plans, interrupted = self.tuner.run(plans)
        engines = [EngineClimb(p) for p in plans]
        ctx.executor.end()
        if not interrupted:  # the engines start at their chosen configurations
            ctx.executor.begin(plans)
        for e in engines if interrupted else []:
            e.failure = "not measured: the run was interrupted during the configuration search"
        return engines, interrupted

    def then(self) -> Any:
        return self.tuner.judge if self.tuner is not None else None


def _recipe(ladder: Any, writer: Any, console: Console) -> None:
    """The winner's ``recipe.json`` (the command line that starts it as measured; ``bench run
    --engine-config FILE`` runs it again), printed; each tuned engine's gain line comes with the
    verdict (:func:`harness.app.cli.verdict.print_verdict`), and so does why no recipe was made."""
    from rich.markup import escape

    from results.schema import RECIPE_FILE
    from results.store import write_model_atomic

    winner = ladder.decision.winner if ladder.decision is not None else ""
    found = recipe(ladder, writer.manifest, winner) if winner else None
    if found is None:  # why is said under the verdict (reports.tuning.no_recipe_reason)
        return
    write_model_atomic(writer.run_dir / RECIPE_FILE, found)
    console.print(f"Recipe ({escape(winner)}, {RECIPE_FILE}; serve it on your own port): {escape(found.command)}",
                  highlight=False, soft_wrap=True)
