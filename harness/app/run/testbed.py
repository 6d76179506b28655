"""The decision test bed's driver: scripted engines (:mod:`harness.loadgen.simulated`) climbed
with the main job's ladder and judged by its verdict, on a simulated clock. Used by
``tests/test_decision_bed.py`` (the thresholds) and ``benchmarks/decision_bed.py`` (the table)."""

from __future__ import annotations

import dataclasses
from typing import Sequence

from adapters.base import EngineError
from harness.loadgen.simulated import SimEngine, simulate
from harness.metrics import SLO
from harness.scoring.verdict.allocation import Ladders, next_steps
from harness.scoring.capacity.frontier import Requests, SloWatch, engine_stream
from harness.scoring.capacity.race import standings
from harness.scoring.capacity.spread import NO_SPREAD, groups_of, spread_of
from harness.scoring.verdict.tuning import Rejected, Tried, successive_halving
from harness.scoring.verdict.verdict import Candidate, Verdict, decide

from .ladder import CLIMBS_ON, Ladder
from .ladder_run import LOW_END_POINTS


def faster(engine: SimEngine, name: str, factor: float) -> SimEngine:
    """``engine`` with every time divided by ``factor``: its capacity is ``factor`` times as high."""
    return dataclasses.replace(engine, name=name, prefill_ms=engine.prefill_ms / factor, tpot_ms=engine.tpot_ms / factor)


def _measure(engine: SimEngine, trial: int, output_tokens: int, steady: bool = True,
             clock: list[float] | None = None, watch: Sequence[SLO] = (), brief: bool = False):  # noqa: ANN202
    """A Ladder's measure callback on ``engine``: at least 16 requests, 4 per unit of load
    (``brief``: half as many, the main job's brief low end). ``watch``: the SLOs of the main
    job's climbs, whose first measurement of a point stops once they have failed whatever its
    remaining requests do (:class:`~harness.scoring.capacity.frontier.SloWatch`: the requests in flight
    then are cut, and the clock stops at that completion)."""
    def measure(load: int, seed: int, repeat: int) -> tuple[Requests, int | None]:
        if engine.crash_at is not None and load >= engine.crash_at:
            raise EngineError(f"{engine.name}: the server exited unexpectedly (code -9)")
        n = max(16, 4 * load) // (2 if brief else 1)
        records, duration = simulate(engine, load, n, output_tokens, seed=trial * 100_003 + seed)
        if watch and repeat == 0:
            slo_watch = SloWatch(watch, n)
            stop = next((r.end_ns for r in sorted(records, key=lambda r: r.end_ns) if slo_watch(r)), None)
            if stop is not None:
                records, duration = [r for r in records if r.end_ns <= stop], stop / 1e9
        if clock is not None:
            clock[0] += duration
        return Requests.of(records, duration, steady=steady), None
    return measure


def climb(engine: SimEngine, trial: int, slos: Sequence[SLO], output_tokens: int, repeats: int = 2, *,
          max_points: int = 8, max_load: int = 64, steady: bool = True, clock: list[float] | None = None) -> Ladder:
    """``engine``'s ladder as the main job climbs it: at least 16 requests per point and 4 per unit
    of load, then ``repeats`` more measurements of the two points bracketing the boundary. An
    engine with ``crash_at`` dies (EngineError) at that load and stays dead. The simulation's
    seed is ``trial``'s alone: two engines climbed in one trial see the same noise, in the same
    order (identical completion order). ``max_points``/``max_load`` cut the ladder (an open
    capacity); ``steady=False`` judges whole measurements (the rule before steady-state windows);
    ``clock[0]`` (given) is advanced by each measurement's simulated duration (s)."""
    ladder = Ladder(_measure(engine, trial, output_tokens, steady, clock), slos, max_points=max_points, max_load=max_load)
    ladder.climb()
    ladder.repeat_boundary(repeats)
    return ladder


