"""An engine's load ladder: which concurrencies to measure, and when to stop.

The field's method (InferenceX concurrency sweeps, Artificial Analysis's ramp until throughput
stops rising, vLLM's ``bench sweep serve_sla`` bisection): closed-loop concurrency (requests in
flight; agentic: sessions in flight) from 1, **doubling** until a point fails (an SLO broken at
its percentile, or failures above the bound), the throughput stops rising (two doublings in a
row add less than :data:`PLATEAU` over the point before them: the engine is saturated, more
load only queues; one doubling is not enough to say so, a single noisy point would stop it), the
highest load allowed is reached, the budget is spent, or the engine dies (an
:class:`~adapters.base.EngineError`: the points measured before are kept, ``crash`` says why); then the SLO boundary is **bisected**
between the last passing and the first failing concurrency (integers) while a point between
them is left and the budget allows. Every measurement draws fresh prompts (its own seed), so no
point is served from another's prefix cache (vLLM issue 52884: looping over concurrency points
against one server inflated throughput by up to 86 %).

:class:`Ladder` drives a ``measure(load, seed, repeat)`` callback — the one measurement step on
a live engine, or a simulated engine in the decision test bed — and judges each point with
:func:`harness.scoring.capacity.frontier.point_stats`; :meth:`Ladder.repeat_boundary` re-measures the
two points that bracket the boundary (the decisive ones) for the interval.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable, Literal, Sequence

from adapters.base import EngineError
from harness.metrics import SLO
from harness.scoring.capacity.frontier import Capacity, PointSample, PointStats, Requests, capacity_of, point_stats
from harness.scoring.capacity.race import ceiling, reach_of
from harness.scoring.capacity.samples import errors_undecided
from harness.scoring.capacity.spread import Spread, spread_of

PLATEAU = 0.05  # two doublings that together add less than 5 % throughput: saturated
MIN_POINTS = 3  # points every climb measures whatever the budget (1, 2, 4: enough to see a saturation)
MAX_LOAD = 64  # concurrency ladders stop here unless told otherwise
ERROR_EXTRA = 2  # measurements a point whose failures leave the error bound undecided gets at most

Stopped = Literal["slo", "saturated", "max_load", "budget", "max_points", "crashed", "race", ""]
CLIMBS_ON: tuple[Stopped, ...] = ("budget", "max_points", "race")
"""Where an open ladder stopped that a later climb may go on from: its budget, its points, or its
race bar (:attr:`Ladder.bar`) when the judge between steps (:mod:`harness.app.run.allocate`, with
its bootstrap interval) still counts it in the race."""
BAR_RESAMPLES = 300  # bootstrap draws of the bar's check: the allocation's judge's (allocate.RESAMPLES)

Measure = Callable[[int, int, int], tuple[Requests, int | None]]
"""``measure(load, seed, repeat) -> (requests, sessions completed or None)``."""


def saturated(throughputs: Sequence[float]) -> bool:
    """Whether the last two doublings (the last three passing points' throughputs, in load
    order) added less than :data:`PLATEAU` over the point before them."""
    if len(throughputs) < 3:
        return False
    return max(throughputs[-2:]) < (1 + PLATEAU) * throughputs[-3]


@dataclass
class Rung:
    """One measured point: its ``load``, ``seeds`` and measurements (one per repeat) and its
    verdict over all of them (``stats``)."""

    index: int
    load: int
    seeds: list[int] = field(default_factory=list)
    measurements: list[Requests] = field(default_factory=list)
    sessions: list[int] | None = None
    stats: PointStats | None = None

    def sample(self, devices: int) -> PointSample:
        return PointSample(float(self.load), tuple(self.measurements), devices,
                           tuple(self.sessions) if self.sessions is not None else None)


@dataclass
class Ladder:
    """One engine's ladder (module docstring). ``seed``: the base seed (measurement ``m`` of
    this engine draws ``seed + m``: fresh prompts each time, and the same prompts for the same
    measurement on every engine); ``budget_s`` bounds the measuring by ``clock``: no point
    starts once it is spent (the one running may end past it), except the first
    :data:`MIN_POINTS`, which every climb measures unless an SLO breaks first, and any load
    below ``min_load`` (a recipe's re-run climbs at least to where its capacity was read,
    ``Recipe.climb_to``, so both capacities are read at the same loads). ``brief`` (the main
    job's first climbs) measures the lowest point first with fewer requests: the low end (the
    frontier's first point, the lowest-load gate) is far from most boundaries; a low end that
    fails is measured again in full and judged over both, so no gate rests on a brief one.
    ``bar`` (the main job's climbs of an engine other than the leader): the leader's floor; the
    climb stops as soon as this engine's ceiling (:func:`harness.scoring.capacity.race.ceiling`) is below
    it (``stopped`` = "race": it cannot win, :mod:`harness.scoring.verdict.allocation`)."""

    measure: Measure
    slos: Sequence[SLO]
    max_failure_rate: float = 0.05
    seed: int = 0
    devices: int = 1
    max_load: int = MAX_LOAD
    max_points: int = 8
    budget_s: float = float("inf")
    min_load: int = 1
    clock: Callable[[], float] = time.monotonic
    on_point: Callable[[Rung], None] | None = None  # told of each measurement as it is judged (progress)
    brief: Measure | None = None  # the low end's first measurement, brief (:meth:`point`); None: in full
    bar: float = 0.0  # the leader's floor (tok/s per device): a climb stops once its ceiling is below it ("race")
    spread: Spread | None = None  # the run's spread between measurements the bar's judge reads (None: this ladder's own)
    rungs: list[Rung] = field(default_factory=list)
    stopped: Stopped = ""
    crash: str = ""  # what the engine said when it died mid-ladder ("" = it did not)
    crashed_at: int | None = None  # the load it died at
    _measurements: int = 0
    _t0: float | None = None

    # -- measuring ---------------------------------------------------------------------------
    def _affordable(self) -> bool:
        """A point starts while the budget is not spent (it may end past it: by one point at most)."""
        if self._t0 is None:
            self._t0 = self.clock()
            return True
        return self.clock() - self._t0 < self.budget_s

    def _measure(self, rung: Rung, brief: bool = False) -> None:
        """One more measurement of ``rung`` (fresh seed; ``brief``: by :attr:`brief`), then its
        verdict over all of them."""
        seed = self.seed + self._measurements
        req, sessions = (self.brief if brief and self.brief is not None else self.measure)(
            rung.load, seed, len(rung.measurements))
        self._add(rung, seed, req, sessions)

    def resume(self, measured: Sequence[tuple[int, int, Requests, int | None]]) -> None:
        """Take the measurements of an earlier climb, ``(load, seed, requests, sessions)`` each, as
        this ladder's points (judged, not measured again), so :meth:`climb` goes on from them."""
        for load, seed, req, sessions in measured:
            rung = next((r for r in self.rungs if r.load == load), None)
            if rung is None:
                rung = Rung(index=len(self.rungs), load=load)
                self.rungs.append(rung)
            self._add(rung, seed, req, sessions, announce=False)

    def _add(self, rung: Rung, seed: int, req: Requests, sessions: int | None, announce: bool = True) -> None:
        """One measurement added to ``rung``, then its verdict over all of them."""
        self._measurements += 1
        rung.seeds.append(seed)
        rung.measurements.append(req)
        if sessions is not None:
            rung.sessions = (rung.sessions or []) + [sessions]
        pooled = rung.sample(self.devices)
        rung.stats = point_stats(float(rung.load), pooled.pooled(), self.slos, self.max_failure_rate, self.devices,
                                 sum(rung.sessions) if rung.sessions is not None else None)
        if self.on_point is not None and announce:
            self.on_point(rung)

    def rebudget(self, budget_s: float) -> None:
        """Another ``budget_s`` of measuring, counted from the next point (a later rung of the
        configuration search, :mod:`harness.scoring.verdict.tuning`)."""
        self.budget_s, self._t0 = budget_s, None

    def point(self, load: int) -> Rung | None:
        """Measure a new point at ``load``; None (and ``stopped`` set) when the budget or the
        point count forbids it, or the engine died measuring it (``crash``)."""
        if len(self.rungs) >= self.max_points:
            self.stopped = "max_points"
            return None
        reached = any(r.load >= self.min_load for r in self.rungs)
        if not self._affordable() and len(self.rungs) >= MIN_POINTS and reached:
            self.stopped = "budget"
            return None
        rung = Rung(index=len(self.rungs), load=load)
        low_end = not self.rungs and self.brief is not None
        if not self._guarded(rung, brief=low_end):
            return None
        self.rungs.append(rung)
        if low_end and rung.stats is not None and not rung.stats.passed and not self._guarded(rung):
            return None  # a brief low end that failed: measured in full before anything rests on it
        self._sized_for_errors(rung)
        return rung

    def _sized_for_errors(self, rung: Rung) -> None:
        """Points sized for the error bound: while some of ``rung``'s requests failed but too few
        to tell a fluke from an engine failing above the bound
        (:func:`harness.scoring.capacity.samples.errors_undecided`), measure it again, :data:`ERROR_EXTRA`
        times at most and while the budget allows (at 12 requests a point, one failure leaves
        the bound undecided; pooled with more, a 1 % engine clears it and a 20 % one trips it)."""
        for _ in range(ERROR_EXTRA):
            pooled = rung.sample(self.devices).pooled()
            failed = int((~pooled.ok).sum())
            if not errors_undecided(failed, pooled.n, self.max_failure_rate) or not self._affordable():
                return
            if not self._guarded(rung):
                return

    def _guarded(self, rung: Rung, brief: bool = False) -> bool:
        """Measure ``rung`` once more (``brief``: by :attr:`brief`); False (``stopped`` =
        "crashed", the points before kept) when the engine died meanwhile (an :class:`EngineError`)."""
        try:
            self._measure(rung, brief)
        except EngineError as exc:
            self.stopped, self.crash, self.crashed_at = "crashed", str(exc), rung.load
            return False
        return True

    # -- the climb -----------------------------------------------------------------------------
    def next_load(self, load: int, aim: bool) -> int:
        """The load after ``load``: twice it; with ``aim``, no further than the load by which the
        SLO must have broken if the margin is convex in the load
        (:func:`harness.scoring.capacity.race.reach_of`: a failing point near the boundary is cheaper and
        brackets it tighter than one at twice the load)."""
        nxt = min(load * 2, self.max_load)
        if aim:
            passed = sorted((r.stats for r in self.rungs if r.stats is not None and r.stats.passed), key=lambda s: s.load)
            reach = reach_of(passed)
            if math.isfinite(reach):
                nxt = min(nxt, max(load + 1, math.ceil(reach - 1e-9)))
        return nxt

    def climb(self, start: int = 1, bisect: bool = True) -> Stopped:
        """Double from ``start`` until a point fails or the engine saturates, then bisect the
        boundary (``bisect``; the main job leaves it to its allocation,
        :mod:`harness.scoring.verdict.allocation`); returns why the climb stopped (also in ``stopped``)."""
        load, passed = start, []
        while True:
            rung = self.point(load)
            if rung is None:
                return self.stopped
            assert rung.stats is not None
            if not rung.stats.passed:
                self.stopped = "slo"
                break
            passed.append(rung.stats.output_tps)
            if self.bar > 0 and self._below_bar():
                self.stopped = "race"  # it cannot reach the leader whatever its next points do
                return self.stopped
            if saturated(passed):
                self.stopped = "saturated"
                return self.stopped
            if load >= self.max_load:
                self.stopped = "max_load"
                return self.stopped
            load = self.next_load(load, aim=not bisect)
        if bisect:
            self._bisect()
        return self.stopped

    def _below_bar(self) -> bool:
        """Whether this engine's ceiling is below :attr:`bar`, as the allocation's judge reads it
        (its interval's upper end counts: :func:`harness.scoring.capacity.race.ceiling`); the point
        estimate's ceiling, never above that one, is read first and settles most cases."""
        cap = self.capacity(resamples=0)
        if cap is None or ceiling(cap, self.max_load) >= self.bar:
            return False
        cap = self.capacity(resamples=BAR_RESAMPLES, spread=self.spread)
        return cap is not None and ceiling(cap, self.max_load) < self.bar

    def bracket(self) -> tuple[Rung | None, Rung | None]:
        """(highest passing point below the first failing one, first failing point)."""
        ordered = sorted(self.rungs, key=lambda r: r.load)
        fail = next((r for r in ordered if r.stats is not None and not r.stats.passed), None)
        below = [r for r in ordered if fail is None or r.load < fail.load]
        return (below[-1] if below else None), fail

    def _bisect(self) -> None:
        while self.bisect_once():
            pass

    def bisect_once(self) -> bool:
        """Measure the point halfway between the bracket's loads; False when there is none (no
        bracket, or its loads are adjacent) or it could not be measured."""
        p, f = self.bracket()
        if p is None or f is None or f.load - p.load <= 1:
            return False
        return self.point((p.load + f.load) // 2) is not None

    def repeat_boundary(self, times: int = 1) -> int:
        """Measure the two points bracketing the boundary ``times`` more times each (fresh
        prompts; within the budget); returns how many measurements were added."""
        added = 0
        p, f = self.bracket()
        for _ in range(times):
            for rung in (p, f):
                if self.stopped == "crashed" or rung is None or not self._affordable():
                    continue
                if self._guarded(rung):
                    added += 1
        return added

    # -- the result ------------------------------------------------------------------------------
    def capacity(self, *, resamples: int = 600, seed: int = 0, spread: Spread | None = None) -> Capacity | None:
        """The capacity at the SLO over the points measured (None before any); a ladder that
        stopped because the engine saturated has found its capacity (not a lower bound).
        ``spread``: the spread between measurements its interval holds (None: this ladder's own,
        from its points measured more than once; :mod:`harness.scoring.capacity.spread`)."""
        if not self.rungs:
            return None
        points = [r.sample(self.devices) for r in self.rungs]
        if spread is None:
            spread = spread_of([[p.repeats for p in points]])
        cap = capacity_of(points, self.slos, self.max_failure_rate, resamples=resamples, seed=seed, spread=spread)
        if self.stopped == "saturated":
            cap.open = False
        return cap
