"""``bench run --tune``: every engine at its best, before the main job compares them (issue 27).

For each engine the harness starts and whose adapter declares a search space
(:func:`adapters.base.search_space_of`), the configurations (:func:`harness.scoring.verdict.tuning.candidates`:
the defaults, single-knob changes, then combinations, up to ``--tune-configs``) are searched by
successive halving (:func:`harness.scoring.verdict.tuning.successive_halving`) within ``--tune`` seconds
of measuring: rung 0 climbs each configuration's load ladder with its share of the budget, later
rungs continue the survivors' ladders (climbing on while no SLO broke, else re-measuring the two
points bracketing the boundary). Each configuration runs as its own engine, named
``ENGINE#k`` in the records (``requests.jsonl``), the logs and the manifest, through the same
trial bodies and executor as the main job (so the trials run on Ray too). A configuration the
engine refuses (it does not start) is reported with its line and never retried.

Precision stays the baseline's unless the user allows lower (``--tune-lower-precision``): then the
adapters' precision knobs (:class:`adapters.base.Knob` ``precision``: a bf16 dtype, an fp8 KV
cache, q8_0 weights) join the space, and a configuration holding one answers the output-fidelity
check on its first start, before its ladder (``LadderSpec.fidelity_gate``), at the floor for other
numerics (``--fidelity-floor``: the harness knows from the engine args that its numerics differ,
:func:`adapters.base.lowered_precision`); below it, the configuration is reported with the check's
figures and never measured nor chosen (:class:`harness.scoring.verdict.tuning.Unfaithful`). The main job's
own fidelity check then holds the chosen configuration to the same floor.

The main job then climbs each engine at its chosen configuration, under the engine's own name:
the verdict compares tuned against tuned. When the search chose other than the defaults, the
defaults climb once more before it, afresh, as the main job climbs (same budget, same loads,
named ``ENGINE#defaults``): the engine's out-of-the-box capacity, which the search's short first
rung only bounds from below. :func:`judge_tuning` stores, in ``ladder.json``'s ``tuning``, every
configuration's ladder and capacity (judged like the main job's), the one chosen, the defaults'
climb, and the gain tuning gave (the main job's tuned capacity over the defaults' climb, with its
interval; none when inside the noise). :func:`recipe` makes the winner's ``recipe.json``: the exact command line that
started it (``bench run --engine-config FILE`` runs it again).

An endpoint (``--endpoint``, ``--engine openai``) is not started by the harness: only client-side
knobs apply to it, and the load ladder already sweeps the one that matters (concurrency); its
entry says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Sequence

from rich.markup import escape

from adapters.base import EngineError, lowered_precision, search_space_of
from results.schema import EngineLadder, EngineTuning, LadderSummary, Recipe, RequestRecord, TunedConfig

from harness.app.trial.executor import Trial
from harness.app.trial.plan import EnginePlan
from harness.app.core.signals import interrupt_cause
from harness.app.trial.steps import fidelity_line
from harness.app.run.ladder_run import EngineClimb, LadderJob, _estimate, _open
from harness.app.run.ladder_trial import LadderOutcome, climb_ladder, extend_ladder, measure_points
from harness.scoring.verdict.decision import judge, ladder_points, run_points, run_spread, sentence
from harness.scoring.capacity.frontier import capacity_of, engine_stream
from harness.scoring.verdict.tuning import (Config, Rejected, Tried, Unfaithful, candidates, gain, label, rungs,
                                    successive_halving, upper_envelope)
from results.schema import Manifest

ENDPOINT_NOTE = ("an endpoint the harness does not start: only client-side knobs apply, and its load ladder already "
                 "sweeps the one that matters (concurrency); engine-side knobs need an engine the harness starts")
NO_SPACE_NOTE = "its adapter declares no search space here: it runs at its defaults"


def variant(plan: EnginePlan, config: Config, k: int) -> EnginePlan:
    """Configuration ``k`` of ``plan``'s engine: named ``ENGINE#k`` (records, logs, manifest), its
    engine args the run's with ``config`` on top."""
    name = f"{plan.name}#{k}"
    return replace(plan, name=name, launch=replace(plan.launch, engine_args={**plan.launch.engine_args, **config},
                                                   log_name=name))


def tuned_plan(plan: EnginePlan, config: Config) -> EnginePlan:
    """``plan`` at ``config`` under the engine's own name (what the main job climbs)."""
    return replace(plan, launch=replace(plan.launch, engine_args={**plan.launch.engine_args, **config}))


