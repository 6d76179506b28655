"""Capacity at the SLO: the highest load an engine sustains while every SLO holds, read from its
load ladder, with a bootstrap interval.

The field's standard (InferenceX frontiers, aiconfigurator's highest tokens/s per GPU meeting
the TTFT and TPOT SLA, vLLM's ``bench sweep serve_sla``): an engine is judged by the load it
sustains while the user's SLOs hold. An engine's ladder is measured at closed-loop
concurrencies (``load``: requests in flight; agentic: sessions in flight), each point one or
more measurements (repeats) of fresh prompts.

**One point** (:class:`PointSample`, pooled over its repeats) **passes** when its failures stay
within the bound and every SLO holds at its percentile: the point's *margin*
``m = max over SLOs of value / threshold`` is at most 1 (``value``: the SLO's percentile of its
metric, numpy linear; failed requests count as +inf for TTFT and E2E latency, the DistServe
error-adjusted rule, so a failure can only make it worse).

**The capacity** (:func:`capacity_of`): points sorted by load; the first failing point ``j``
above the lowest and the passing point ``i`` below it bracket the SLO boundary. The boundary
load is where the margin crosses 1, by linear interpolation between ``(L_i, m_i)`` and
``(L_j, m_j)`` (monotone between the two measured points; never extrapolated beyond them), and
the capacity is the output throughput (and request rate) there, by the same interpolation: all
its numbers come from the two points that bracket the boundary. A failure by errors alone is not
interpolated (the boundary is the passing point). Without a failing point the capacity is what
the highest load measured sustained, marked open (``≥``: the ladder stopped before the SLO
broke). When the lowest point fails the capacity is 0.

**The interval** (:func:`capacity_interval`): a two-stage bootstrap (Davison & Hinkley 1997,
§3.8): per draw, each point's repeats are resampled, then its requests within them; the
capacity is recomputed from the resampled points. The 2.5 and 97.5 percentiles of the draws
give the 95 % interval; the draws themselves give ratios between engines
(:mod:`harness.scoring.verdict`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from harness.metrics import SLO
from harness.metrics.request import e2el_ms, itls_ms, tpot_ms, ttft_ms
from results.schema import RequestRecord

RESAMPLES = 600  # bootstrap draws per capacity (~20 ms for a 7-point ladder of 50 requests)


@dataclass(frozen=True)
class Requests:
    """One measurement's requests as arrays (times in ms; NaN where a value does not exist):
    ``ok`` success; ``ttft``, ``e2el`` (NaN for a failed request, counted +inf in SLOs);
    ``tpot`` (NaN below 2 output tokens); ``tokens`` output tokens of successful requests (0
    otherwise); ``itl`` each request's inter-token gaps. ``duration_s``: the measured phase (s)."""

    ok: np.ndarray
    ttft: np.ndarray
    tpot: np.ndarray
    e2el: np.ndarray
    tokens: np.ndarray
    itl: tuple[np.ndarray, ...]
    duration_s: float

    @classmethod
    def of(cls, records: Sequence[RequestRecord], duration_s: float) -> "Requests":
        """From one measurement's measured records (incomplete ones, cut by a drain bound, are
        left out, as in :func:`harness.metrics.compute_metrics`, and so are requests a Ctrl-C
        cut: the client's doing, not the engine's)."""
        rs = [r for r in records if r.phase == "measured" and r.error_class not in ("incomplete", "interrupted")]

        def arr(values: list[float | None]) -> np.ndarray:
            return np.array([math.nan if v is None else v for v in values], dtype=np.float64)

        ok = np.array([r.success for r in rs], dtype=bool)
        return cls(ok=ok, ttft=arr([ttft_ms(r) if r.success else None for r in rs]),
                   tpot=arr([tpot_ms(r) if r.success else None for r in rs]),
                   e2el=arr([e2el_ms(r) if r.success else None for r in rs]),
                   tokens=np.array([(r.output_tokens or 0) if r.success else 0 for r in rs], dtype=np.float64),
                   itl=tuple(np.asarray(itls_ms(r), dtype=np.float64) if r.success else np.empty(0) for r in rs),
                   duration_s=float(duration_s))

    @property
    def n(self) -> int:
        return int(self.ok.size)

    def take(self, idx: np.ndarray) -> "Requests":
        """The requests at ``idx`` (a bootstrap resample), over the same duration."""
        return Requests(self.ok[idx], self.ttft[idx], self.tpot[idx], self.e2el[idx], self.tokens[idx],
                        tuple(self.itl[i] for i in idx), self.duration_s)


