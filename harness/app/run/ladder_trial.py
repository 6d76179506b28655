"""The load ladder's trials: one engine's climb in one session, and more measurements of the
points that decide (the bodies an executor runs, :mod:`harness.app.trial.executor`).

Each measurement of a point at load ``L`` is the one measurement step
(:func:`harness.app.trial.measure.measure`) of a freshly drawn workload: closed loop, ``L``
sessions in flight (a single-turn workload's sessions are its requests), all due at once, at
least :attr:`LadderSpec.min_requests` requests and :attr:`LadderSpec.rounds` sessions per unit
of load, so every point reaches a steady state and its percentiles rest on the same order of
requests. Its records go to the sink with ``probe`` = the point's index and ``repeat`` = the
measurement's index at that point.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Sequence

from adapters.runtime.resources import with_output_tokens
from adapters.base import EngineError
from results.schema.records import RAMP_PHASE
from results.schema.metric_registry import metric_figure
from results.schema.series import EngineSeries
from results.schema import AccuracyResult, FeatureProbe, FidelityResult, Manifest, Metrics, RequestRecord, ResourceUse
from workloads.options import WorkloadOptions

from harness.app.trial.measure import MeasurementSink, measure, target_of
from harness.app.trial.plan import EnginePlan
from harness.app.trial.startup import EngineStarter
from harness.app.trial.steps import Session, TrialSpec, open_session
from harness.app.run.ladder import Ladder, Rung
from harness.metrics import SLO
from harness.metrics.energy import EnergySample, windows
from harness.scoring.capacity.frontier import PointStats, Requests, SloWatch, point_stats
from harness.scoring.capacity.spread import Spread
from rich.console import Console
from adapters.base import Endpoint

if TYPE_CHECKING:  # transformers is slow to import: only where a tokenizer is loaded
    from transformers import PreTrainedTokenizerBase


@dataclass(frozen=True)
class LadderSpec:
    """How every engine's ladder is climbed: ``trial`` (warm-up, checks, how to measure),
    ``workload`` (the base options; ``seed`` the base seed), ``slos`` judged,
    ``max_failure_rate``, ``budget_s`` (s of measuring per engine), ``max_load``,
    ``max_points``, ``rounds`` (sessions per unit of load per point), ``min_requests`` (per
    point), ``turns_per_session`` (the base workload's, to size agentic points), ``devices`` (the
    run's default; each engine's own come from its launch, ``LaunchConfig.deployment_devices``),
    ``start_load`` (the first load: the client workers, each of which needs a session in flight),
    ``min_load`` (the main job's climb measures every doubling below it whatever ``budget_s``:
    ``--engine-config``, the recipe's ``climb_to``), ``fidelity_gate`` (no climb unless the
    session's output-fidelity check ran, covered the prompts and passed: a configuration of lower
    precision in the search, whatever ``--allow-unchecked``), ``allow_unchecked`` (the main job's
    ``--allow-unchecked``: an engine whose check could not run is not left out of the decisive
    repeats), ``bisect`` (a climb bisects the boundary it found; False: the main job's first
    climbs, whose bisections :mod:`harness.scoring.verdict.allocation` spends where they decide, and
    whose low end is measured briefly first: :attr:`harness.app.run.ladder.Ladder.brief`)."""

    trial: TrialSpec
    workload: WorkloadOptions
    slos: tuple[SLO, ...]
    max_failure_rate: float = 0.05
    budget_s: float = 120.0
    max_load: int = 64
    max_points: int = 7
    rounds: float = 3.0
    min_requests: int = 12
    turns_per_session: float = 1.0
    devices: int = 1
    start_load: int = 1
    min_load: int = 1
    fidelity_gate: bool = False
    allow_unchecked: bool = False
    bisect: bool = True  # a climb bisects its boundary (the main job leaves it to its allocation)
    bar: float = 0.0  # a climb-on stops once the engine's ceiling is below this (the leader's floor; Ladder.bar)
    spread: Spread | None = None  # the run's spread between measurements, as the allocation's judge read it (Ladder.spread)

    def point_options(self, load: int, seed: int, brief: bool = False) -> WorkloadOptions:
        """The workload of one measurement at ``load``: fresh prompts (``seed``), all due at
        once, enough requests for a steady state (module docstring); ``brief``: half as many
        (the low end's first measurement, :attr:`harness.app.run.ladder.Ladder.brief`)."""
        least = math.ceil(self.min_requests / 2) if brief else self.min_requests
        sessions = max((self.rounds / (2 if brief else 1)) * load, least / max(self.turns_per_session, 1.0))
        requests = max(least, math.ceil(sessions * self.turns_per_session))
        return measurement_options(self.workload, seed, requests)


def measurement_options(workload: WorkloadOptions, seed: int, requests: int) -> WorkloadOptions:
    """The workload one ladder measurement builds from the base ``workload``: its ``seed``,
    ``requests`` planned (agentic: turns), all due at once. What ``ladder.json`` stores of a
    measurement (``LadderPoint.seeds``, ``planned_requests``) rebuilds it exactly: the
    replay-fidelity certificate's sessions as built (:mod:`harness.app.run.replay_check`)."""
    return workload.model_copy(update={"seed": seed, "num_requests": requests, "request_rate": math.inf,
                                       "max_concurrency": None})


@dataclass
class PointMeasurement:
    """One measurement of one point, as it comes back from a trial: the point's ``index`` and
    ``load``, its ``seed`` and ``repeat``, the ``requests`` (arrays for the decision), the
    ``sessions`` it completed (agentic), its ``metrics``, ``wall_s`` and the ``resources`` the
    engine used meanwhile (None when not sampled); ``planned``: the requests its workload planned
    (:func:`measurement_options`)."""

    index: int
    load: int
    seed: int
    repeat: int
    requests: Requests
    sessions: int | None
    metrics: Metrics
    wall_s: float
    resources: ResourceUse | None = None
    startup_alone_s: float | None = None  # the engine's start before it, when started alone (a decisive re-climb)
    energy: EnergySample | None = None  # its energy, tokens and time windows (harness.metrics.energy)
    series: EngineSeries | None = None  # the engine's own /metrics over it (adapters.telemetry.engine_series)
    planned: int = 0  # requests its workload planned (measurement_options): with its seed, it rebuilds the workload


@dataclass
class LadderOutcome:
    """One engine's climb: its measurements in order, why the climb stopped (``stopped``,
    ``crash``, ``crashed_at``), and its session's facts."""

    measurements: list[PointMeasurement] = field(default_factory=list)
    stopped: str = ""
    crash: str = ""
    crashed_at: int | None = None
    startup_s: float = 0.0
    parallel: bool = False
    display_name: str = ""
    effective: Any = None
    equivalence: list[str] | None = None
    fidelity: FidelityResult | None = None
    accuracy: AccuracyResult | None = None
    feature_probes: dict[str, FeatureProbe] = field(default_factory=dict)
    peak_memory_bytes: float | None = None
    processes: int | None = None


class _Points:
    """Measures points on one live engine (``session``) for the ladder's ``measure`` callback."""

    def __init__(self, plan: EnginePlan, session: Session, sink: MeasurementSink, spec: LadderSpec, tokenizer: PreTrainedTokenizerBase,
                 indices: dict[int, int] | None = None) -> None:
        from workloads.tokens import as_kit

        self.plan, self.session, self.sink, self.spec, self.tokenizer = plan, session, sink, spec, tokenizer
        self.kit = as_kit(tokenizer)  # one for every point: it caches the word ids a build draws from
        self.indices = dict(indices or {})  # load -> point index (its records' probe)
        self.done: list[PointMeasurement] = []
        self.peak_memory: float | None = None
        self.processes: int | None = None
        self.stopped: dict[int, str] = {}  # load -> why its last measurement stopped early ("" = it did not)

    def ramp(self, load: int, seed: int) -> Metrics:
        """A fresh start's ramp: one whole pass of the point at ``load`` (as many requests as a
        measurement of it, the workload's own prompts: the engine's caches and pools grow to the
        contexts the measurement will reach), its records stored with phase :data:`RAMP_PHASE`,
        judged nowhere; returns its metrics for the console line. A brief pass (half the
        requests) left the first bracket point after it at 0.94 of its climb's throughput
        (benchmarks/ramp_bias.py, 2026-12-06)."""
        from workloads.registry import build_workload

        workload = build_workload(self.spec.point_options(load, seed), self.kit, with_stats=False)
        options = replace(self.spec.trial.measure, max_sessions=load, max_concurrency=None, stop_when=None)
        return measure(self.plan.name, self.session.endpoint, workload, 0, _RampSink(self.sink), tokenizer=self.tokenizer,
                       options=options).metrics

    def brief(self, load: int, seed: int, repeat: int) -> tuple[Requests, int | None]:
        """One measurement at ``load`` with half the requests (the ladder's brief low end)."""
        return self(load, seed, repeat, brief=True)

    def __call__(self, load: int, seed: int, repeat: int, brief: bool = False) -> tuple[Requests, int | None]:
        from workloads.registry import build_workload

        index = self.indices.setdefault(load, len(self.indices))
        point = self.spec.point_options(load, seed, brief)
        workload = build_workload(point, self.kit, with_stats=False)
        # the main job's climbs (no bisection) stop a point its SLOs already failed (SloWatch); repeats never
        watch = SloWatch(self.spec.slos, point.num_requests or 0) if not self.spec.bisect and repeat == 0 else None
        options = replace(self.spec.trial.measure, max_sessions=load, max_concurrency=None, stop_when=watch)
        t0 = time.monotonic()
        m = measure(self.plan.name, self.session.endpoint, workload, repeat, self.sink, tokenizer=self.tokenizer,
                    options=options, probe=index)
        if m.metrics.requests_failed and "connection" in m.metrics.failures_by_class and not answers(self.session.endpoint):
            raise EngineError(f"{self.plan.name} stopped answering during the point at {load} in flight "
                              f"({m.metrics.requests_failed} of its requests failed: connection refused)")
        self.stopped[load] = (f" (stopped after {len(m.records)} of {point.num_requests} requests: its SLO had "
                              "failed whatever the rest did)") if m.cut or (watch is not None and watch.fired) else ""
        requests = Requests.of(m.records, m.metrics.duration_s)
        sessions = _sessions_done(m.records, m.cut) if self.spec.workload.name == "agentic" else None
        used = with_output_tokens(m.resources, m.metrics.total_output_tokens) if m.resources is not None else None
        self.done.append(PointMeasurement(index, load, seed, repeat, requests, sessions, m.metrics, time.monotonic() - t0,
                                          used, energy=energy_sample(m), series=m.engine_series,
                                          planned=point.num_requests or 0))
        if m.resources is not None:
            self.peak_memory = max(self.peak_memory or 0.0, float(m.resources.peak_rss_bytes or 0.0))
            self.processes = max(self.processes or 0, int(m.resources.processes_max or 0)) or None
        return requests, sessions


def energy_sample(m: Any) -> EnergySample:
    """A measurement's (:class:`harness.app.trial.measure.Measurement`) energy, output tokens,
    duration and time windows, for its point's J per output token."""
    phase = m.resources.energy if m.resources is not None else None
    tokens = m.metrics.total_output_tokens
    return EnergySample(phase, tokens, m.metrics.duration_s, windows(phase, m.records, tokens))


class _RampSink:
    """A measurement sink storing copies of its records with phase :data:`RAMP_PHASE` (the
    runner's own keep theirs, so the ramp's metrics can be said)."""

    def __init__(self, sink: MeasurementSink) -> None:
        self.sink = sink

    def add_record(self, record: RequestRecord) -> None:
        self.sink.add_record(record.model_copy(update={"phase": RAMP_PHASE}))

    def __getattr__(self, name: str) -> Any:  # recounts, client workers, engine facts: as they are
        return getattr(self.sink, name)


def answers(endpoint: Endpoint, timeout_s: float = 5.0) -> bool:
    """Whether the endpoint still answers ``GET /v1/models`` (a server that crashed does not)."""
    import urllib.request

    headers = {"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(endpoint.base_url + "/v1/models", headers=headers),
                                    timeout=timeout_s):
            return True
    except OSError as exc:
        return getattr(exc, "code", None) is not None  # an HTTP error is an answer; a refused connection is not


def _sessions_done(records: Sequence[RequestRecord], cut: Sequence[RequestRecord] = ()) -> int:
    """Sessions whose every measured turn succeeded and none was ``cut`` (a point stopped early
    cancels turns in flight): an agentic point's completed sessions."""
    by: dict[str, bool] = {}
    for r in records:
        if r.phase == "measured":
            by[r.session_id or r.request_id] = by.get(r.session_id or r.request_id, True) and r.success
    for r in cut:
        by[r.session_id or r.request_id] = False
    return sum(by.values())


def climb_ladder(plan: EnginePlan, starter: EngineStarter, sink: MeasurementSink, console: Console, *, spec: LadderSpec,
                 tokenizer: PreTrainedTokenizerBase, manifest: Manifest) -> LadderOutcome:
    """Engine ``plan``'s climb (a trial body): a session (warm-up, the equivalence prompts),
    the ladder (:meth:`Ladder.climb`) within ``spec.budget_s``, then the feature probes."""
    out = LadderOutcome()
    try:
        with open_session(plan, starter, spec.trial, sink, console, tokenizer=tokenizer,
                          workload_name=spec.workload.name) as session:
            _climb(plan, session, sink, console, spec, tokenizer, manifest, out)
    except EngineError as exc:  # the engine died: a failure when it measured nothing, else its points stand
        if not out.measurements:
            raise
        out.stopped, out.crash = "crashed", out.crash or str(exc)
        out.crashed_at = out.crashed_at or max(m.load for m in out.measurements)
    except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM: the points measured so far go up with it
        out.stopped = "interrupted"
        exc.ladder_outcome = out  # type: ignore[attr-defined]
        raise
    return out


def refused(fidelity: FidelityResult | None) -> bool:
    """Whether a configuration gated by its fidelity check (``LadderSpec.fidelity_gate``) is
    refused before it is measured: no result, below the floor, or not checked (the check could
    not run, or answered fewer than 90 % of the prompts: :meth:`FidelityResult.unchecked`).
    ``--allow-unchecked`` does not apply: a configuration that lowers precision must pass."""
    return fidelity is None or fidelity.passed is not True or bool(fidelity.unchecked())


def _climb(plan: EnginePlan, session: Session, sink: MeasurementSink, console: Console, spec: LadderSpec, tokenizer: PreTrainedTokenizerBase,
           manifest: Manifest, out: LadderOutcome) -> None:
    """The ladder on the live engine of ``session``, filling ``out`` as it goes."""
    points = _Points(plan, session, sink, spec, tokenizer)
    out.startup_s, out.parallel, out.display_name = session.startup_s, session.parallel, session.endpoint.display_name
    out.effective, out.equivalence, out.measurements = session.effective, session.equivalence, points.done
    out.fidelity, out.accuracy = session.fidelity, session.accuracy
    if spec.fidelity_gate and refused(out.fidelity):
        out.stopped = "fidelity"  # below the floor, or not checked: its capacity would not count
        return
    ladder = Ladder(points, spec.slos, spec.max_failure_rate, seed=spec.workload.seed or 0, devices=plan.launch.deployment_devices,
                    max_load=spec.max_load, max_points=spec.max_points, budget_s=spec.budget_s, min_load=spec.min_load,
                    brief=None if spec.bisect else points.brief,  # the main job's first climbs: a brief low end
                    on_point=lambda rung: console.print(f"  {plan.name} {point_line(rung)}{points.stopped.get(rung.load, '')}",
                                                        markup=False, highlight=False))
    if spec.max_points <= 2:  # the main job's first climb of a production engine (ladder_run.LOW_END_POINTS)
        console.print(f"[bold]{plan.name}[/]: measuring the low end of its load ladder ({spec.max_points} points) …")
    else:
        console.print(f"[bold]{plan.name}[/]: climbing the load ladder (up to {spec.budget_s:.0f} s of measuring) …")
    ladder.climb(start=spec.start_load, bisect=spec.bisect)
    if ladder.crash:
        console.print(f"  [red]{plan.name}[/]: died at {ladder.crashed_at} in flight — {ladder.crash}", highlight=False)
    out.stopped, out.crash, out.crashed_at = ladder.stopped, ladder.crash, ladder.crashed_at
    out.peak_memory_bytes, out.processes = points.peak_memory, points.processes
    if spec.trial.feature_probes and ladder.stopped != "crashed":
        from harness.app.trial.feature_phase import probe_phase

        out.feature_probes = probe_phase(console, plan.name, session.endpoint,
                                         target_of(session.endpoint, spec.trial.measure.ignore_eos), tokenizer,
                                         manifest, spec.trial.measure.request_timeout_s)


def extend_ladder(plan: EnginePlan, starter: EngineStarter, sink: MeasurementSink, console: Console, *, spec: LadderSpec,
                  tokenizer: PreTrainedTokenizerBase, previous: Sequence[PointMeasurement]) -> LadderOutcome:
    """More of engine ``plan``'s climb (a trial body): its ladder rebuilt from ``previous`` (its
    measurements so far, judged again, not measured again), climbed on from twice its highest
    load (not past where the SLO must break when ``spec.bisect`` is off: the main job's climbs),
    then bisected when ``spec.bisect`` is on, within another ``spec.budget_s``; it stops early
    once the engine's ceiling is below ``spec.bar`` (out of the race, ``Ladder.bar``). ``measurements`` of the outcome are
    the new ones; ``stopped`` why this climb stopped; a crash keeps what it measured."""
    out = LadderOutcome(stopped="max_load")
    top = max(m.load for m in previous)
    if top >= spec.max_load:
        return out
    trial = replace(spec.trial, equivalence=False, read_effective=False)
    indices = {m.load: m.index for m in previous}
    try:
        with open_session(plan, starter, trial, sink, console, tokenizer=tokenizer, workload_name=spec.workload.name,
                          repeat=1) as session:
            points = _Points(plan, session, sink, spec, tokenizer, indices)
            out.measurements = points.done
            ladder = Ladder(points, spec.slos, spec.max_failure_rate, seed=spec.workload.seed or 0, devices=plan.launch.deployment_devices,
                            max_load=spec.max_load, max_points=len(indices) + spec.max_points, budget_s=spec.budget_s,
                            bar=spec.bar, spread=spec.spread, on_point=lambda rung: console.print(
                                f"  {plan.name} {point_line(rung)}{points.stopped.get(rung.load, '')}", markup=False,
                                highlight=False))
            ladder.resume([(m.load, m.seed, m.requests, m.sessions) for m in previous])
            ladder.climb(start=ladder.next_load(top, aim=not spec.bisect), bisect=spec.bisect)
            out.stopped, out.crash, out.crashed_at = ladder.stopped, ladder.crash, ladder.crashed_at
    except EngineError as exc:
        if not out.measurements:
            raise
        out.stopped, out.crash = "crashed", str(exc)
    except KeyboardInterrupt as exc:
        exc.ladder_measurements = out.measurements  # type: ignore[attr-defined]
        raise
    return out


def check_only(plan: EnginePlan, starter: EngineStarter, sink: MeasurementSink, console: Console, *, spec: LadderSpec,
               tokenizer: PreTrainedTokenizerBase) -> FidelityResult | None:
    """The output-fidelity check alone (a trial body): the engine's session opened with
    ``spec.trial``'s fidelity reference, nothing measured (the main job checks the engines
    still in the race after their first climbs: :mod:`harness.app.run.allocate`)."""
    trial = replace(spec.trial, equivalence=False, read_effective=False, accuracy=())
    with open_session(plan, starter, trial, sink, console, tokenizer=tokenizer, workload_name=spec.workload.name) as session:
        return session.fidelity


def measure_points(plan: EnginePlan, starter: EngineStarter, sink: MeasurementSink, console: Console, *, spec: LadderSpec,
                   tokenizer: PreTrainedTokenizerBase, points: Sequence[tuple[int, int, int, int]],
                   ramp: tuple[int, int] | None = None) -> list[PointMeasurement]:
    """More measurements of given points (a trial body): ``points`` = (index, load, seed,
    repeat) each; the engine's session is opened without a warm-up when it was kept from its
    climb; ``ramp`` = (load, seed): a pass at that load first, stored, not judged
    (:meth:`_Points.ramp`)."""
    trial = replace(spec.trial, equivalence=False, read_effective=False)
    done: list[PointMeasurement] = []
    try:
        with open_session(plan, starter, trial, sink, console, tokenizer=tokenizer, workload_name=spec.workload.name,
                          repeat=1) as session:
            if ramp is not None:
                t0, got = time.monotonic(), _Points(plan, session, sink, spec, tokenizer).ramp(*ramp)
                console.print(f"  {plan.name} ramp at {ramp[0]} in flight: {got.output_throughput:,.1f} tok/s in "
                              f"{time.monotonic() - t0:.0f} s (the workload's prompts after the fresh start; stored, not "
                              "judged)", markup=False, highlight=False)
            _again(plan, session, sink, console, spec, tokenizer, points, done)
            if not session.parallel:  # a start alone: the tie-breaker's start-up time (no other engine starting)
                for m in done:
                    m.startup_alone_s = session.startup_s
    except KeyboardInterrupt as exc:  # the measurements finished before it go up with it
        exc.ladder_measurements = done  # type: ignore[attr-defined]
        raise
    return done


def _again(plan: EnginePlan, session: Session, sink: MeasurementSink, console: Console, spec: LadderSpec, tokenizer: PreTrainedTokenizerBase,
           points: Sequence[tuple[int, int, int, int]], done: list[PointMeasurement]) -> None:
    """More measurements of ``points`` on the live engine of ``session``, appended to ``done``."""
    measurer = _Points(plan, session, sink, spec, tokenizer, {load: index for index, load, _, _ in points})
    measurer.done = done
    for _, load, seed, repeat in points:
        measurer(load, seed, repeat)
        m = done[-1]
        own = point_stats(float(load), m.requests, spec.slos, spec.max_failure_rate, plan.launch.deployment_devices,
                          m.sessions)
        console.print(f"  {plan.name} {stats_line(load, own)} (measurement {repeat + 1}, judged alone)", markup=False,
                      highlight=False)


def point_line(rung: Rung) -> str:
    """``load 8: 182 tok/s, 21 tok/s/user, TTFT p90 812 ms, TPOT p90 45 ms ✓`` for the console
    (pooled over its measurements, said after it when more than one)."""
    if rung.stats is None:
        return f"load {rung.load}: not measured"
    reps = f" ({len(rung.measurements)} measurements pooled)" if len(rung.measurements) > 1 else ""
    return stats_line(rung.load, rung.stats) + reps


def stats_line(load: int, s: PointStats) -> str:
    """``load 8: 182 tok/s, 21 tok/s/user, TTFT p90 812 ms, TPOT p90 45 ms ✓``: one point's
    figures and its SLO verdict."""
    values = ", ".join(f"{k.replace('_p', ' p').upper().replace(' P', ' p')} " + f"{metric_figure(k, v)} ms"
                       for k, v in s.values.items() if not math.isnan(v))
    user = f", {s.per_user_tps:,.1f} tok/s/user" if s.per_user_tps else ""
    errors = f", {s.failure_rate:.0%} failed" if s.failure_rate else ""
    mark = "✓" if s.passed else "✗"
    return f"load {load}: {s.output_tps:,.1f} tok/s{user}, {values}{errors} {mark}"
