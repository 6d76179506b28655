"""The main job's one scheduler: every engine's low end first (its first climb,
:meth:`harness.app.run.ladder_run.LadderJob.climb`), then the allocation rule
(:mod:`harness.scoring.verdict.allocation`) on live engines, within the job's time budget.

Each round judges what was measured so far (every engine's capacity with its interval,
:mod:`harness.scoring.capacity.race` for who can still win, :mod:`harness.scoring.verdict.verdict` for the
verdict), says once of each engine that falls out of the race why, naming the statistic it was
held to ("transformers at most 41.2 tok/s, below openvino's floor of 93.1 tok/s (the low end of
its 95 % interval [93.1–99.0]): stopped after 2 points"), checks the output fidelity of
the engines the verdict rests on (the leader, and the runner-up unless separated from it) that
were not checked (the first climbs skip the check: only an engine that can win needs one; an
engine below the floor is excluded, and the race is judged again without it), then runs the
steps the rule asks for, each as a trial on the executor:

- **climb**: the ladder climbs on from twice its highest load (its kept engine), aimed at its
  projected boundary; an engine other than the leader stops as soon as its ceiling falls below
  the leader's floor (out of the race after that point, not after the whole climb);
- **bisect**: one point halfway between the bracket's loads (its kept engine);
- **repeat**: a fresh start of the engine (the spread between starts goes into the interval),
  a ramp that is not judged (a whole pass of the workload's own prompts at the bracket's passing
  load, its records stored with phase "ramp"), then the bracket points once each. A
  fresh engine is cold: measured as a point at half the boundary, the ramp read 0.60-0.63 of the
  climb's throughput there, and the first bracket point after it 0.89 in each of make bench's
  three runs of 2026-12-06 (the second 0.95-1.05); after a ramp at the passing load the first
  read 0.94 (one run, openvino alone; benchmarks/ramp_bias.py), so the ramp is now as long as a
  measurement of that point; a warm-up of synthetic prompts left it at 0.64, so the ramp is a
  pass of the workload's own prompts.

It stops when the rule asks for nothing more, or when the next step would not finish within
the time budget (said in one line, with the time left).
"""

from __future__ import annotations

import time
from dataclasses import replace
from functools import partial
from typing import Any

from rich.markup import escape

from adapters.base import EngineError

from harness.app.trial.executor import Trial
from harness.app.core.signals import interrupt_cause
from harness.app.run.ladder import BAR_RESAMPLES as RESAMPLES, CLIMBS_ON
from harness.app.run.ladder_run import EngineClimb, LadderJob, _samples
from harness.app.run.ladder_trial import LadderOutcome, check_only, extend_ladder, measure_points
from harness.scoring.verdict.allocation import Ladders, Step, next_steps
from harness.scoring.capacity.frontier import Capacity, capacity_of, engine_stream
from harness.scoring.capacity.race import Standing, standings
from harness.scoring.capacity.spread import Spread, spread_of
from harness.scoring.verdict.verdict import Candidate, Verdict, decide

MIN_CLIMB_S = 20.0  # a climb-on step gets at least this much measuring


