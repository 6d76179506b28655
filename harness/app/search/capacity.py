"""Capacity search under SLOs: the highest offered load at which every SLO still holds.

Independent of engines: the caller passes ``measure(load) -> LoadProbe``, which runs one
probe point (one measured condition) at offered load ``load`` and judges it (usually with
:func:`probe_result` over the probe's :class:`results.schema.Metrics`). The load variable is
the caller's: requests/s, session starts/s (agentic) or a concurrency cap.

The method (the shape of vLLM's ``vllm bench sweep serve_sla``, which tunes ``request_rate``
or ``max_concurrency`` until SLA constraints such as ``p99_e2el_ms <= 500`` just hold, and of
AIPerf's search for the highest goodput under SLOs; goodput as in DistServe, Zhong et al. 2024):

1. probe ``low``; if it fails, the capacity is 0 ("never meets the SLO at the lowest load");
2. bracket: double the load until a probe fails (at most up to ``high``; if ``high`` itself
   passes, the capacity is at least ``high``: stopped ``"high_reached"``);
3. bisect between the last passing load ``p`` and the first failing load ``f`` (midpoint)
   until ``(f - p) / p <= tolerance``; the true threshold lies in ``[p, f)``, if pass/fail is
   monotonic in the load (bisection assumes it; a noisy probe can mislead it like any
   bisection), and the capacity is read inside it where the SLO margin crosses 1
   (:func:`probe_capacity`: the decision core's estimator, the one ``bench run``'s ladder uses;
   ``p`` when the probes carry no margin or ``f`` failed by errors or saturation).

A probe *passes* only when it meets every SLO and is not saturated: a saturated probe (the
achieved arrival rate fell short of the offered one beyond the validity band) counts as a
fail, since the load it was labelled with was never offered.

With ``integer=True`` (a concurrency search) every probe load is rounded to an integer, the
midpoint is ``floor((p + f) / 2)``, and the search has also converged when ``f - p <= 1``
(no integer lies between): the capacity is then exact.

Budget: before each probe the search reads ``clock()`` (seconds) and does not start a probe
that cannot finish within ``budget_s`` of the search's start. A probe is assumed to take as
long as the previous one (``first_estimate_s`` for the first, else 0: the first probe always
starts while any budget is left). Probes are never interrupted; ``elapsed_s`` stays within
the budget as long as each probe takes no longer than the one before it.
"""

from __future__ import annotations

import math
import time
from typing import Callable, Literal, Sequence

from pydantic import Field

from harness.metrics import SLO
from harness.metrics.failures import MAX_FAILURE_RATE, failure_text
from harness.scoring.capacity.frontier import Capacity, PointStats, capacity_from, point_stats, slo_holds
from harness.scoring.capacity.samples import Requests, pool, too_many_failures
from results.schema import Artefact, LoadProbe, Metrics

DOWN_FACTOR = 16.0  # a search whose first load fails halves it down to low / 16 (integer: down to 1)

StopReason = Literal["converged", "budget", "max_probes", "never_met", "high_reached"]


class CapacityResult(Artefact):
    """The outcome of :func:`search_capacity` (stored as JSON in the run folder).

    ``capacity``: the load where the SLO margin crosses 1 inside the bracket (the caller's
    unit; :func:`probe_capacity`), the highest passing load when no failing one was found, 0.0
    when none passed;
    ``stopped``: why the search ended (``converged``, ``budget``, ``max_probes``,
    ``never_met``, ``high_reached``); ``bracket``: (highest passing load, lowest failing
    load above it), either None when not found; ``probes``: every probe in the order run;
    ``message``: one sentence for the console and report; ``elapsed_s``: the search's wall
    time (s) by its clock. The search parameters are kept as given.
    """

    capacity: float
    stopped: StopReason
    bracket: tuple[float | None, float | None]
    probes: list[LoadProbe] = Field(default_factory=list)
    message: str = ""
    elapsed_s: float = 0.0
    low: float
    high: float | None = None
    tolerance: float
    budget_s: float
    max_probes: int
    integer: bool = False
    unit: str = ""


def _num(x: float) -> str:
    """A capacity read between two loads: 3 significant digits (``4.43``, ``12.7``)."""
    return f"{x:.3g}"


def _fmt(x: float | None) -> str:
    return "none" if x is None else f"{x:g}"