@dataclass
class Search:
    """One engine's search as it runs: its ``space`` (knob → values), the configurations
    (``variants``, one :class:`EngineClimb` each, in :func:`candidates` order), their course
    (``tried``), the ``chosen`` index, and a ``note`` when nothing was searched."""

    engine: str
    space: dict[str, list[str]] = field(default_factory=dict)
    configs: list[Config] = field(default_factory=list)
    variants: list[EngineClimb] = field(default_factory=list)
    tried: list[Tried] = field(default_factory=list)
    chosen: int = 0
    note: str = ""
    defaults: EngineClimb | None = None  # the defaults climbed as the main job climbs (chosen != 0)
    interrupted: str = ""  # who stopped the search before it chose ("" = it finished)


class Tuner:
    """Searches every engine's configurations with ``job`` (its spec, executor, writer, console)
    within ``budget_s`` seconds of measuring per engine and at most ``max_configs``
    configurations each, on ``hardware_kind``; ``lower_precision``: the precision knobs too, each
    configuration holding one gated by the output-fidelity check (module docstring)."""

    def __init__(self, job: LadderJob, budget_s: float, max_configs: int, hardware_kind: str,
                 lower_precision: bool = False) -> None:
        self.job, self.budget_s, self.max_configs, self.kind = job, budget_s, max_configs, hardware_kind
        self.lower_precision = lower_precision
        self.searches: dict[str, Search] = {}

    def run(self, plans: list[EnginePlan]) -> tuple[list[EnginePlan], str]:
        """Every engine's search, in run order; returns the plans the main job climbs (each at its
        chosen configuration) and who interrupted the search ("" = nobody)."""
        out = []
        for plan in plans:
            search = self.searches[plan.name] = self._search_of(plan)
            if not search.configs:
                out.append(plan)
                continue
            try:
                self._search(plan, search)
            except KeyboardInterrupt as exc:
                search.interrupted = interrupt_cause(exc)
                return plans, search.interrupted
            try:
                if search.chosen != 0:
                    self._climb_defaults(plan, search)
            except KeyboardInterrupt as exc:
                return plans, interrupt_cause(exc)
            out.append(tuned_plan(plan, search.configs[search.chosen]))
        return out, ""

    def _climb_defaults(self, plan: EnginePlan, search: Search) -> None:
        """The defaults' ladder as the main job climbs one (its spec and budget, afresh; no
        fidelity or equivalence check): the out-of-the-box capacity the gain is measured against."""
        job = self.job
        climb = search.defaults = EngineClimb(variant(plan, search.configs[0], 0))
        climb.plan = replace(climb.plan, name=f"{plan.name}#defaults",
                             launch=replace(climb.plan.launch, log_name=f"{plan.name}#defaults"))
        job.console.print(f"{escape(plan.name)}: its defaults climb as the main job climbs ({job.spec.budget_s:g} s), "
                          "the out-of-the-box capacity the gain is measured against …", highlight=False)
        spec = replace(job.spec, trial=replace(job.spec.trial, equivalence=False, fidelity=None, accuracy=None,
                                               feature_probes=False))
        trial = Trial((climb.name, 0), climb.plan,
                      partial(climb_ladder, spec=spec, tokenizer=job.tokenizer, manifest=job.writer.manifest))
        job.executor.hold([climb.plan])
        job.executor.submit([trial])
        try:
            climb.outcome = job.executor.result(trial, job.writer)
        except KeyboardInterrupt as exc:
            climb.outcome = getattr(exc, "ladder_outcome", None)
            climb.measurements = list(climb.outcome.measurements) if climb.outcome is not None else []
            climb.failure = "interrupted while climbing"
            raise
        except EngineError as exc:
            climb.failure = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            job.console.print(f"  {climb.name}: failed — {climb.failure}", markup=False, highlight=False)
            return
        climb.measurements = list(climb.outcome.measurements)
        if climb.outcome.crash:
            climb.failure = f"crashed under load ({climb.outcome.crashed_at} in flight): {climb.outcome.crash}"[:300]
        if climb.measurements:
            job.console.print(f"  {climb.name}: {_at_slo(climb, job.spec)}", markup=False, highlight=False)

    def judge(self, summary: LadderSummary, records: Sequence[RequestRecord]) -> None:
        """Store every engine's search in ``summary.tuning`` (:func:`judge_tuning`)."""
        summary.tuning = judge_tuning(self.searches, self.job, summary, records, self.budget_s, self.lower_precision)
        if summary.decision is not None:  # the verdict names the winner's configuration
            summary.decision.sentence = sentence(summary.decision, summary, self.job.spec.slos)

    def _search_of(self, plan: EnginePlan) -> Search:
        if not plan.starts_process:
            return Search(plan.name, note=ENDPOINT_NOTE)
        # lower precision needs the fidelity gate: without a reference (no check) its knobs stay out
        lower = self.lower_precision and getattr(self.job.spec.trial, "fidelity", None) is not None
        knobs = search_space_of(plan.adapter, self.kind, lower_precision=lower)
        if lower:  # the precision knobs first: the single-knob changes reach them within a small --tune-configs
            knobs = tuple(sorted(knobs, key=lambda k: not k.precision))
        if not knobs:
            return Search(plan.name, note=NO_SPACE_NOTE)
        space = {k.key: list(k.values) for k in knobs}
        base = plan.launch.engine_args  # the run's own (--engine-arg, --parity strict): a candidate that changes none is dropped
        configs = [c for c in candidates(space, self.max_configs + 8, seed=self.job.spec.workload.seed or 0)
                   if not c or any(base.get(k) != v for k, v in c.items())][:self.max_configs]
        return Search(plan.name, space=space, configs=configs,
                      variants=[EngineClimb(variant(plan, c, k)) for k, c in enumerate(configs)])

    def _search(self, plan: EnginePlan, search: Search) -> None:
        console, n = self.job.console, len(search.configs)
        plan_text = ", ".join(f"{c} × {s:.0f} s" for c, s in rungs(n, self.budget_s))
        console.print(f"[bold]{escape(plan.name)}[/]: configuration search, {n} configurations by {_method(n)} "
                      f"({plan_text} of measuring; every ladder measures its first 3 points whatever its share, so a "
                      "short budget runs over) …")
        args = lambda c: {**plan.launch.engine_args, **c}  # noqa: E731 - what the configuration runs with
        lowered = [label(c) or "defaults" for c in search.configs if lowered_precision(plan.adapter, args(c))]
        floor = getattr(self.job.spec.trial, "fidelity_floor", None)
        if lowered:
            console.print(f"  lower precision (--tune-lower-precision or the run's engine args): "
                          f"{escape('; '.join(lowered))}; each answers the output-fidelity check before it is measured, "
                          f"and is dropped unless it passes the floor {floor:g}", highlight=False)
        if self.lower_precision:
            declared = [f"{k.key}={v}" for k in search_space_of(plan.adapter, self.kind, lower_precision=True)
                        if k.precision for v in k.values]
            tried = {f"{k}={v}" for c in search.configs for k, v in c.items()}
            left = [d for d in declared if d not in tried]
            if not declared:
                console.print(f"  {escape(plan.name)}: no lower-precision setting on this hardware; its precision stays "
                              "the baseline's", highlight=False)
            elif left:
                console.print(f"  {escape(plan.name)}: lower precision not tried within --tune-configs "
                              f"{self.max_configs}: {escape(', '.join(left))} (raise --tune-configs)", highlight=False)

        def told(i: int, t: Tried) -> None:
            what = {"measured": _at_slo(search.variants[i], self.job.spec),
                    "rejected": f"rejected by the engine, not tried again ({t.reason[:160]})",
                    "unfaithful": f"lower precision that did not pass the fidelity gate: not measured, never chosen "
                                  f"({t.reason[:200]})",
                    }.get(t.status, f"{t.status}: {t.reason[:160]}")
            console.print(f"  {search.variants[i].name} ({label(t.config)}): {what}", markup=False, highlight=False)

        _, search.chosen = successive_halving(search.configs, self.budget_s, partial(self._evaluate, search), told,
                                              tried=search.tried)
        chosen = search.variants[search.chosen].name
        console.print(f"  {plan.name}: chosen {chosen} ({label(search.configs[search.chosen])})", highlight=False)

    def _evaluate(self, search: Search, i: int, rung: int, seconds: float) -> tuple[float, float]:
        """Configuration ``i``'s rung ``rung`` with ``seconds`` of measuring (module docstring)."""
        job, v = self.job, search.variants[i]
        gated = rung == 0 and bool(lowered_precision(v.plan.adapter, v.plan.launch.engine_args))  # checked before measured
        spec = replace(job.spec, budget_s=seconds, min_load=1, fidelity_gate=gated,
                       trial=replace(job.spec.trial, equivalence=False, accuracy=None, feature_probes=False,
                                     fidelity=job.spec.trial.fidelity if gated else None))
        if rung == 0:
            body: Any = partial(climb_ladder, spec=spec, tokenizer=job.tokenizer, manifest=job.writer.manifest)
        elif _open(v, spec):
            body = partial(extend_ladder, spec=spec, tokenizer=job.tokenizer, previous=list(v.measurements))
        else:
            body = partial(measure_points, spec=spec, tokenizer=job.tokenizer, points=job._next_points(v))
        trial = Trial((v.name, rung), v.plan, body)
        job.executor.hold([v.plan])
        job.executor.submit([trial])
        try:
            out = job.executor.result(trial, job.writer)
        except KeyboardInterrupt as exc:  # what it measured before is kept, and the seconds it took
            partial_out = getattr(exc, "ladder_outcome", None)
            new = list(partial_out.measurements) if partial_out is not None else list(getattr(exc, "ladder_measurements", []))
            v.measurements += new
            v.failure = "interrupted while measuring"
            exc.spent_s = sum(m.wall_s for m in new)  # type: ignore[attr-defined]
            raise
        except EngineError as exc:
            line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            v.failure, v.log_tail = line, exc.log_tail
            if rung == 0 and i > 0:  # the defaults start; this configuration does not: the engine refused it
                raise Rejected(line) from exc
            raise
        if gated and isinstance(out, LadderOutcome) and out.stopped == "fidelity":  # below the floor, or not checked
            f = out.fidelity
            v.failure = ((f.unchecked() if f.passed is not False else "") or fidelity_line(f)) if f is not None \
                else "fidelity not checked"
            raise Unfaithful(v.failure)
        new = out.measurements if isinstance(out, LadderOutcome) else list(out)
        if isinstance(out, LadderOutcome):
            if v.outcome is None:
                v.outcome = out
            else:
                v.outcome.stopped = out.stopped
        v.measurements += new
        if isinstance(out, LadderOutcome) and out.crash:
            v.outcome.crash, v.outcome.crashed_at = out.crash, out.crashed_at  # type: ignore[union-attr]
            raise RuntimeError(f"crashed under load ({out.crashed_at} in flight): {out.crash}"[:300])
        return _estimate(v, job.spec), sum(m.wall_s for m in new)


