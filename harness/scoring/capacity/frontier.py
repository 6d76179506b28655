"""Capacity at the SLO: the highest load an engine sustains while every SLO holds, read from its
load ladder, with a bootstrap interval.

The field's standard (InferenceX frontiers, aiconfigurator's highest tokens/s per GPU meeting
the TTFT and TPOT SLA, vLLM's ``bench sweep serve_sla``): an engine is judged by the load it
sustains while the user's SLOs hold. An engine's ladder is measured at closed-loop
concurrencies (``load``: requests in flight; agentic: sessions in flight), each point one or
more measurements (repeats) of fresh prompts.

**One point** (:class:`PointSample`, pooled over its repeats) **passes** when its failures stay
within the bound and every SLO holds at its percentile, each over the point's steady state, the
failure bound with an interval (both :mod:`harness.scoring.capacity.samples`). A failure still counts against the SLOs (below). The point's *margin*
``m = max over SLOs of value / threshold`` is at most 1 (``value``: the SLO's percentile of its
metric, numpy linear; failed requests count as +inf for TTFT and E2E latency, the DistServe
error-adjusted rule, so a failure can only make it worse).

**The capacity** (:func:`capacity_of`): points sorted by load; the first failing point ``j``
above the lowest and the passing point ``i`` below it bracket the SLO boundary. The boundary
load is where the margin crosses 1, by linear interpolation between ``(L_i, m_i)`` and
``(L_j, m_j)`` (monotone between the two measured points; never extrapolated beyond them), and
the capacity is the output throughput (and request rate) there, by the same interpolation, but
never below what the passing point sustained (past saturation a failing point can serve less):
all its numbers come from the two points that bracket the boundary. A failure by errors alone (or by
saturation: a ``bench search`` rate probe whose offered rate was never achieved) is not
interpolated (the boundary is the passing point). ``bench search`` reads its capacity on its own
axis (offered rate, or concurrency) with the same judge and estimator
(``harness.app.search.capacity.judge_probe`` and ``probe_capacity``). Without a failing point the capacity is what
the highest load measured sustained, marked open (``≥``: the ladder stopped before the SLO
broke). When the lowest point fails the capacity is 0.

**The interval** (:func:`capacity_draws`): a two-stage cluster bootstrap (Davison & Hinkley
1997, §3.8, strategy 2): per draw, each point's measurements (fresh starts, where repeated) are
resampled, then the *sessions* within each (the clusters: the turns of one agentic session share
its history and its slot, so they are not independent; a single-turn request is a cluster of its
own); the capacity is recomputed from the resampled points. A point's throughput is not a sum
of independent requests' tokens (a closed loop keeps the engine busy whatever a request's size),
so resampling requests' tokens over a fixed window would add noise the measurement does not have;
each draw instead scales the picked measurement's throughput by its resampled *service rate*
(output tokens per ms of the judged requests' time in the engine, a ratio of sums: by Little's
law a closed loop's throughput moves with it). Latency percentiles and failures are resampled
as they are. The 2.5 and 97.5 percentiles of the
draws give the 95 % interval; the draws themselves give ratios between engines
(:mod:`harness.scoring.verdict.verdict`). Resampling a point's few measurements cannot hold the
machine's noise between them (two fresh starts are two values); the draws are then widened by
the spread between measurements that the run's repeated points show
(:mod:`harness.scoring.capacity.spread`: a random-effects variance, on t's tails). Every engine draws from its own random stream
(:func:`engine_stream`): with one shared seed, two ladders of the same shape draw the same
indices, and the ratio of their capacities comes out far too narrow (an engine truly 6 % faster,
one point of 36 requests: 1.060 [1.060–1.060] with a shared seed, [0.97–1.16] with two streams).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from harness.metrics import SLO

from .samples import Requests, engine_stream, failure_lower_bound, pool, too_many_failures
from .spread import NO_SPREAD, Spread, machine_draws
from results.schema import RequestRecord
from results.schema.metric_registry import metric

_PER_REQUEST = ("ttft", "tpot", "e2el")  # the SLO metrics drawn vectorised: one value per request in Requests

__all__ = ["Capacity", "PointSample", "PointStats", "Requests", "capacity_draws", "capacity_from", "capacity_of",
           "engine_stream", "point_stats", "pool", "slo_holds", "slo_value"]

RESAMPLES = 600  # bootstrap draws per capacity (~20 ms for a 7-point ladder of 50 requests)


@dataclass(frozen=True)
class PointSample:
    """One ladder point: ``load`` (requests or sessions in flight) and its measurements
    (``repeats``, one :class:`Requests` each); ``devices``: the devices served on (throughput
    is per device); ``sessions``: the sessions each repeat completed, for sessions/s (agentic;
    None = single-turn requests)."""

    load: float
    repeats: tuple[Requests, ...]
    devices: int = 1
    sessions: tuple[int, ...] | None = None

    def pooled(self) -> Requests:
        return pool(self.repeats)


@dataclass(frozen=True)
class PointStats:
    """What the decision reads of one point (pooled over its repeats): ``margin`` (max over
    SLOs of value / threshold; inf when a percentile lands on a failure), ``values`` (ms by SLO
    key), ``failure_rate``, ``passed``, ``output_tps`` (output tokens/s per device),
    ``request_rate`` (requests/s), ``per_user_tps`` (1000 / TPOT at the percentile a TPOT SLO
    judges, else the median: the interactivity axis, MLPerf Endpoints' 1000 / TPOT p90), ``binding`` (the SLO key with the largest ratio, or "errors")."""

    load: float
    margin: float
    values: dict[str, float]
    failure_rate: float
    passed: bool
    output_tps: float
    request_rate: float
    per_user_tps: float | None
    binding: str


def _percentile(values: np.ndarray, q: float, failures: int = 0) -> float:
    """numpy's linear percentile of the finite values plus ``failures`` values at +inf; inf
    when the interpolation touches one (the error-adjusted rule)."""
    finite = np.sort(values[~np.isnan(values)])
    n = finite.size + failures
    if n == 0:
        return math.nan
    pos = (n - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    if hi >= finite.size:
        return math.inf
    return float(finite[lo] + (finite[hi] - finite[lo]) * (pos - lo))


def slo_value(req: Requests, slo: SLO) -> float:
    """The SLO's percentile of its metric over ``req`` (ms; inf = lands on a failure, NaN = no
    value): failed requests count as +inf for a metric declared so (``Metric.failures``: TTFT,
    E2E latency), and not at all for the others."""
    failed = int((~req.ok).sum()) if metric(slo.metric).failures == "inf" else 0
    return _percentile(req.values(slo.metric), slo.percentile, failed)


def slo_holds(value: float, slo: SLO) -> bool:
    """Whether an SLO's judged value (ms, :func:`slo_value`) holds: at most the threshold; a
    value that does not exist (NaN: 1-token replies have no TPOT) cannot break it, an infinite
    one (a failure) always does. The one place a point's SLO is compared with its threshold."""
    return math.isnan(value) or value <= slo.threshold_ms


def point_stats(load: float, req: Requests, slos: Sequence[SLO], max_failure_rate: float, devices: int = 1,
                sessions: int | None = None) -> PointStats:
    """Judge one (pooled) point; ``sessions``: sessions completed, for the rate of an agentic point."""
    values = {s.key: slo_value(req, s) for s in slos}
    ratios = {k: (v / s.threshold_ms if not math.isnan(v) else 0.0) for (k, v), s in zip(values.items(), slos)}
    margin = max(ratios.values(), default=0.0)
    failed = int((~req.ok).sum())
    failure_rate = failed / req.n if req.n else 1.0
    errors = req.n == 0 or too_many_failures(failed, req.n, max_failure_rate)
    binding = "errors" if errors and margin <= 1 else max(ratios, key=lambda k: ratios[k], default="")
    d = req.duration_s if req.duration_s > 0 else math.nan
    tpot = req.tpot[~np.isnan(req.tpot)]
    judged = next((s.percentile for s in slos if s.metric == "tpot"), 50.0)  # the TPOT percentile the SLO judges
    per_token = float(np.percentile(tpot, judged)) if tpot.size else 0.0
    completed = sessions / (req.span / d) if sessions is not None and req.span > 0 else float(req.completions().sum())
    return PointStats(load=load, margin=margin, values=values, failure_rate=failure_rate,
                      passed=not errors and margin <= 1.0, output_tps=float(req.tokens.sum() / d / devices),
                      request_rate=float(completed / d), per_user_tps=1000.0 / per_token if per_token > 0 else None,
                      binding=binding)


@dataclass
class Capacity:
    """An engine's capacity at the SLO (module docstring). ``output_tps``: output tokens/s per
    device at the boundary; ``request_rate``: requests/s there (sessions/s for agentic);
    ``load``: the boundary's load (interpolated); ``bracket``: (passing load, failing load; None
    = none found); ``open``: no failing point (a lower bound); ``binding``: what broke at the
    failing point (an SLO key, or "errors"), "" when none did; ``never_met``: the lowest point
    failed; ``interval``: the 95 % interval of ``output_tps``; ``draws``: the bootstrap draws
    of ``output_tps``; ``points``: each point's stats, by load; ``measurements``: the fewest
    measurements of the points it rests on; ``spread``: the run's spread between measurements
    (:mod:`harness.scoring.capacity.spread`) the draws hold, divided by ``√measurements`` (not
    ``spread.known``: no point of the run was measured twice, and the interval holds the
    requests' noise only, not the run-to-run noise)."""

    output_tps: float
    request_rate: float
    load: float
    bracket: tuple[float | None, float | None]
    open: bool = False
    binding: str = ""
    never_met: bool = False
    interval: tuple[float, float] | None = None
    draws: np.ndarray = field(default_factory=lambda: np.empty(0))
    points: list[PointStats] = field(default_factory=list)
    measurements: int = 1  # the fewest measurements of the points it rests on
    spread: Spread = NO_SPREAD  # the run's spread between measurements, held by the interval (spread.known: it was estimated)
    lowest_fails: float = 0.0  # the share of draws whose lowest point fails (capacity 0): why an interval reaches 0


def capacity_from(stats: Sequence[PointStats]) -> Capacity:
    """The capacity read from judged points (module docstring). Raises ValueError for no point."""
    pts = sorted(stats, key=lambda p: p.load)
    if not pts:
        raise ValueError("no ladder point to read a capacity from")
    if not pts[0].passed:
        return Capacity(0.0, 0.0, 0.0, (None, pts[0].load), binding=pts[0].binding, never_met=True, points=list(pts))
    j = next((k for k, p in enumerate(pts) if not p.passed), None)
    if j is None:  # the highest load measured passed: what it sustained there, at least
        top = pts[-1]
        return Capacity(top.output_tps, top.request_rate, top.load, (top.load, None), open=True, points=list(pts))
    a, b = pts[j - 1], pts[j]
    t = 0.0
    if b.binding not in ("errors", "saturated") and math.isfinite(b.margin) and b.margin > a.margin:
        t = min(1.0, max(0.0, (1.0 - a.margin) / (b.margin - a.margin)))
    # never below what the passing point sustained: past saturation the failing point's throughput can be lower
    return Capacity(max(a.output_tps, a.output_tps + t * (b.output_tps - a.output_tps)),
                    max(a.request_rate, a.request_rate + t * (b.request_rate - a.request_rate)),
                    a.load + t * (b.load - a.load), (a.load, b.load), binding=b.binding, points=list(pts))


def capacity_of(points: Sequence[PointSample], slos: Sequence[SLO], max_failure_rate: float = 0.05,
                *, resamples: int = RESAMPLES, seed: int = 0, spread: Spread = NO_SPREAD) -> Capacity:
    """The capacity of one engine's ladder ``points``, with its bootstrap interval and draws;
    ``spread``: the run's spread between measurements (:func:`harness.scoring.capacity.spread.spread_of`
    over every engine's ladder), which widens the draws (module docstring)."""
    stats = [point_stats(p.load, p.pooled(), slos, max_failure_rate, p.devices,
                         sum(p.sessions) if p.sessions is not None else None) for p in points]
    cap = capacity_from(stats)
    on = {load for load in cap.bracket if load is not None}
    cap.measurements = min((len(p.repeats) for p in points if p.load in on), default=1)
    if resamples > 0 and not cap.never_met:
        cap.draws = capacity_draws(points, slos, max_failure_rate, resamples=resamples, seed=seed, spread=spread)
        cap.spread = spread
        lo, hi = np.percentile(cap.draws, [2.5, 97.5])
        cap.interval = (float(lo), float(hi))
        cap.lowest_fails = float(np.mean(cap.draws == 0.0))
    return cap


def capacity_draws(points: Sequence[PointSample], slos: Sequence[SLO], max_failure_rate: float, *,
                   resamples: int = RESAMPLES, seed: int = 0, spread: Spread = NO_SPREAD) -> np.ndarray:
    """``resamples`` bootstrap draws of the capacity's output tokens/s (module docstring):
    every point resampled at once for all draws (:func:`_point_draws`), each moved by its own
    machine factor when ``spread`` is known (:func:`harness.scoring.capacity.spread.machine_draws`;
    its measurements then kept, not resampled), then the capacity read from each draw's points."""
    rng = np.random.default_rng(seed)
    moved = spread.known and spread.tau > 0  # an estimate of 0: the measurements resampled, as without one
    shift = machine_draws(spread, [len(p.repeats) for p in points], resamples, seed) if moved else None
    per_point = [_point_draws(p, slos, max_failure_rate, resamples, rng, None if shift is None else shift[i])
                 for i, p in enumerate(points)]
    out = np.empty(resamples)
    for b in range(resamples):
        out[b] = capacity_from([draws[b] for draws in per_point]).output_tps
    return out


def _point_draws(p: PointSample, slos: Sequence[SLO], max_failure_rate: float, resamples: int,
                 rng: np.random.Generator, shift: np.ndarray | None = None) -> list[PointStats]:
    """``resamples`` two-stage cluster-bootstrap draws of one point's stats (module docstring):
    its measurements resampled, then the sessions (clusters) within each, vectorised: each draw
    is a row of request indices padded with a sentinel (a request that counts nowhere). An ITL
    SLO, or a point with an empty measurement, is drawn one by one. ``shift`` (per draw, the log
    of the machine's factor; :mod:`harness.scoring.capacity.spread`): the measurements are kept
    as they are (not resampled), the margin multiplied by ``exp(shift)`` and the throughput and
    rate divided by it."""
    if any(s.metric not in _PER_REQUEST for s in slos) or any(r.n == 0 for r in p.repeats):
        return [_point_draw(p, slos, max_failure_rate, rng, None if shift is None else float(shift[b]))
                for b in range(resamples)]
    reps = len(p.repeats)
    pooled = p.pooled()
    sentinel = pooled.n
    offsets = np.cumsum([0] + [r.n for r in p.repeats[:-1]])
    # per measurement: a (clusters × widest cluster) matrix of pooled request indices, sentinel-padded
    tables = []
    for r, off in zip(p.repeats, offsets):
        groups = r.clusters()
        width = max(g.size for g in groups)
        table = np.full((len(groups), width), sentinel, dtype=np.int64)
        for i, g in enumerate(groups):
            table[i, :g.size] = g + off
        tables.append(table)
    span = max(t.size for t in tables)
    picks = (rng.integers(0, reps, (resamples, reps)) if shift is None  # stage 1: which measurements
             else np.broadcast_to(np.arange(reps), (resamples, reps)))  # the machine's factor stands for stage 1
    idx = np.full((resamples, reps, span), sentinel, dtype=np.int64)
    for m, table in enumerate(tables):  # stage 2: that measurement's clusters, for every slot that picked it
        rows = table[rng.integers(0, table.shape[0], (resamples, reps, table.shape[0]))].reshape(resamples, reps, -1)
        chosen = picks == m
        idx[:, :, :table.size][chosen] = rows[chosen]
    pad = lambda a, v: np.append(a, v)  # noqa: E731  (the sentinel's value)
    # throughput: each picked measurement's own, scaled by its resampled service rate (module docstring)
    served = np.where(np.isnan(pooled.e2el), 0.0, pooled.tokens_out())
    busy = np.nan_to_num(pooled.e2el, nan=0.0)
    own_rate = np.array([_service_rate(served[off:off + r.n], busy[off:off + r.n]) for r, off in zip(p.repeats, offsets)])
    with np.errstate(divide="ignore", invalid="ignore"):
        drawn_rate = pad(served, 0.0)[idx].sum(axis=2) / pad(busy, 0.0)[idx].sum(axis=2)
        factor = np.where(np.isfinite(drawn_rate) & (own_rate[picks] > 0), drawn_rate / own_rate[picks], 1.0)
    window_tokens = np.array([r.tokens.sum() for r in p.repeats])[picks]
    window_done = np.array([r.completions().sum() for r in p.repeats])[picks]
    idx = idx.reshape(resamples, reps * span)
    valid = idx != sentinel
    durations = np.array([r.duration_s for r in p.repeats])[picks].sum(axis=1)
    spans = np.array([r.span for r in p.repeats])[picks].sum(axis=1)
    failed = (~pad(pooled.ok, True)[idx]).sum(axis=1)
    answered = valid.sum(axis=1)
    errors = failure_lower_bound(failed, answered) > max_failure_rate
    ratios = {}
    for slo in slos:
        base = pooled.values(slo.metric)
        if metric(slo.metric).failures == "inf":  # a failed request counts as +inf (error-adjusted)
            base = np.where(pooled.ok, base, np.inf)
        ratios[slo.key] = _row_percentiles(pad(base, np.nan)[idx], slo.percentile) / slo.threshold_ms
    keys = list(ratios)
    stacked = np.nan_to_num(np.vstack([ratios[k] for k in keys]), nan=0.0, posinf=np.inf) if keys else np.zeros((1, resamples))
    margin = stacked.max(axis=0)
    top = stacked.argmax(axis=0)
    tps = (window_tokens * factor).sum(axis=1) / durations / p.devices
    rate = ((np.array(p.sessions)[picks] * factor).sum(axis=1) / spans if p.sessions is not None
            else (window_done * factor).sum(axis=1) / durations)
    if shift is not None:
        factor_u = np.exp(shift)
        margin, tps, rate = margin * factor_u, tps / factor_u, rate / factor_u
    out = []
    for b in range(resamples):
        out.append(PointStats(load=p.load, margin=float(margin[b]), values={},
                              failure_rate=float(failed[b] / answered[b]) if answered[b] else 1.0,
                              passed=bool(not errors[b] and margin[b] <= 1.0), output_tps=float(tps[b]),
                              request_rate=float(rate[b]), per_user_tps=None,
                              binding="errors" if errors[b] and margin[b] <= 1 else (keys[top[b]] if keys else "")))
    return out


def _service_rate(tokens: np.ndarray, busy_ms: np.ndarray) -> float:
    """Output tokens per ms of a request's time in the engine, over judged successful requests
    (a ratio of sums; 0 when none)."""
    total = float(busy_ms.sum())
    return float(tokens.sum()) / total if total > 0 else 0.0


def _point_draw(p: PointSample, slos: Sequence[SLO], max_failure_rate: float, rng: np.random.Generator,
                shift: float | None = None) -> PointStats:
    """One two-stage cluster-bootstrap draw of one point's stats, the slow way; ``shift``: the log
    of the machine's factor (:func:`_point_draws`: its measurements kept, not resampled)."""
    picks = np.arange(len(p.repeats)) if shift is not None else rng.integers(0, len(p.repeats), len(p.repeats))
    parts = []
    for i in picks:
        r = p.repeats[i]
        groups = r.clusters()
        parts.append(r.take(np.concatenate([groups[j] for j in rng.integers(0, len(groups), len(groups))]))
                     if groups else r)
    sessions = sum(p.sessions[i] for i in picks) if p.sessions is not None else None
    drawn = pool(parts)
    st = point_stats(p.load, drawn, slos, max_failure_rate, p.devices, sessions)
    if not shift:
        return st
    f = math.exp(shift)
    errors = drawn.n == 0 or too_many_failures(int((~drawn.ok).sum()), drawn.n, max_failure_rate)
    return PointStats(load=st.load, margin=st.margin * f, values=st.values, failure_rate=st.failure_rate,
                      passed=not errors and st.margin * f <= 1.0, output_tps=st.output_tps / f,
                      request_rate=st.request_rate / f, per_user_tps=st.per_user_tps,
                      binding="errors" if errors and st.margin * f <= 1 else st.binding)


def _row_percentiles(rows: np.ndarray, q: float) -> np.ndarray:
    """numpy's linear percentile of each row's non-NaN values (+inf when the interpolation
    touches an infinite value; NaN for a row without values): :func:`_percentile` per row."""
    srt = np.sort(rows, axis=1)  # NaN last, +inf just before them
    m = (~np.isnan(rows)).sum(axis=1)
    pos = np.maximum(m - 1, 0) * q / 100.0
    lo = np.floor(pos).astype(int)
    hi = np.ceil(pos).astype(int)
    r = np.arange(rows.shape[0])
    a, b = srt[r, lo], srt[r, hi]
    with np.errstate(invalid="ignore"):
        out = np.where(np.isinf(b), np.inf, a + (b - a) * (pos - lo))
    return np.where(m == 0, np.nan, out)


class SloWatch:
    """Whether a load-ladder point has failed its SLOs whatever its remaining requests do, told
    of each measured record as it ends (``RunnerOptions.stop_when``: the point then stops, and
    the measuring goes to points that can still decide something).

    A request counts against an SLO when it is judged (sent after the first completion opened
    the steady state, :func:`steady_window`) and its value is above the threshold (a failed
    request counts for TTFT and E2E latency, +inf in the error-adjusted percentile). Once more
    than ``(1 - p / 100) × planned + 1`` requests count against one SLO, its p-th percentile
    over all ``planned`` requests is above the threshold however the rest turn out: the point
    has failed. The judge still reads what was measured (:func:`harness.scoring.capacity.frontier.point_stats`).
    ``planned``: the point's request count; ``slos``: the SLOs judged."""

    def __init__(self, slos: Sequence[SLO], planned: int) -> None:
        self.slos, self.planned = list(slos), planned
        self.opens: int | None = None  # the first completion (ns)
        self.over: dict[str, int] = {s.key: 0 for s in self.slos}
        self.fired = False  # it answered True

    def __call__(self, r: RequestRecord) -> bool:
        if self.opens is None:  # records are told as they end: the first is the first completion
            self.opens = r.end_ns
            return False
        if r.send_ns is None or r.send_ns < self.opens:
            return False
        for slo in self.slos:
            judged = metric(slo.metric)  # a metric pooled over parts of a request (ITL) is not told per request
            value = judged.value(r) if r.success and judged.samples is None else None
            against = (not r.success and judged.failures == "inf") if value is None else not slo_holds(value, slo)
            self.over[slo.key] += against
            if 100 * self.over[slo.key] > (100 - slo.percentile) * self.planned + 100:  # (1 - p/100) N + 1, exactly
                self.fired = True
                return True
        return False