def search_capacity(
    measure: Callable[[float], LoadProbe],
    *,
    low: float,
    high: float | None,
    tolerance: float = 0.05,
    budget_s: float,
    clock: Callable[[], float] = time.monotonic,
    max_probes: int = 12,
    integer: bool = False,
    first_estimate_s: float | None = None,
    unit: str = "",
) -> CapacityResult:
    """Find the highest load at which ``measure(load)`` passes (see the module docstring).

    ``low`` (> 0; >= 1 when ``integer``): the first load probed (when it fails, the load is
    halved until a probe passes, down to ``low / 16``, or 1 for integers: then ``never_met``); ``high``: the highest load
    ever probed (None = unbounded doubling); ``tolerance``: relative width of the final
    bracket, ``(fail - pass) / pass`` (0.05 = 5 %); ``budget_s``: seconds the whole search
    may take by ``clock``; ``max_probes``: probes at most; ``integer``: round loads to
    integers (concurrency search); ``first_estimate_s``: expected duration of the first probe
    (s), for the budget check; ``unit``: the load's unit, for the message (``"req/s"``).

    ``measure`` must not raise for a failing engine: it returns a failing LoadProbe (an
    exception propagates and ends the search). Raises ValueError for bad parameters.
    """
    _check(low, high, tolerance, budget_s, max_probes, integer)
    return _Search(measure, low=low, high=high, tolerance=tolerance, budget_s=budget_s, clock=clock,
                   max_probes=max_probes, integer=integer, first_estimate_s=first_estimate_s, unit=unit).run()


def _check(low: float, high: float | None, tolerance: float, budget_s: float, max_probes: int, integer: bool) -> None:
    """Raise ValueError for parameters :func:`search_capacity` cannot search with."""
    if not (low > 0) or math.isinf(low):
        raise ValueError(f"low must be a finite load > 0, got {low}")
    if integer and round(low) < 1:
        raise ValueError(f"an integer search needs low >= 1, got {low}")
    if high is not None and not (high >= low):
        raise ValueError(f"high ({high}) must be >= low ({low})")
    if not (tolerance > 0):
        raise ValueError(f"tolerance must be > 0 (0.05 = 5 %), got {tolerance}")
    if not (budget_s >= 0):
        raise ValueError(f"budget_s must be >= 0 seconds, got {budget_s}")
    if max_probes < 1:
        raise ValueError(f"max_probes must be >= 1, got {max_probes}")


class _Stop(Exception):
    """A probe the budget or the probe count forbids: the search ends with what it has."""