def judge_tuning(searches: dict[str, Search], job: LadderJob, summary: LadderSummary,
                 records: Sequence[RequestRecord], budget_s: float,
                 lower_precision: bool = False) -> dict[str, EngineTuning]:
    """Each engine's search as stored (module docstring): every configuration's ladder judged
    like the main job's (same SLOs, bound and seed), the chosen one, the gain; ``budget_s``: the
    search's budget per engine; ``lower_precision``: ``--tune-lower-precision`` was given."""
    out = {}
    for name, search in searches.items():
        if not search.configs:
            out[name] = EngineTuning(note=search.note)
            continue
        ladders = LadderSummary(run_id=summary.run_id, workload=summary.workload, slos=summary.slos,
                                max_failure_rate=summary.max_failure_rate, devices=summary.devices, seed=summary.seed,
                                allow_unchecked=summary.allow_unchecked, spread_prior=summary.spread_prior,
                                engines={v.name: job._engine_ladder(v) for v in [*search.variants, search.defaults]
                                         if v is not None and v.measurements})
        judge(ladders, records, job.spec.slos, seed=summary.seed)
        configs = []
        base = {k: val for k, val in search.variants[0].plan.launch.engine_args.items() if not k.startswith("env.")}
        for v, t in zip(search.variants, search.tried or [Tried(c) for c in search.configs]):
            facts = job.writer.manifest.engines.get(v.name)
            what = label(t.config) if t.config or not base else f"the run's settings ({label(base)})"
            lowered = lowered_precision(v.plan.adapter, dict(v.plan.launch.engine_args))
            configs.append(TunedConfig(id=v.name, engine_args=dict(v.plan.launch.engine_args), label=what,
                                       status=t.status, reason=t.reason,
                                       rungs=len(t.estimates), measuring_s=round(t.seconds, 2),
                                       ladder=ladders.engines.get(v.name), command=getattr(facts, "command", None) or "",
                                       numerics=str(getattr(facts, "numerics", None)
                                                    or (f"lower precision ({lowered})" if lowered else "reference"))))
        tuning = EngineTuning(space=search.space, method=_method(len(search.configs)), lower_precision=lower_precision,
                              budget_s=budget_s, configs=configs, interrupted=search.interrupted,
                              chosen="" if search.interrupted else search.variants[search.chosen].name)
        tuning.used_s = round(sum(c.measuring_s for c in configs), 2)
        if search.defaults is not None:
            d = search.defaults
            tuning.defaults_id, tuning.defaults_reason = d.name, d.failure
            tuning.defaults = ladders.engines.get(d.name)
            tuning.defaults_s = round(sum(m.wall_s for m in d.measurements), 2)
        g = gain(_capacity(name, summary.engines.get(name), records, summary, job),
                 _capacity(tuning.defaults_id, tuning.defaults, records, summary, job) if not tuning.defaults_reason
                 else None, defaults_best=search.chosen == 0)
        tuning.gain, tuning.gain_interval, tuning.gain_none, tuning.gain_text = g.ratio, g.interval, g.none, g.text()
        main = summary.engines.get(name)
        if search.interrupted:
            tuning.gain, tuning.gain_interval, tuning.gain_none = None, None, True
            tuning.gain_text = f"not measured: the search was interrupted by {search.interrupted} before it chose"
        elif main is None or not main.points:
            tuning.gain, tuning.gain_interval, tuning.gain_none = None, None, True
            tuning.gain_text = "not measured: the main job did not climb its chosen configuration" + (
                f" ({main.reason[:160]})" if main is not None and main.reason else "")
        elif tuning.defaults_reason:
            tuning.gain_text = f"not measured: the defaults' climb failed ({tuning.defaults_reason[:160]})"
        tuning.envelope = upper_envelope([(p.per_user_tps, p.output_tps) for ladder in
                                          [summary.engines.get(name), tuning.defaults] + [c.ladder for c in configs]
                                          if ladder is not None for p in ladder.points
                                          if p.passed and p.per_user_tps and p.output_tps > 0])
        out[name] = tuning
    return out