def candidate(engine: SimEngine, trial: int, slos: Sequence[SLO], output_tokens: int, *, max_points: int = 8,
              max_load: int = 64, excluded: str = "", clock: list[float] | None = None,
              widen: bool = True) -> Candidate:
    """The engine as the verdict sees it after its climb in ``trial``, with its tie-breakers; its
    bootstrap draws from its own stream (:func:`harness.scoring.capacity.frontier.engine_stream`), as the
    main job's do, widened by the spread between its own repeated measurements (``widen=False``:
    not); ``excluded``: a gate's line decided elsewhere."""
    ladder = climb(engine, trial, slos, output_tokens, max_points=max_points, max_load=max_load, clock=clock)
    cap = ladder.capacity(seed=engine_stream(trial, engine.name), spread=None if widen else NO_SPREAD)
    return Candidate(engine.name, cap, excluded=excluded,
                     startup_s=engine.startup_s, processes=engine.processes, peak_memory_bytes=engine.peak_memory_bytes)


def tune(configs: Sequence[SimEngine], budget_s: float, slos: Sequence[SLO], output_tokens: int, trial: int,
         refuses: Sequence[str] = ()) -> tuple[list[Tried], int, list[int]]:
    """``bench run --tune``'s search over scripted configurations of one engine (each a
    :class:`SimEngine`), on a simulated clock that each measurement advances by its simulated
    duration: rung 0 climbs a configuration's ladder within its share of ``budget_s``, later
    rungs climb on (no SLO broke yet) or re-measure the boundary, as the real search does. A
    configuration named in ``refuses`` raises :class:`Rejected` (the engine refused its knob).
    Returns every configuration's course, the chosen index, and how often each was evaluated."""
    clock = [0.0]
    ladders: dict[int, Ladder] = {}
    calls = [0] * len(configs)

    def evaluate(i: int, rung: int, seconds: float) -> tuple[float, float]:
        calls[i] += 1
        engine = configs[i]
        if engine.name in refuses:
            raise Rejected(f"{engine.name}: the engine refused --slots {engine.slots}")
        start = clock[0]

        def measure(load: int, seed: int, repeat: int) -> tuple[Requests, int | None]:
            records, duration = simulate(engine, load, max(16, 4 * load), output_tokens,
                                         seed=trial * 100_003 + i * 7_919 + seed)
            clock[0] += duration
            return Requests.of(records, duration), None

        if rung == 0:
            ladders[i] = Ladder(measure, slos, budget_s=seconds, clock=lambda: clock[0], seed=trial)
            ladders[i].climb()
        else:
            ladder = ladders[i]
            ladder.rebudget(seconds)
            cap = ladder.capacity(resamples=0)
            if cap is not None and cap.open and ladder.stopped in CLIMBS_ON:
                ladder.max_points += len(ladder.rungs)
                ladder.climb(start=2 * max(r.load for r in ladder.rungs))
            else:
                ladder.repeat_boundary(1)
        cap = ladders[i].capacity(resamples=0)
        return (cap.output_tps if cap is not None else 0.0), clock[0] - start

    tried, best = successive_halving([{"slots": str(e.slots)} for e in configs], budget_s, evaluate)
    return tried, best, calls