class _Search:
    """One run of :func:`search_capacity` (its parameters, the probes so far, the clock)."""

    def __init__(self, measure: Callable[[float], LoadProbe], *, low: float, high: float | None, tolerance: float,
                 budget_s: float, clock: Callable[[], float], max_probes: int, integer: bool,
                 first_estimate_s: float | None, unit: str) -> None:
        self.measure, self.low, self.high, self.tolerance = measure, low, high, tolerance
        self.budget_s, self.clock, self.max_probes, self.integer, self.unit = budget_s, clock, max_probes, integer, unit
        self.lo = self.norm(low)
        self.hi = None if high is None else (float(math.floor(high)) if integer else float(high))
        self.sp = f" {unit}" if unit else ""
        self.t0 = clock()
        self.probes: list[LoadProbe] = []
        self.estimate = first_estimate_s or 0.0
        self.why_not = ""

    def norm(self, x: float) -> float:
        return float(round(x)) if self.integer else float(x)

    def probe(self, load: float) -> LoadProbe:
        """Run one probe; raises :class:`_Stop` when the budget or the probe count forbids it."""
        if len(self.probes) >= self.max_probes:
            self.why_not = "max_probes"
            raise _Stop
        start = self.clock()
        elapsed = start - self.t0
        if elapsed >= self.budget_s or elapsed + self.estimate > self.budget_s:
            self.why_not = "budget"
            raise _Stop
        r = self.measure(load)
        end = self.clock()
        r = r.model_copy(update={"load": load, "duration_s": end - start})
        self.estimate = end - start
        self.probes.append(r)
        return r

    def done(self, stopped: StopReason, capacity: float, p: float | None, f: float | None, message: str) -> CapacityResult:
        """The result; with a passing and a failing load, the capacity is read between them by
        the decision core's estimator (:func:`probe_capacity`)."""
        if p is not None and f is not None and capacity > 0:
            capacity = probe_capacity(self.probes).load
            message = message.replace("{capacity}", _num(capacity))
        return CapacityResult(
            capacity=capacity, stopped=stopped, bracket=(p, f), probes=self.probes, message=message,
            elapsed_s=self.clock() - self.t0, low=self.low, high=self.high, tolerance=self.tolerance,
            budget_s=self.budget_s, max_probes=self.max_probes, integer=self.integer, unit=self.unit,
        )

    def cut_short(self, p: float | None, f: float | None) -> CapacityResult:
        stopped: StopReason = "budget" if self.why_not == "budget" else "max_probes"
        if stopped == "budget":
            cause = (f"the time budget ({self.budget_s:g} s) is spent: {self.clock() - self.t0:.1f} s used, "
                     f"the next probe would take about {self.estimate:.1f} s")
        else:
            cause = f"the probe limit ({self.max_probes}) is reached"
        if p is None:
            return self.done(stopped, 0.0, None, f, f"no probe passed before {cause}")
        above = f", fails at {_fmt(f)}" if f is not None else ", no failing load found yet"
        if f is not None:  # bracketed: the capacity is read inside it, a bracket wider than the tolerance
            return self.done(stopped, p, p, f, f"capacity {{capacity}}{self.sp} (passes at {p:g}{above}; the bracket "
                                               f"is wider than the tolerance); stopped early: {cause}")
        return self.done(stopped, p, p, f, f"capacity at least {p:g}{self.sp} (passes at {p:g}{above}); "
                                           f"stopped early: {cause}")

    def run(self) -> CapacityResult:
        """Bracket (down from a failing first load, else up by doubling), then bisect; the
        bracket so far is kept in ``self.p`` / ``self.f`` so a search cut short reports it."""
        self.p: float | None = None
        self.f: float | None = None
        try:
            first = self.probe(self.lo)
            if first.passed:
                self.p = self.lo
            elif (never := self.bracket_down(first)) is not None:
                return never
            if (high := self.bracket_up()) is not None:
                return high
            return self.bisect()
        except _Stop:
            return self.cut_short(self.p, self.f)

    def bracket_down(self, first: LoadProbe) -> CapacityResult | None:
        """From a failing first load, halve (to low / DOWN_FACTOR at most) until a probe passes;
        the ``never_met`` result when none does."""
        self.f, floor_load, last = self.lo, (1.0 if self.integer else self.lo / DOWN_FACTOR), first
        while True:
            nxt = self.norm(self.f / 2)
            if not self.integer:  # a fixed request count at half the rate takes about twice as long
                self.estimate *= 2
            if nxt < floor_load or nxt >= self.f:
                return self.done("never_met", 0.0, None, self.f, f"never meets the SLO down to {self.f:g}{self.sp} "
                                                                 f"(searched from {self.lo:g}{self.sp}): {last.reason}")
            r = self.probe(nxt)
            if r.passed:
                self.p = nxt
                return None
            self.f, last = nxt, r

    def bracket_up(self) -> CapacityResult | None:
        """Double from the passing load until a probe fails; ``high_reached`` when ``--high`` passes."""
        assert self.p is not None
        while self.f is None:
            if self.hi is not None and self.p >= self.hi:
                return self.done("high_reached", self.p, self.p, None, f"meets the SLO at the highest load searched "
                                                                       f"({self.p:g}{self.sp}): the capacity is at least that")
            nxt = self.norm(self.p * 2)
            if self.hi is not None:
                nxt = min(nxt, self.hi)
            if self.probe(nxt).passed:
                self.p = nxt
            else:
                self.f = nxt
        return None

    def bisect(self) -> CapacityResult:
        """Halve the bracket ``[p, f)`` until it is within the tolerance (or no integer lies inside)."""
        p, f = self.p, self.f
        assert p is not None and f is not None
        while not ((f - p) <= self.tolerance * p or (self.integer and f - p <= 1)):
            mid = float(math.floor((p + f) / 2)) if self.integer else (p + f) / 2
            if self.probe(mid).passed:
                p = self.p = mid
            else:
                f = self.f = mid
        return self.done("converged", p, p, f,
                         f"capacity {{capacity}}{self.sp}: passes at {p:g}, fails at {f:g} ({(f - p) / p:.1%} apart; "
                         f"tolerance {self.tolerance:.0%}{', integer loads' if self.integer else ''}; read between "
                         f"them where the SLO margin crosses 1)")


# ------------------------------------------------------------------------------------------
# judging one probe: the decision core's judge of a point, plus the rate axis's saturation


def _ms(v: float) -> str:
    return f"{v:.1f} ms"


COMPLETION_BAND = 0.10  # saturated when completions fall this far below the offered rate


