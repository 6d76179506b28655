"""The spread between measurements: the run-to-run noise that one measurement's interval cannot hold.

A ladder point measured ``k`` times (on fresh starts, or on one start at another time) reads the
output throughputs ``X_1 … X_k`` (tokens/s over each measurement's steady state). Each carries
two kinds of noise:

- its requests' sampling noise: the variance ``v_m`` of ``log X_m`` from its sessions (the
  clusters of :class:`~harness.scoring.capacity.samples.Requests`), by the delta method on the
  ratio of sums the capacity's bootstrap resamples (output tokens per ms in the engine;
  Cochran 1977, *Sampling Techniques*, §6.3);
- the machine's state while it ran (CPU steal on a shared host, a fresh start's warm-up, the
  page cache), one random effect ``u_m ~ N(0, τ²)`` on the log throughput shared by all its
  requests, which no resampling of requests can see. On the 2-core reference machine
  (2026-12-07) one engine's throughput at one load read 52–66 tok/s over ten measurements in
  nine runs while each measurement's own sampling error was about 3 %: ``τ`` near 8 %.

``τ²`` is estimated by the generalized Q (Paule–Mandel) estimator of the random-effects model
(Paule & Mandel 1982; DerSimonian & Kacker 2007, *Contemporary Clinical Trials* 28, §2.3), pooled
over every point of every engine of the run measured more than once (the noise is the
machine's, not an engine's), and of the earlier runs on the same machine that the run took in
when it started (:class:`results.schema.SpreadPrior`: their points measured twice, and the points
one engine set up alike measured in several of them, which hold the run-to-run part of the
noise, :mod:`harness.app.run.spread_history`; one run alone often holds two or three
degrees of freedom, and with two the estimate is 0 in about a fifth of runs whose true spread is
8 %, when the requests' noise is 3 %): with weights ``w_m = 1 / (τ² + v_m)`` and each point's weighted
mean ``x̄_g``, ``Q(τ²) = Σ_g Σ_m w_m (log X_m − x̄_g)²`` falls as ``τ²`` rises and has expectation
``ν = Σ_g (k_g − 1)`` at the true ``τ²``; ``τ̂²`` solves ``Q(τ̂²) = ν`` (0 when ``Q(0) ≤ ν``).
Weighting by ``v_m`` keeps a brief, noisy measurement (few sessions) from reading as machine noise.

A point measured ``k`` times holds the mean of ``k`` such effects. In each bootstrap draw of a
capacity (:func:`harness.scoring.capacity.frontier.capacity_draws`) each point gets its own
machine factor ``exp(u)``, ``u = τ̂ · T / √k``, ``T`` Student's t with ``ν`` degrees of freedom
(a variance estimated from few degrees of freedom gets t's tails, not the normal's: Hartung &
Knapp 2001, *Statistics in Medicine* 20, §2): a slower machine stretches every time of the point
alike, so its SLO margin (a ratio of latencies to thresholds) is multiplied by ``exp(u)`` and its
throughput divided by it, and the point may pass or fail where it did not. The capacity is read
from the moved points: the boundary moves with the machine, so a capacity whose latency rises
slowly with the load spreads more between runs than one point's throughput does. The points'
measurements are then not resampled (the first stage of the bootstrap): the factor stands for
them. With no point measured twice there is
nothing to estimate ``τ`` from (``ν = 0``): the interval then holds the requests' noise only, and
says so (``1 run``). An estimate of 0 (the
measurements agree within their sampling noise) leaves the bootstrap as it was: its measurements
resampled, no factor drawn. Only whole measurements without failures are evidence
(:func:`groups_of`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from .samples import Requests

__all__ = ["Spread", "NO_SPREAD", "estimate", "groups_of", "machine_draws", "measurement_log_rate", "spread_of"]

_MAX_TAU2 = 4.0  # log-scale variance searched up to (τ = 2: a factor of 7 between measurements)
_MAX_SHIFT = 5.0  # a machine factor is drawn within e^±5 (148×)
WHOLE = 2 / 3  # a measurement with fewer requests than this share of its point's largest was cut short (_comparable)
MIN_DF = 1  # degrees of freedom from which the spread is used: one difference gives t's 1-df (Cauchy) tails, wide but
# safe; leaving it out (2) let identical drifting engines be separated in 22 % of the decision bed's trials, not 10 %


@dataclass(frozen=True)
class Spread:
    """The between-measurement spread of a run: ``tau`` (the standard deviation of one
    measurement's random effect on log throughput; 0.08 ≈ 8 %) and ``df`` (its degrees of
    freedom, ``ν``; 0 = nothing to estimate it from), from ``points`` points measured more than
    once."""

    tau: float = 0.0
    df: int = 0
    points: int = 0

    @property
    def known(self) -> bool:
        """Whether the spread was estimated (even as 0): at least :data:`MIN_DF` degrees of
        freedom (one difference alone has t's 1-df tails, Cauchy's: a capacity of 284 tok/s
        read [0–535] with it, an honest "one pair cannot bound this")."""
        return self.df >= MIN_DF

    def text(self) -> str:
        """``±7.9 % between measurements (ν = 4)``, or ``not estimated (…)``."""
        if not self.known:
            return ("not estimated (no point measured twice)" if self.df == 0 else
                    f"not estimated (ν = {self.df}: fewer than {MIN_DF} degrees of freedom)")
        return f"±{100 * (math.exp(self.tau) - 1):.1f} % between measurements (ν = {self.df})"


NO_SPREAD = Spread()


def measurement_log_rate(req: Requests) -> tuple[float, float] | None:
    """One measurement's ``(log X, v)`` (module docstring): ``X`` its output tokens/s over its
    steady state, ``v`` the delta-method variance of the log of its service rate over its
    sessions; None when it holds fewer than 2 sessions with tokens or no time to divide by."""
    if req.duration_s <= 0 or req.n == 0:
        return None
    tokens = float(req.tokens.sum())
    if tokens <= 0:
        return None
    served = np.where(np.isnan(req.e2el), 0.0, req.tokens_out())
    busy = np.nan_to_num(req.e2el, nan=0.0)
    groups = req.clusters()
    y = np.array([served[g].sum() for g in groups])
    x = np.array([busy[g].sum() for g in groups])
    n = int(np.count_nonzero(x > 0))
    if n < 2 or y.sum() <= 0 or x.sum() <= 0:
        return None
    z = y / y.sum() - x / x.sum()
    return math.log(tokens / req.duration_s), float(len(groups) / (len(groups) - 1) * np.sum(z * z))


def _q(groups: Sequence[tuple[np.ndarray, np.ndarray]], tau2: float) -> float:
    total = 0.0
    for x, v in groups:
        w = 1.0 / (tau2 + v)
        mean = float(np.sum(w * x) / np.sum(w))
        total += float(np.sum(w * (x - mean) ** 2))
    return total


def estimate(groups: Iterable[Sequence[tuple[float, float]]]) -> Spread:
    """The run's :class:`Spread` from ``groups``: per point measured at least twice, each
    measurement's ``(log X, v)`` (:func:`measurement_log_rate`); measurements that are not finite
    and groups of fewer than two are ignored. Paule–Mandel by bisection on ``τ²`` (module docstring)."""
    kept = []
    for g in groups:
        finite = [m for m in g if math.isfinite(m[0]) and math.isfinite(m[1]) and m[1] >= 0]  # a hand-edited prior
        if len(finite) >= 2:
            x = np.array([m[0] for m in finite], dtype=float)
            v = np.maximum(np.array([m[1] for m in finite], dtype=float), 1e-12)
            kept.append((x, v))
    df = sum(x.size - 1 for x, _ in kept)
    if df == 0:
        return NO_SPREAD
    if _q(kept, 0.0) <= df:
        return Spread(0.0, df, len(kept))
    lo, hi = 0.0, _MAX_TAU2
    if _q(kept, hi) > df:
        return Spread(math.sqrt(hi), df, len(kept))
    for _ in range(80):  # Q is decreasing in τ²: bisect to ~1e-24 of the bracket
        mid = 0.5 * (lo + hi)
        if _q(kept, mid) > df:
            lo = mid
        else:
            hi = mid
    return Spread(math.sqrt(0.5 * (lo + hi)), df, len(kept))


def groups_of(ladders: Iterable[Sequence[Sequence[Requests]]]) -> list[list[tuple[float, float]]]:
    """The evidence of a run's engines' ``ladders`` (each a sequence of points, each point the
    :class:`Requests` of its measurements): per point measured more than once, each
    measurement's :func:`measurement_log_rate`."""
    out = []
    for ladder in ladders:
        for point in ladder:
            whole = _comparable(point)
            if len(whole) >= 2:
                group = [m for r in whole if (m := measurement_log_rate(r)) is not None]
                if len(group) >= 2:
                    out.append(group)
    return out


