"""``bench run``'s main job: every engine's load ladder, the allocation, the decision.

1. **The low end** (:func:`harness.app.run.ladder_trial.climb_ladder`, one trial per engine,
   in run order): each engine warms up and measures the bottom of its ladder (1 and 2 in flight,
   the first briefly; no bisection, no fidelity check yet), so the race can drop those that
   cannot win before they climb; the yardstick climbs within its share of the time budget. Its
   engine is then frozen and kept when every engine fits in memory at once.
2. **Allocate** (:mod:`harness.app.run.allocate`): the measuring goes where the verdict is
   uncertain (:mod:`harness.scoring.verdict.allocation`): engines that cannot reach the leader are
   measured no more; the others are checked for output fidelity, climb on, have their boundary
   bisected or their bracket points repeated on fresh starts, until the verdict is decided or
   the time budget is spent.
3. **Decide** (:func:`harness.scoring.verdict.decision.judge`) from the stored records: capacities at the
   SLO with their intervals, the gates, the verdict; written to ``ladder.json``. Each engine's
   ``summary.json`` entry holds the metrics of its capacity point (the passing point below its
   boundary), so the weighted view (``bench recommend``) and the older reports still read it.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any, Sequence

from rich.markup import escape

from adapters.base import EngineError
from adapters.runtime.resources import combine_repeats
from results.hardware import device_price
from results.schema import (LADDER_FILE, EngineLadder, EngineResult, EngineStatus, LadderPoint, LadderSummary,
                            RequestRecord, SpreadPrior)
from results.store import REQUESTS_FILE, RunWriter, read_records, write_model_atomic

from harness.app.trial.executor import Trial, TrialExecutor
from harness.app.trial.plan import EnginePlan
from harness.app.core.signals import interrupt_cause
from harness.app.run.engine_turns import engine_cost
from harness.app.run.ladder_energy import capacity_figures, point_figures
from harness.app.run.ladder_trial import LadderOutcome, LadderSpec, PointMeasurement, climb_ladder, stats_line
from harness.metrics import slo_table
from harness.metrics.summarise import Condition, summarise
from harness.scoring.verdict.decision import judge
from harness.scoring.capacity.frontier import PointSample, capacity_of, point_stats
from harness.scoring.capacity.race import out_text
from harness.scoring.capacity.samples import judged_records
from harness.scoring.gates import REFERENCE_ENGINES
from rich.console import Console
from harness.metrics import SLO
from results.schema import RunSummary

if TYPE_CHECKING:  # transformers is slow to import: only where a tokenizer is loaded
    from transformers import PreTrainedTokenizerBase


@dataclass
class EngineClimb:
    """One engine in the job: its ``plan``, its climb's ``outcome`` (None until measured),
    its measurements (the climb's and the decisive repeats'), and why it failed ("" = it did not)."""

    plan: EnginePlan
    outcome: LadderOutcome | None = None
    measurements: list[PointMeasurement] = field(default_factory=list)
    failure: str = ""
    log_tail: str = ""
    interrupted: bool = False  # the run was interrupted during its climb (``failure`` says by whom)

    @property
    def name(self) -> str:
        return self.plan.name


LOW_END_POINTS = 2  # a production engine's first climb: its low end (1 and 2 in flight); the race decides the rest


class LadderJob:
    """Runs the main job over ``engines`` with ``executor`` (started by the caller for the
    round), writing to ``writer``; ``spec`` says how ladders are climbed."""

    def __init__(self, spec: LadderSpec, executor: TrialExecutor, writer: RunWriter, console: Console, *, tokenizer: PreTrainedTokenizerBase,
                 boundary_repeats: int = 2, target_tps: float | None = None, time_budget_s: float | None = None) -> None:
        self.spec, self.executor, self.writer, self.console = spec, executor, writer, console
        self.tokenizer, self.boundary_repeats, self.target_tps = tokenizer, boundary_repeats, target_tps
        self.time_budget_s = time_budget_s
        self.first_budget_s = spec.budget_s  # each engine's first climb's (climb)
        self.t0 = time.monotonic()
        self.repeat_trials: dict[str, int] = {}  # each engine's fresh-start repeats so far (their trial keys: 1, 2, …)
        self.spread_prior: SpreadPrior | None = None  # earlier runs' spread between measurements (spread_history)
        self.race_out: dict[str, tuple[str, int, str]] = {}  # engine → (the leader then, points, the line said)

    # -- phase 1 -------------------------------------------------------------------------------
    def climb(self, engines: list[EngineClimb], budget_s: float | None = None) -> str:
        """Every engine's first climb, in order: a production engine's low end
        (:data:`LOW_END_POINTS` points, the first brief), after which the race decides whether it
        climbs on (:mod:`harness.app.run.allocate`); the yardstick's, and a recipe re-run's,
        within ``budget_s`` (None: the spec's). Doubling until an SLO breaks, no bisection and no
        fidelity check (the allocation spends both where they decide); returns who interrupted
        it ("" = nobody)."""
        first = replace(self.spec, trial=replace(self.spec.trial, fidelity=None), bisect=False,
                        budget_s=self.spec.budget_s if budget_s is None else budget_s)
        self.first_budget_s = first.budget_s
        low_end = replace(first, max_points=min(first.max_points, LOW_END_POINTS))

        def body(e: EngineClimb) -> Any:  # the yardstick, and a recipe's re-run (its climb_to), climb their share
            full = e.name in REFERENCE_ENGINES or first.min_load > 1
            return partial(climb_ladder, spec=first if full else low_end, tokenizer=self.tokenizer,
                           manifest=self.writer.manifest)

        trials = {e.name: Trial((e.name, 0), e.plan, body(e), keep=True) for e in engines}
        self.executor.submit(list(trials.values()))
        for i, engine in enumerate(engines):
            try:
                engine.outcome = self.executor.result(trials[engine.name], self.writer)
                engine.measurements = list(engine.outcome.measurements)
            except KeyboardInterrupt as exc:
                engine.outcome = getattr(exc, "ladder_outcome", None)
                engine.measurements = list(engine.outcome.measurements) if engine.outcome is not None else []
                n = len(engine.measurements)
                kept = f"its {n} measurement{' is' if n == 1 else 's are'} kept" if n else "nothing measured"
                engine.failure = f"interrupted by {interrupt_cause(exc)} while climbing its ladder; {kept}"
                engine.interrupted = True
                for rest in engines[i + 1:]:
                    rest.failure = "not measured: the run was interrupted before its turn"
                return interrupt_cause(exc)
            except EngineError as exc:
                self._failed(engine, exc)
        return ""

    def _failed(self, engine: EngineClimb, exc: EngineError) -> None:
        self.console.print(f"[red]{escape(engine.name)}[/]: failed — {escape(str(exc))}")
        if exc.log_tail:
            self.console.print(exc.log_tail[-2000:], markup=False, highlight=False)
        engine.failure, engine.log_tail = str(exc), exc.log_tail

    def _ranked(self, engines: list[EngineClimb]) -> list[EngineClimb]:
        """The production engines that measured and stand (not crashed, not excluded by the
        fidelity gate, below the floor or not checked: no budget is spent on an engine the gate
        excludes), best point estimate first."""
        return sorted((e for e in engines if e.outcome is not None and not e.failure and not e.outcome.crash
                       and e.name not in REFERENCE_ENGINES
                       and not (e.outcome.fidelity is not None
                                and e.outcome.fidelity.exclusion(self.spec.allow_unchecked))),
                      key=lambda e: -_estimate(e, self.spec))

    def _pooled_lines(self, engine: EngineClimb) -> None:
        """The engine's bracketing points' verdicts over all their measurements pooled (what the
        capacity is read from), one console line each."""
        passing, failing = _bracket(engine, self.spec)
        for sample in _samples(engine, self.spec):
            if sample.load in (passing, failing) and len(sample.repeats) > 1:
                st = point_stats(sample.load, sample.pooled(), self.spec.slos, self.spec.max_failure_rate,
                                 sample.devices, sum(sample.sessions) if sample.sessions is not None else None)
                self.console.print(f"  {engine.name} {stats_line(int(sample.load), st)} ({len(sample.repeats)} "
                                   "measurements pooled: what the decision reads)", markup=False, highlight=False)

    def _points_at(self, engine: EngineClimb, loads: Sequence[int]) -> list[tuple[int, int, int, int]]:
        """(index, load, seed, repeat) of one more measurement at each of ``loads`` (measured before)."""
        base, count = self.spec.workload.seed or 0, len(engine.measurements)
        out = []
        for j, load in enumerate(loads):
            index = next(m.index for m in engine.measurements if m.load == load)
            repeat = sum(m.load == load for m in engine.measurements)
            out.append((index, load, base + count + j, repeat))
        return out

    def _next_points(self, engine: EngineClimb) -> list[tuple[int, int, int, int]]:
        """(index, load, seed, repeat) of the next measurement of each bracketing point: fresh
        seeds continue the engine's count."""
        passing, failing = _bracket(engine, self.spec)
        return self._points_at(engine, [x for x in (passing, failing) if x is not None])

    # -- the artefacts ---------------------------------------------------------------------------
    def summary(self, engines: list[EngineClimb], skipped: dict[str, EngineLadder], run_id: str, workload: str,
                slos_default: bool, interrupted: str = "", then: Any = None,
                cache_optimal: float | None = None) -> LadderSummary:
        """``ladder.json``'s content, decided (:func:`harness.scoring.verdict.decision.judge`), and each
        measured engine's ``summary.json`` entry; ``then(summary, records)`` adds to it before it
        is written (``--tune``: each engine's search, :func:`harness.app.run.tune.judge_tuning`);
        ``cache_optimal``: the agentic workload's infinite-cache hit rate, each point's cache is held against."""
        records = read_records(self.writer.run_dir / REQUESTS_FILE)
        s = LadderSummary(run_id=run_id, workload=workload, slos=slo_table(self.spec.slos),
                          slos_default=slos_default, max_failure_rate=self.spec.max_failure_rate, devices=self.spec.devices,
                          budget_per_engine_s=round(self.first_budget_s, 1), boundary_repeats=self.boundary_repeats,
                          time_budget_s=self.time_budget_s if self.time_budget_s != float("inf") else None,
                          seed=self.spec.workload.seed or 0, allow_unchecked=self.spec.allow_unchecked,
                          target_load={"output_tps": self.target_tps} if self.target_tps else None,
                          cache_optimal=cache_optimal, spread_prior=self.spread_prior)
        condition = Condition(tuple(self.spec.slos))
        for e in engines:
            s.engines[e.name] = self._engine_ladder(e)
            mine = [r for r in records if r.engine == e.name and r.phase == "measured"]
            for point in s.engines[e.name].points:  # each point's metrics, pooled over its measurements
                if point_records := [r for r in mine if r.probe == point.index]:
                    point.metrics = summarise(point_records, condition, intervals=False).pooled
        s.engines.update(skipped)
        price = device_price(self.writer.manifest.hardware)  # (USD per device-hour, its source) or None
        judge(s, records, self.spec.slos, price_per_hour=price[0] if price else None, target_tps=self.target_tps,
              client_rps=self._client_rps(), interrupted=interrupted)
        capacity_figures(s)  # each capacity's J per output token: its capacity point's
        for name, (leader, n, said) in self.race_out.items():  # in the decision's figures, as the verdict prints them
            s.engines[name].race = _race_line(s, name, leader, n, said)
        for e in engines:
            self.writer.set_engine(e.name, self._engine_result(e, s.engines[e.name], records))
        if then is not None:
            then(s, records)
        s.wall_s = round(time.monotonic() - self.t0, 2)
        write_model_atomic(self.writer.run_dir / LADDER_FILE, s)
        return s

    def _client_rps(self) -> float | None:
        """The request rate the client sends without limiting the load: half its calibrated
        maximum per worker (``harness.loadgen.calibrate.CLIENT_RATE_FRACTION``); None uncalibrated."""
        from harness.loadgen.calibrate import CLIENT_RATE_FRACTION

        cal = self.writer.manifest.client_calibration
        top = getattr(cal, "max_rate_rps", None) if cal is not None else None
        return CLIENT_RATE_FRACTION * top * self.spec.trial.measure.client_workers if top else None

    def _engine_ladder(self, e: EngineClimb) -> EngineLadder:
        o = e.outcome
        points = []
        for index in sorted({m.index for m in e.measurements}):
            ms = [m for m in e.measurements if m.index == index]
            points.append(LadderPoint(index=index, load=ms[0].load, seeds=[m.seed for m in ms],
                                      planned_requests=[m.planned for m in ms], wall_s=sum(m.wall_s for m in ms),
                                      repeats=[m.metrics for m in ms] if len(ms) > 1 else []))
            point_figures(points[-1], [m.energy for m in ms], self.writer.manifest.energy)
            points[-1].series = [m.series for m in ms if m.series is not None]
        status = EngineStatus.OK if o is not None and not e.failure and not o.crash and points else EngineStatus.FAILED
        if o is None and e.failure.startswith("not measured"):
            status = EngineStatus.NOT_MEASURED
        elif e.interrupted:
            status = EngineStatus.INTERRUPTED
        return EngineLadder(status=status, reason=e.failure, stopped=o.stopped if o else "", crash=o.crash if o else "",
                            crashed_at=o.crashed_at if o else None, points=sorted(points, key=lambda p: p.load),
                            reference=e.name in REFERENCE_ENGINES, display_name=o.display_name if o else None,
                            devices=e.plan.launch.deployment_devices, startup_s=_startup(e), startup_alone=_startup(e) is not None and (
                                any(m.startup_alone_s for m in e.measurements) or bool(o and not o.parallel)),
                            processes=o.processes if o else None,
                            verified_features=_verified(o) if o else None,
                            peak_memory_bytes=o.peak_memory_bytes if o else None, fidelity=o.fidelity if o else None,
                            race=self.race_out[e.name][2] if e.name in self.race_out else "")

    def _engine_result(self, e: EngineClimb, ladder: EngineLadder, records: list[RequestRecord]) -> EngineResult:
        """The engine's ``summary.json`` entry: the metrics of its capacity point (the highest
        passing load below its boundary; its lowest load when none passed), over the requests the
        judge reads (:func:`harness.scoring.capacity.samples.judged_records`: each measurement's steady
        state) and with the judge's output throughput (the point's ``output_tps`` times its
        devices), so Details, the weighted lens and the ladder print one figure for the point."""
        cap, at = ladder.capacity, shown_point(ladder)
        o = e.outcome
        base: dict[str, Any] = dict(capabilities=e.plan.capabilities, version=e.plan.probe.version,
                                    display_name=o.display_name if o else None, startup_s=ladder.startup_s,
                                    feature_probes=o.feature_probes if o else {}, log_tail=e.log_tail[-4000:],
                                    wall_s=round(sum(m.wall_s for m in e.measurements), 2) or None)
        if at is None:
            return EngineResult(status=ladder.status if ladder.status is not EngineStatus.OK else EngineStatus.FAILED,
                                reason=e.failure or ladder.excluded or "no ladder point was measured", **base)
        summary = point_summary(e.name, at, records, self.spec.slos, ladder.devices or self.spec.devices,
                                self.spec.workload.name)
        base["resources"] = combine_repeats([m.resources for m in e.measurements if m.index == at.index and m.resources])
        why = ladder.excluded and ladder.excluded != e.failure and f"excluded: {ladder.excluded}"  # said once
        if not at.passed:
            role = "its lowest load, which failed"
        elif cap is not None and cap.open:
            role = "the highest load measured; its capacity is at least this"
        else:
            role = (f"the highest load that passed, below its capacity at {cap.load:.3g} in flight"  # type: ignore[union-attr]
                    if cap is not None else "")
        where = f"metrics of its ladder point at {at.load} in flight ({role}), over its steady state"
        if cap is not None and not cap.never_met:  # the capacity table's figure (USD per device-hour / per-device tok/s)
            base["cost"] = engine_cost(device_price(self.writer.manifest.hardware), cap.output_tps, cap.interval)
        return EngineResult(status=EngineStatus.OK if ladder.status is EngineStatus.OK else ladder.status,
                            reason="; ".join(x for x in (e.failure, why, where) if x), metrics=summary.pooled,
                            repeats=summary.repeats if len(summary.repeats) > 1 else [], intervals=summary.intervals,
                            ladder_point=at.index, **base)


def shown_point(ladder: EngineLadder) -> LadderPoint | None:
    """The point an engine's ``summary.json`` entry shows: the highest load that passed, below its
    boundary (its lowest load when none passed); None without a capacity or points."""
    cap = ladder.capacity
    if cap is None or not ladder.points:
        return None
    load = cap.bracket[0] if cap.bracket[0] is not None else ladder.points[0].load
    return next((p for p in ladder.points if p.load == load), ladder.points[0])


def point_summary(name: str, at: LadderPoint, records: Sequence[RequestRecord], slos: Sequence[Any], devices: int,
                  workload: str) -> Any:
    """Engine ``name``'s point ``at`` summarised as the judge reads it: its steady state, its output
    throughput the judge's (times ``devices``: one figure per point), a single-turn workload's
    requests/s the point's (an agentic point's rate is sessions/s)."""
    mine = [r for r in records if r.engine == name and r.phase == "measured" and r.probe == at.index]
    summary = summarise(judged_records(mine), Condition(tuple(slos)))
    summary.pooled.output_throughput = at.output_tps * devices
    if workload != "agentic":
        summary.pooled.request_throughput = at.request_rate
    summary.intervals.pop("output_throughput", None)
    return summary


def repoint(summary: RunSummary, ladder: LadderSummary, records: Sequence[RequestRecord], slos: Sequence[SLO]) -> RunSummary:
    """A copy of a ladder run's ``summary`` whose engines' entries hold the metrics of their capacity
    point in ``ladder`` (the ladders decided again under other SLOs: ``bench recommend RUN --slo``),
    so the weighted view scores the points the re-decided verdict reads, not the stored ones."""
    out = summary.model_copy(deep=True)
    for name, e in ladder.engines.items():
        entry, at = out.engines.get(name), shown_point(e)
        if entry is None or entry.ladder_point is None or entry.metrics is None or at is None:
            continue
        s = point_summary(name, at, records, slos, e.devices or ladder.devices, ladder.workload)
        out.engines[name] = entry.model_copy(update={"metrics": s.pooled, "intervals": s.intervals, "ladder_point": at.index,
                                                     "repeats": s.repeats if len(s.repeats) > 1 else []})
    return out


def _race_line(s: LadderSummary, name: str, leader: str, points: int, then: str) -> str:
    """Why engine ``name`` was measured no more, in the decided figures (the leader's floor and its
    ceiling, as the verdict and the capacity table print them); the figures of the moment it was
    dropped (``then``, said on the console) when the decided ones no longer put it below."""
    lead, mine = s.engines.get(leader), s.engines.get(name)
    bar = lead.capacity.floor if lead is not None and lead.capacity is not None else None
    top = mine.capacity.ceiling if mine is not None and mine.capacity is not None else None
    after = f"stopped after {points} point{'s' if points != 1 else ''}"
    if bar is None or top is None or top >= bar:
        return f"{then} when it was dropped: {after}"
    return f"{out_text(leader, bar, top, lead.capacity.interval)}: {after}"  # type: ignore[union-attr]


def _startup(e: EngineClimb) -> float | None:
    """The engine's start-up time (s): the median of its starts alone (the decisive re-climbs' fresh
    starts: no other engine starting, no one-time preparation such as an IR export left), else its
    first start (parallel with the others when the run started them together)."""
    alone = [m.startup_alone_s for m in e.measurements if m.startup_alone_s]
    if alone:
        return round(statistics.median(dict.fromkeys(alone)), 2)  # one value per start, not per measurement
    return round(e.outcome.startup_s, 2) if e.outcome is not None else None


def _verified(o: LadderOutcome) -> int | None:
    if not o.feature_probes:
        return None
    return sum(1 for p in o.feature_probes.values() if getattr(p.status, "value", p.status) == "verified")


def _samples(e: EngineClimb, spec: LadderSpec) -> list[PointSample]:
    by: dict[int, list[PointMeasurement]] = {}
    for m in e.measurements:
        by.setdefault(m.index, []).append(m)
    return [PointSample(float(ms[0].load), tuple(m.requests for m in ms), e.plan.launch.deployment_devices,
                        tuple(m.sessions or 0 for m in ms) if ms[0].sessions is not None else None) for ms in by.values()]


def _estimate(e: EngineClimb, spec: LadderSpec) -> float:
    """The engine's capacity point estimate (no interval): for choosing the decisive pair."""
    samples = _samples(e, spec)
    return capacity_of(samples, spec.slos, spec.max_failure_rate, resamples=0).output_tps if samples else 0.0


def _open(e: EngineClimb, spec: LadderSpec) -> bool:
    """No point of its ladder fails (all its measurements pooled) and it can climb on: it did not
    saturate, reach --max-load or crash (a bracket point that failed in the climb and passes once
    the decisive repeats are pooled with it counts: the ladder climbs on from there)."""
    if e.outcome is None or e.outcome.stopped in ("saturated", "max_load", "crashed", "fidelity", ""):
        return False
    samples = _samples(e, spec)
    return bool(samples) and capacity_of(samples, spec.slos, spec.max_failure_rate, resamples=0).open


def _bracket(e: EngineClimb, spec: LadderSpec) -> tuple[int | None, int | None]:
    """The loads bracketing the engine's SLO boundary (passing, failing; None = not found);
    (None, None) when it has nothing to repeat."""
    samples = _samples(e, spec)
    if not samples:
        return None, None
    cap = capacity_of(samples, spec.slos, spec.max_failure_rate, resamples=0)
    if cap.never_met:
        return None, None
    passing, failing = cap.bracket
    return (int(passing) if passing is not None else None), (int(failing) if failing is not None else None)


def skipped_ladder(name: str, result: EngineResult) -> EngineLadder:
    """The ladder entry of an engine that was skipped or never started."""
    return EngineLadder(status=result.status, reason=result.reason, reference=name in REFERENCE_ENGINES)