def pool(parts: Sequence[Requests]) -> Requests:
    """Several measurements of one point as one: requests concatenated, durations summed."""
    if len(parts) == 1:
        return parts[0]
    return Requests(np.concatenate([p.ok for p in parts]), np.concatenate([p.ttft for p in parts]),
                    np.concatenate([p.tpot for p in parts]), np.concatenate([p.e2el for p in parts]),
                    np.concatenate([p.tokens for p in parts]), tuple(g for p in parts for g in p.itl),
                    sum(p.duration_s for p in parts))


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
    ``request_rate`` (requests/s), ``per_user_tps`` (1000 / median TPOT, the interactivity
    axis), ``binding`` (the SLO key with the largest ratio, or "errors")."""

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
    """The SLO's percentile of its metric over ``req`` (ms; inf = lands on a failure, NaN = no value)."""
    failed = int((~req.ok).sum())
    if slo.metric == "ttft":
        return _percentile(req.ttft, slo.percentile, failed)
    if slo.metric == "e2el":
        return _percentile(req.e2el, slo.percentile, failed)
    if slo.metric == "tpot":
        return _percentile(req.tpot, slo.percentile)
    gaps = np.concatenate(req.itl) if req.itl else np.empty(0)
    return _percentile(gaps, slo.percentile)