def _comparable(point: Sequence[Requests]) -> list[Requests]:
    """The measurements of one point that are alike enough to show the machine's noise: none
    with a failed request (a failure changes the throughput for reasons of its own), and none cut
    short: fewer than :data:`WHOLE` of the point's largest request count (a brief low end, a
    climb's point stopped once its SLO had failed: a shorter window read at another phase of the
    load, 2.2 times as spread as whole ones on make bench's runs of 2026-12-07)."""
    ok = [r for r in point if r.n > 0 and bool(np.all(r.ok))]
    if not ok:
        return []
    most = max(r.n for r in ok)
    return [r for r in ok if r.n >= WHOLE * most]


def spread_of(ladders: Iterable[Sequence[Sequence[Requests]]],
              prior: Iterable[Sequence[tuple[float, float]]] = (), prior_df: int | None = None) -> Spread:
    """The :class:`Spread` of a run from its engines' ladders (:func:`groups_of`), pooled with
    ``prior``: the groups earlier runs on the same machine measured
    (:class:`results.schema.SpreadPrior`); ``prior_df``: the degrees of freedom those groups are
    worth, where fewer than their count (points measured across runs share each run's state: the
    runs, not the points, are the independent draws of it); None: their count."""
    own = groups_of(ladders)
    s = estimate([*own, *prior])
    if prior_df is None or not s.df:
        return s
    return Spread(s.tau, min(s.df, sum(len(g) - 1 for g in own) + prior_df), s.points)


def machine_draws(spread: Spread, measurements: Sequence[int], resamples: int, seed: int) -> np.ndarray:
    """Per point and draw, the log of the machine's factor on that point's times: a
    ``(len(measurements), resamples)`` array of ``τ̂ · T / √k`` (module docstring; ``k`` the point's
    measurements, at least 1; ``T`` Student's t with ``spread.df`` degrees of freedom, drawn on its
    own stream ``seed``; within ±5); zeros when the spread is unknown or 0."""
    k = np.maximum(np.asarray(measurements, dtype=float), 1.0)
    if not spread.known or spread.tau <= 0:
        return np.zeros((k.size, resamples))
    rng = np.random.default_rng([seed, 0x5eed])
    u = spread.tau * rng.standard_t(spread.df, (k.size, resamples)) / np.sqrt(k)[:, None]
    return np.clip(u, -_MAX_SHIFT, _MAX_SHIFT)  # t with 1 df reaches 1e5: a factor of e^5 already fails any point