def _at_slo(climb: EngineClimb, spec: Any) -> str:
    """``81.4 tok/s at the SLO`` (a point estimate, no interval) or ``≥ 81.4 tok/s at the SLO (no
    SLO broke yet: a lower bound)`` for the console."""
    shown = f"{_estimate(climb, spec):,.1f} tok/s at the SLO"
    return f"≥ {shown} (no SLO broke yet: a lower bound)" if _open(climb, spec) else shown


def _method(n: int) -> str:
    return "grid" if n <= 2 else "successive halving"


def _capacity(name: str, ladder: EngineLadder | None, records: Sequence[RequestRecord], summary: LadderSummary,
              job: LadderJob) -> Any:
    """``name``'s capacity with its bootstrap draws (None without points)."""
    if ladder is None:
        return None
    points = ladder_points(name, ladder, records, ladder.devices or summary.devices, summary.workload == "agentic")
    if not points:
        return None
    cap = capacity_of(points, job.spec.slos, summary.max_failure_rate, seed=engine_stream(summary.seed, name),
                      spread=run_spread(run_points(summary, records), summary))
    if ladder.stopped == "saturated":
        cap.open = False
    return cap


def recipe(summary: LadderSummary, manifest: Manifest, engine: str) -> Recipe | None:
    """``engine``'s configuration as the harness ran it in the main job (None when it has no
    capacity): the engine args, threads, command line and env from the manifest, its capacity."""
    ladder = summary.engines.get(engine)
    facts = manifest.engines.get(engine)
    if ladder is None or ladder.capacity is None or facts is None or not getattr(facts, "command", None):
        return None  # not measured, or an endpoint the harness does not start (no command line)
    cap = ladder.capacity
    tuning = summary.tuning.get(engine)
    args = dict(getattr(facts, "engine_args", None) or {})
    from harness.app.run.deploy import deployable

    return deployable(Recipe(engine=engine, engine_args=args, threads=getattr(facts, "threads", None),
                  command=getattr(facts, "command", None) or "", env=dict(getattr(facts, "env", None) or {}),
                  run_id=summary.run_id, workload=summary.workload, slos=summary.slos, capacity_tps=cap.output_tps,
                  capacity_interval=cap.interval, capacity_open=cap.open,
                  climb_to=math.ceil(cap.bracket[1] if cap.bracket[1] is not None else cap.load) or None,
                  tuned=bool(tuning is not None and tuning.configs),
                  numerics=str(getattr(facts, "numerics", None) or "reference"),
                  energy=cap.energy, energy_provisioned=cap.energy_provisioned), manifest)


__all__ = ["ENDPOINT_NOTE", "NO_SPACE_NOTE", "Search", "Tuner", "judge_tuning", "recipe", "tuned_plan",
           "variant"]