class Allocation:
    """The allocation over ``job``'s engines until ``deadline`` (``time.monotonic()``), with at
    most ``max_repeats`` repeats of a pair's bracket points."""

    def __init__(self, job: LadderJob, deadline: float, max_repeats: int = 3) -> None:
        self.job, self.deadline, self.max_repeats = job, deadline, max_repeats
        self.climbs: dict[str, int] = {}
        self.repeats: dict[str, int] = {}
        self.said: set[str] = set()
        self.checked: set[str] = set()
        self.spread: Spread | None = None  # the last judge's spread between measurements (None: none judged yet)

    @property
    def left_s(self) -> float:
        return self.deadline - time.monotonic()

    def run(self, engines: list[EngineClimb], first_budget_s: float | None = None) -> str:
        """Every engine's first climb (the yardstick's within ``first_budget_s`` of measuring,
        None: the spec's budget), then judge, check, step, until done (module docstring); returns
        who interrupted it ("" = nobody)."""
        interrupted = self.job.climb(engines, first_budget_s)
        if interrupted:
            return interrupted
        by_name = {e.name: e for e in engines}
        while True:
            race, verdict, caps = self.judge(engines)
            self._say_out(race, by_name)
            unchecked = [by_name[s.name] for s in self._deciding(race, verdict) if self._needs_check(by_name[s.name])]
            if unchecked:
                interrupted = self._check(unchecked)
                if interrupted:
                    return interrupted
                continue
            steps = next_steps(race, verdict, self._ladders(engines, caps), max_repeats=self.max_repeats,
                               spread_df=self.spread.df if self.spread is not None else 0)
            if not steps:
                return ""
            # a step that fits is taken even when the output-fidelity check it may call for (an engine that
            # becomes the leader, or a runner-up not separated from it) will not: that check runs whatever the
            # budget, as the low ends do, and the job says by how much it ran over (ladder_mode.overrun_line).
            # Keeping the check's time back instead left make bench's 2026-12-07 run undecided: two open engines
            # that could still lead were not climbed with 178 s left, 139 s of it kept for a check
            cost = sum(self._cost(by_name[s.engine], s) for s in steps)
            if cost > self.left_s:
                what = " and ".join(f"{s.action} {s.engine}" for s in steps)
                self.job.console.print(f"Time budget: {max(0.0, self.left_s):.0f} s left, and the next step ({what}) "
                                       f"needs about {cost:.0f} s: the verdict rests on what was measured "
                                       "(--time-budget gives more).", highlight=False)
                return ""
            before = sum(len(e.measurements) for e in engines), sum(bool(e.failure) for e in engines)
            for step in steps:
                bar = race[0].floor if step.engine != race[0].name else 0.0  # a climb-on stops below the leader's floor
                interrupted = self._do(by_name[step.engine], step, bar)
                if interrupted:
                    return interrupted
            after = sum(len(e.measurements) for e in engines), sum(bool(e.failure) for e in engines)
            if after == before and all(s.action != "climb" for s in steps):
                return ""  # nothing measured and nobody failed (the step found nothing to do): the rule would ask again
            if steps[0].action == "repeat":
                for step in steps:
                    self.job._pooled_lines(by_name[step.engine])

    # -- judging -----------------------------------------------------------------------------------
    def judge(self, engines: list[EngineClimb]) -> tuple[list[Standing], Verdict, dict[str, Capacity]]:
        """The race, the verdict and the capacities over the production engines standing."""
        caps: dict[str, Capacity] = {}
        ranked = self.job._ranked(engines)
        samples = {e.name: _samples(e, self.job.spec) for e in engines}
        stored = self.job.spread_prior
        spread = spread_of([[p.repeats for p in pts] for pts in samples.values()],  # the machine's: every ladder
                           stored.groups if stored is not None else [], stored.df if stored is not None else None)
        self.spread = spread  # a climb-on's stop rule reads the bar with it (Ladder.spread)
        for e in ranked:
            pts = samples[e.name] if e.name in samples else _samples(e, self.job.spec)
            cap = capacity_of(pts, self.job.spec.slos, self.job.spec.max_failure_rate, resamples=RESAMPLES,
                              seed=engine_stream(0, e.name), spread=spread) if pts else None
            if cap is not None and not cap.never_met and cap.output_tps > 0:
                caps[e.name] = cap
        verdict = decide([Candidate(n, c) for n, c in caps.items()])
        return standings(caps, self.job.spec.max_load), verdict, caps

    def _ladders(self, engines: list[EngineClimb], caps: dict[str, Capacity]) -> Ladders:
        gap, passing, climbable = {}, {}, {}
        for e in engines:
            cap = caps.get(e.name)
            if cap is None or e.outcome is None:
                continue
            p, f = cap.bracket
            gap[e.name] = float(f - p) if p is not None and f is not None else 0.0
            passing[e.name] = float(p or 0)
            top = max((m.load for m in e.measurements), default=0)
            climbable[e.name] = cap.open and e.outcome.stopped in CLIMBS_ON and top < self.job.spec.max_load
        return Ladders(gap=gap, passing=passing, climbable=climbable, climbs=self.climbs, repeats=self.repeats)

    def _say_out(self, race: list[Standing], by_name: dict[str, EngineClimb]) -> None:
        for s in race:
            if s.out and s.name not in self.said:
                self.said.add(s.name)
                self.job.executor.release(s.name)  # its memory back for the engines still measured
                n = len({m.load for m in by_name[s.name].measurements})
                self.job.console.print(f"{escape(s.name)} {s.out}: stopped after {n} point{'s' if n != 1 else ''}",
                                       highlight=False)
                self.job.race_out[s.name] = (race[0].name, n, s.out)

    # -- the fidelity check of the engines still in the race -----------------------------------------
    @staticmethod
    def _deciding(race: list[Standing], verdict: Verdict) -> list[Standing]:
        """The engines whose fidelity the verdict rests on now: the leader, and the runner-up
        while the two are not separated or equivalent (a tie, or a climb, may turn on it; an open
        runner-up climbs first: it may fall out of the race)."""
        if not race:
            return []
        rest = [race[1]] if len(race) > 1 and not race[1].out and verdict.outcome in ("not_separated", "equivalent") else []
        return [race[0], *rest]

    def _needs_check(self, e: EngineClimb) -> bool:
        return (self.job.spec.trial.fidelity is not None and e.name not in self.checked and e.outcome is not None
                and e.outcome.fidelity is None)

    def _check(self, engines: list[EngineClimb]) -> str:
        for e in engines:
            self.checked.add(e.name)
            self.job.console.print(f"{escape(e.name)}: still in the race, so its output fidelity is checked …",
                                   highlight=False)
            trial = Trial((e.name, 200), e.plan, partial(check_only, spec=self.job.spec, tokenizer=self.job.tokenizer),
                          keep=True)
            interrupted = self._submit(e, trial, fresh=False, add=lambda got, e=e: setattr(e.outcome, "fidelity", got))
            if interrupted:
                return interrupted
        return ""

    # -- the steps ------------------------------------------------------------------------------------
    def _cost(self, e: EngineClimb, step: Step) -> float:
        """About how long ``step`` takes (s): a climb one point 1.5 times as long as its highest
        (the next load is at most twice it; time grows with it); a bisection the bracket's failing
        point's last measurement; a repeat a start, its ramp (a measurement of the passing point)
        and its points' last measurements."""
        walls = {m.load: m.wall_s for m in e.measurements}
        if step.action == "climb":  # its first point runs whatever the budget: about 1.5 times its highest one
            top = max(e.measurements, key=lambda m: m.load, default=None)
            return max(MIN_CLIMB_S, 1.5 * top.wall_s if top is not None else 0.0)
        points = self._repeat_points(e) if step.action == "repeat" else []
        if step.action == "bisect":
            return max(walls.values(), default=0.0) if not e.measurements else walls.get(self._bracket(e)[1] or 0, 0.0)
        start = e.outcome.startup_s if e.outcome is not None else 0.0
        return start + walls.get(self._ramp(e) or 0, 0.0) + sum(walls.get(load, 0.0) for _, load, _, _ in points)

    def _bracket(self, e: EngineClimb) -> tuple[int | None, int | None]:
        from harness.app.run.ladder_run import _bracket

        return _bracket(e, self.job.spec)

    def _repeat_points(self, e: EngineClimb) -> list[tuple[int, int, int, int]]:
        p, f = self._bracket(e)
        return self.job._points_at(e, [x for x in (p, f) if x is not None])

    def _ramp(self, e: EngineClimb) -> int | None:
        """The load of a fresh start's ramp: the bracket's passing load (the boundary's
        neighbourhood: a ramp at half of it left the first bracket point after it at 0.89 of its
        climb's throughput in make bench's three runs of 2026-12-06); None when it has none."""
        p, _ = self._bracket(e)
        return p if p is not None and p >= 2 else None

    def _do(self, e: EngineClimb, step: Step, bar: float = 0.0) -> str:
        self.job.console.print(f"{escape(e.name)}: {step.action} — {escape(step.why)} ({max(0.0, self.left_s):.0f} s "
                               "of the time budget left) …", highlight=False)
        if step.action == "climb":
            self.climbs[e.name] = self.climbs.get(e.name, 0) + 1
            spec = replace(self.job.spec, budget_s=min(self.job.spec.budget_s, max(MIN_CLIMB_S, self.left_s / 2)),
                           bisect=False, bar=bar, spread=self.spread)  # aimed, bisected by the rule's steps, stopped out of the race
            body = partial(extend_ladder, spec=spec, tokenizer=self.job.tokenizer, previous=list(e.measurements))
            trial = Trial((e.name, 100 + self.climbs[e.name]), e.plan, body, keep=True)
            return self._submit(e, trial, fresh=False, add=lambda more: self._climbed(e, more))
        if step.action == "bisect":
            p, f = self._bracket(e)
            if p is None or f is None:
                return ""
            index = max(m.index for m in e.measurements) + 1
            seed = (self.job.spec.workload.seed or 0) + len(e.measurements)
            body = partial(measure_points, spec=self.job.spec, tokenizer=self.job.tokenizer,
                           points=[(index, (p + f) // 2, seed, 0)])
            trial = Trial((e.name, 300 + index), e.plan, body, keep=True)
            return self._submit(e, trial, fresh=False, add=lambda got: e.measurements.extend(got))
        self.repeats[e.name] = self.repeats.get(e.name, 0) + 1
        self.job.repeat_trials[e.name] = self.job.repeat_trials.get(e.name, 0) + 1
        points, ramp = self._repeat_points(e), self._ramp(e)
        seed = (self.job.spec.workload.seed or 0) + len(e.measurements) + len(points)
        body = partial(measure_points, spec=self.job.spec, tokenizer=self.job.tokenizer, points=points,
                       ramp=(ramp, seed) if ramp is not None else None)
        trial = Trial((e.name, self.job.repeat_trials[e.name]), e.plan, body, keep=True)
        return self._submit(e, trial, fresh=True, add=lambda got: e.measurements.extend(got))

    def _climbed(self, e: EngineClimb, more: LadderOutcome) -> None:
        e.measurements += more.measurements
        assert e.outcome is not None
        e.outcome.stopped = more.stopped
        if more.crash:
            e.outcome.crash, e.outcome.crashed_at = more.crash, more.crashed_at

    def _submit(self, e: EngineClimb, trial: Trial, *, fresh: bool, add: Any) -> str:
        """Run ``trial`` on ``e``'s engine (``fresh``: stopped and started again first) and hand
        its result to ``add``; returns who interrupted it ("" = nobody)."""
        ex = self.job.executor
        if fresh:
            ex.release(e.name)
        ex.hold([e.plan])
        ex.submit([trial])
        try:
            add(ex.result(trial, self.job.writer))
        except KeyboardInterrupt as exc:
            e.measurements += getattr(exc, "ladder_measurements", [])
            outcome = getattr(exc, "ladder_outcome", None)
            if outcome is not None:
                e.measurements += outcome.measurements
            return interrupt_cause(exc)
        except EngineError as exc:
            self.job._failed(e, exc)
        return ""