def point_stats(load: float, req: Requests, slos: Sequence[SLO], max_failure_rate: float, devices: int = 1,
                sessions: int | None = None) -> PointStats:
    """Judge one (pooled) point; ``sessions``: sessions completed, for the rate of an agentic point."""
    values = {s.key: slo_value(req, s) for s in slos}
    ratios = {k: (v / s.threshold_ms if not math.isnan(v) else 0.0) for (k, v), s in zip(values.items(), slos)}
    margin = max(ratios.values(), default=0.0)
    failure_rate = float((~req.ok).sum() / req.n) if req.n else 1.0
    errors = failure_rate > max_failure_rate or req.n == 0
    binding = "errors" if errors and margin <= 1 else max(ratios, key=lambda k: ratios[k], default="")
    d = req.duration_s if req.duration_s > 0 else math.nan
    tpot = req.tpot[~np.isnan(req.tpot)]
    completed = sessions if sessions is not None else int(req.ok.sum())
    return PointStats(load=load, margin=margin, values=values, failure_rate=failure_rate,
                      passed=not errors and margin <= 1.0, output_tps=float(req.tokens.sum() / d / devices),
                      request_rate=float(completed / d), per_user_tps=float(1000.0 / np.median(tpot)) if tpot.size else None,
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
    measurements of the points it rests on (with one, the interval holds the requests' noise
    only, not the run-to-run noise)."""

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
    measurements: int = 1  # the fewest measurements of the points it rests on (1 = no run-to-run noise in its interval)


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
    if b.binding != "errors" and math.isfinite(b.margin) and b.margin > a.margin:
        t = min(1.0, max(0.0, (1.0 - a.margin) / (b.margin - a.margin)))
    return Capacity(a.output_tps + t * (b.output_tps - a.output_tps), a.request_rate + t * (b.request_rate - a.request_rate),
                    a.load + t * (b.load - a.load), (a.load, b.load), binding=b.binding, points=list(pts))


def capacity_of(points: Sequence[PointSample], slos: Sequence[SLO], max_failure_rate: float = 0.05,
                *, resamples: int = RESAMPLES, seed: int = 0) -> Capacity:
    """The capacity of one engine's ladder ``points``, with its bootstrap interval and draws."""
    stats = [point_stats(p.load, p.pooled(), slos, max_failure_rate, p.devices,
                         sum(p.sessions) if p.sessions is not None else None) for p in points]
    cap = capacity_from(stats)
    on = {load for load in cap.bracket if load is not None}
    cap.measurements = min((len(p.repeats) for p in points if p.load in on), default=1)
    if resamples > 0 and not cap.never_met:
        cap.draws = capacity_draws(points, slos, max_failure_rate, resamples=resamples, seed=seed)
        lo, hi = np.percentile(cap.draws, [2.5, 97.5])
        cap.interval = (float(lo), float(hi))
    return cap


def capacity_draws(points: Sequence[PointSample], slos: Sequence[SLO], max_failure_rate: float, *,
                   resamples: int = RESAMPLES, seed: int = 0) -> np.ndarray:
    """``resamples`` bootstrap draws of the capacity's output tokens/s (module docstring):
    every point resampled at once for all draws (:func:`_point_draws`), then the capacity read
    from each draw's points."""
    rng = np.random.default_rng(seed)
    per_point = [_point_draws(p, slos, max_failure_rate, resamples, rng) for p in points]
    out = np.empty(resamples)
    for b in range(resamples):
        out[b] = capacity_from([draws[b] for draws in per_point]).output_tps
    return out


def _point_draws(p: PointSample, slos: Sequence[SLO], max_failure_rate: float, resamples: int,
                 rng: np.random.Generator) -> list[PointStats]:
    """``resamples`` two-stage bootstrap draws of one point's stats: its repeats resampled,
    then the requests within each (vectorised; a point whose repeats differ in size, or an ITL
    SLO, is drawn one by one)."""
    sizes = {r.n for r in p.repeats}
    if len(sizes) != 1 or any(s.metric == "itl" for s in slos) or 0 in sizes:
        return [_point_draw(p, slos, max_failure_rate, rng) for _ in range(resamples)]
    n, reps = sizes.pop(), len(p.repeats)
    picks = rng.integers(0, reps, (resamples, reps))
    idx = (picks[:, :, None] * n + rng.integers(0, n, (resamples, reps, n))).reshape(resamples, reps * n)
    pooled = p.pooled()
    durations = np.array([r.duration_s for r in p.repeats])[picks].sum(axis=1)
    ok = pooled.ok[idx]
    failure_rate = (~ok).mean(axis=1)
    ratios = {}
    for slo in slos:
        base = {"ttft": pooled.ttft, "e2el": pooled.e2el, "tpot": pooled.tpot}[slo.metric]
        if slo.metric != "tpot":  # a failed request counts as +inf (error-adjusted)
            base = np.where(pooled.ok, base, np.inf)
        ratios[slo.key] = _row_percentiles(base[idx], slo.percentile) / slo.threshold_ms
    keys = list(ratios)
    stacked = np.nan_to_num(np.vstack([ratios[k] for k in keys]), nan=0.0) if keys else np.zeros((1, resamples))
    margin = stacked.max(axis=0)
    top = stacked.argmax(axis=0)
    tps = pooled.tokens[idx].sum(axis=1) / durations / p.devices
    done = (np.array(p.sessions)[picks].sum(axis=1) if p.sessions is not None else ok.sum(axis=1))
    rate = done / durations
    out = []
    for b in range(resamples):
        errors = failure_rate[b] > max_failure_rate
        out.append(PointStats(load=p.load, margin=float(margin[b]), values={}, failure_rate=float(failure_rate[b]),
                              passed=bool(not errors and margin[b] <= 1.0), output_tps=float(tps[b]),
                              request_rate=float(rate[b]), per_user_tps=None,
                              binding="errors" if errors and margin[b] <= 1 else (keys[top[b]] if keys else "")))
    return out


def _point_draw(p: PointSample, slos: Sequence[SLO], max_failure_rate: float, rng: np.random.Generator) -> PointStats:
    """One two-stage bootstrap draw of one point's stats, the slow way."""
    picks = rng.integers(0, len(p.repeats), len(p.repeats))
    parts = [p.repeats[i].take(rng.integers(0, p.repeats[i].n, p.repeats[i].n)) if p.repeats[i].n else p.repeats[i]
             for i in picks]
    sessions = sum(p.sessions[i] for i in picks) if p.sessions is not None else None
    return point_stats(p.load, pool(parts), slos, max_failure_rate, p.devices, sessions)


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