def race(engines: Sequence[SimEngine], trials: Sequence[int], slos: Sequence[SLO], output_tokens: int, *,
         max_load: int = 64, max_repeats: int = 3, clock: list[float] | None = None, widen: bool = True,
         prior: Sequence[Sequence[tuple[float, float]]] = ()) -> tuple[Verdict, dict[str, Ladder]]:
    """The main job's allocation on scripted engines (:mod:`harness.scoring.verdict.allocation`, the rule
    ``bench run`` follows): each engine's low end first (:data:`LOW_END_POINTS` points, the first
    brief, a failed one measured again in full), then the steps the rule asks for (climb on,
    bisect, repeat the bracket points) until it asks for none; the climbs' points stop once their
    SLO has failed (:class:`~harness.scoring.capacity.frontier.SloWatch`), as bench run's do. ``trials``:
    each engine's simulation seed (as :func:`candidate`'s); ``clock[0]`` (given) adds up the
    simulated measuring time (s); ``widen=False`` judges without
    the spread between measurements (the rule before it); ``prior``: the groups earlier runs on
    the same machine measured (:class:`results.schema.SpreadPrior`; from
    :data:`~harness.scoring.verdict.allocation.SETTLED_DF` degrees of freedom the leader is not
    repeated once separated). Returns the verdict and the ladders."""
    watching = list(slos)  # the climbs' points stop once failed (SloWatch); emptied while bisecting, as bench run's
    ladders = {e.name: Ladder(_measure(e, t, output_tokens, clock=clock, watch=watching), slos, max_points=LOW_END_POINTS,
                              max_load=max_load, brief=_measure(e, t, output_tokens, clock=clock, watch=watching, brief=True))
               for e, t in zip(engines, trials)}
    seeds = {e.name: engine_stream(t, e.name) for e, t in zip(engines, trials)}
    for ladder in ladders.values():
        ladder.climb(bisect=False)
    climbs = {n: 0 for n in ladders}
    repeats = {n: 0 for n in ladders}
    while True:
        verdict, caps, spread = _judged(ladders, seeds, widen, prior)
        info = Ladders(gap={n: _gap(c) for n, c in caps.items()}, passing={n: c.bracket[0] or 0 for n, c in caps.items()},
                       climbable={n: ladders[n].stopped in CLIMBS_ON and c.open for n, c in caps.items()},
                       climbs=climbs, repeats=repeats)
        steps = next_steps(standings(caps, max_load), verdict, info, max_repeats=max_repeats, spread_df=spread.df)
        if not steps:
            return verdict, ladders
        for step in steps:
            ladder = ladders[step.engine]
            if step.action == "climb":
                climbs[step.engine] += 1
                ladder.max_points += 8
                race = standings(caps, max_load)  # an engine other than the leader stops below the leader's floor
                ladder.bar = race[0].floor if race and race[0].name != step.engine else 0.0
                ladder.spread = spread  # the judge's, for the climb's stop rule
                ladder.climb(start=ladder.next_load(max(r.load for r in ladder.rungs), aim=True), bisect=False)
                ladder.bar = 0.0
            elif step.action == "bisect":
                ladder.max_points += 1
                watching.clear()
                bisected = ladder.bisect_once()
                watching.extend(slos)
                if not bisected:
                    return verdict, ladders
            else:
                repeats[step.engine] += 1
                ladder.repeat_boundary(1)


def _judged(ladders: dict[str, Ladder], seeds: dict[str, int], widen: bool = True,  # noqa: ANN202
            prior: Sequence[Sequence[tuple[float, float]]] = ()):
    """(verdict, capacities, spread) over the ladders measured so far (the engines that measured any
    point), each interval widened by the spread between measurements over every ladder, as bench
    run's (``widen=False``: not widened, the rule before it), pooled with ``prior`` (earlier runs' groups)."""
    spread = (spread_of([[r.sample(1).repeats for r in ladder.rungs] for ladder in ladders.values()], prior) if widen
              else NO_SPREAD)
    caps = {n: c for n, ladder in ladders.items()
            if (c := ladder.capacity(resamples=300, seed=seeds[n], spread=spread)) is not None
            and not c.never_met and ladder.stopped != "crashed"}
    return decide([Candidate(n, c) for n, c in caps.items()]), caps, spread


def history(engine: SimEngine, runs: Sequence[int], slos: Sequence[SLO], output_tokens: int) -> list[list[tuple[float, float]]]:
    """What earlier runs on the same machine leave a run (:mod:`harness.app.run.spread_history`):
    ``engine`` climbed once per seed of ``runs``, its bracket points measured twice (a leader's
    fresh-start repeat), and the groups of those pairs."""
    out: list[list[tuple[float, float]]] = []
    for run in runs:
        ladder = climb(engine, run, slos, output_tokens, repeats=1)
        out.extend(groups_of([[r.sample(1).repeats for r in ladder.rungs]]))
    return out


def _gap(cap) -> float:  # noqa: ANN001
    p, f = cap.bracket
    return float(f - p) if p is not None and f is not None else 0.0