def judge_probe(
    load: float,
    repeats: Sequence[Requests],
    slos: Sequence[SLO],
    metrics: Metrics,
    *,
    offered: float | None = None,
    completed: float | None = None,
    validity_band: float = 0.05,
    max_failure_rate: float = MAX_FAILURE_RATE,
) -> LoadProbe:
    """One probe judged by the decision core's judge of a point
    (:func:`harness.scoring.capacity.frontier.point_stats`, the one ``bench run``'s ladder uses): its
    ``repeats`` (one :class:`Requests` per measurement, pooled) pass when the failures stay within
    ``max_failure_rate`` beyond the noise (the Wilson bound, :mod:`harness.scoring.capacity.samples`) and
    every SLO holds at its percentile over the steady state (failed requests count +inf for TTFT
    and E2E latency); a probe where no request completed never passes. ``metrics``: the probe's
    pooled summary, read for the achieved arrival rate and the failures' words only.

    ``offered``: the offered arrival rate (req/s, or first turns/s for sessions; None for a
    concurrency probe: no rate target). The probe is *saturated* (a fail: the load it is labelled
    with was never offered) when ``metrics.achieved_rate`` is below ``offered * (1 -
    validity_band)``, or when ``completed`` (its completion rate, req/s) is below ``offered * (1 -
    COMPLETION_BAND)``: the client kept the schedule but the engine did not keep pace. The
    stored ``margin`` (max over SLOs of value / threshold; None = infinite) and ``binding`` (the
    SLO key with the largest ratio, ``"errors"`` or ``"saturated"``) let the capacity be read
    between the bracketing probes (:func:`probe_capacity`)."""
    pooled = pool(list(repeats))
    stats = point_stats(load, pooled, slos, max_failure_rate)
    parts: list[str] = []
    if metrics.requests_completed == 0:
        fails = ", ".join(f"{k} {v}" for k, v in sorted(metrics.failures_by_class.items())) or "none sent"
        parts.append(f"no request completed ({fails})")
    elif too_many_failures(int((~pooled.ok).sum()), pooled.n, max_failure_rate):
        parts.append(failure_text([metrics], bound=max_failure_rate))
    for slo in slos if metrics.requests_completed else ():
        v = stats.values[slo.key]
        if math.isnan(v):
            parts.append(f"{slo.key} has no value (1-token replies) - cannot be violated")
        elif math.isinf(v):
            parts.append(f"{slo.key} infinite (lands on one of {metrics.requests_failed} failed requests) "
                         f"> {_ms(slo.threshold_ms)}")
        else:
            parts.append(f"{slo.key} {_ms(v)} {'<=' if slo_holds(v, slo) else '>'} {_ms(slo.threshold_ms)}")
    if not slos:
        parts.append("no SLO given")
    meets = stats.passed and metrics.requests_completed > 0
    saturated = _saturated(offered, metrics.achieved_rate, completed, validity_band, parts)
    binding = "saturated" if saturated else stats.binding  # a load never offered: its margin is not read between
    return LoadProbe(load=load, meets_slo=meets, saturated=saturated, achieved=metrics.achieved_rate,
                     values={k: (v if math.isfinite(v) else None) for k, v in stats.values.items()},
                     reason="; ".join(parts), margin=stats.margin if math.isfinite(stats.margin) else None,
                     binding=binding)


def _saturated(offered: float | None, achieved: float | None, completed: float | None, validity_band: float,
               parts: list[str]) -> bool:
    """Whether a rate probe fell short of its offered rate (:func:`judge_probe`); its words go to ``parts``."""
    if offered is None or math.isinf(offered):
        return False
    saturated = False
    if achieved is None:
        parts.append("achieved rate not measured (fewer than 2 requests sent)")
    elif achieved < offered * (1 - validity_band):
        saturated = True
        parts.append(f"saturated: achieved {achieved:.3g} req/s < offered {offered:.3g} req/s - {validity_band:.0%}")
    if completed is not None and completed < offered * (1 - COMPLETION_BAND):
        saturated = True
        parts.append(f"saturated: the engine completed {completed:.3g} req/s of the {offered:.3g} offered "
                     f"(more than {COMPLETION_BAND:.0%} short: requests pile up)")
    return saturated


def probe_capacity(probes: Sequence[LoadProbe]) -> Capacity:
    """The capacity on the search's axis, read from its probes by the decision core's estimator
    (:func:`harness.scoring.capacity.frontier.capacity_from`, the one ``bench run``'s ladder uses): the
    first failing probe above the lowest and the passing one below it bracket the boundary, whose
    load is where the margin crosses 1 by linear interpolation between them (a failure by errors
    or saturation is not interpolated: the boundary is the passing load). ``Capacity.load`` is
    the capacity; ``request_rate`` the achieved rate there (rate probes). Raises ValueError for
    no probe."""
    stats = [PointStats(load=p.load, margin=math.inf if p.margin is None else p.margin, values={}, failure_rate=0.0,
                        passed=p.passed, output_tps=0.0, request_rate=p.achieved or 0.0, per_user_tps=None,
                        binding=p.binding or ("saturated" if p.saturated else ""))
             for p in probes]
    return capacity_from(stats)
