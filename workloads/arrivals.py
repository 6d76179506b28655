"""Seeded arrival processes: when each request (or session) of a workload is due.

All functions return *offsets in seconds from the start of the measured phase* (an absolute
schedule: the runner sleeps until ``start + offset``, never cumulatively), sorted ascending,
the first arrival at the first drawn gap (vLLM's ``benchmark_serving`` convention: it sleeps
one gap before each request, including the first).

Processes (``process=``):

- ``"gamma"``: i.i.d. gamma inter-arrival gaps with shape ``k = burstiness`` and scale
  ``θ = 1 / (rate · burstiness)``, so the mean gap is ``1/rate`` and the coefficient of
  variation (CV) of the gaps is ``1/sqrt(burstiness)``: ``burstiness < 1`` is burstier than
  Poisson, ``> 1`` more regular (vLLM ``benchmarks/serve.py``, ``--burstiness``).
- ``"poisson"``: gamma with ``burstiness = 1`` (exponential gaps, CV 1).
- ``"constant"``: evenly spaced gaps of exactly ``1/rate`` (CV 0).
- ``rate = inf``: every offset is 0 (all requests at once; use the runner's
  ``max_concurrency`` for a closed loop).

Trace timestamps are not a process here: the trace workloads turn recorded timestamps into
offsets themselves (divided by their ``time_scale``); :func:`scale_timestamps` is the shared
helper.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

PROCESSES = ("gamma", "poisson", "constant")


class ArrivalError(ValueError):
    """Bad arrival-process parameters (the message names the parameter and the fix)."""


def arrival_offsets(
    n: int, *, rate: float, burstiness: float = 1.0, seed: int, process: str = "gamma"
) -> list[float]:
    """Offsets (seconds from start, ascending, length ``n``) of ``n`` arrivals.

    ``rate``: mean arrivals per second (``> 0``; ``inf`` → all offsets 0).
    ``burstiness``: gamma shape ``k`` (``> 0``; ignored by ``"poisson"`` and ``"constant"``).
    ``seed``: numpy ``default_rng`` seed; the same arguments always give the same offsets.
    ``process``: one of :data:`PROCESSES` (see the module docstring for the formulas).

    Raises :class:`ArrivalError` (a ``ValueError``) for ``n < 0``, ``rate <= 0`` or NaN,
    ``burstiness <= 0`` or an unknown process.
    """
    if n < 0:
        raise ArrivalError(f"number of arrivals must be >= 0, got {n}")
    if process not in PROCESSES:
        raise ArrivalError(f"unknown arrival process {process!r}: use one of {', '.join(PROCESSES)}")
    if not (rate > 0) or math.isnan(rate):
        raise ArrivalError(f"request rate must be > 0 (or inf for all at once), got {rate}")
    if not (burstiness > 0) or math.isinf(burstiness):
        raise ArrivalError(f"burstiness must be a finite number > 0 (1 = Poisson), got {burstiness}")
    if n == 0:
        return []
    if math.isinf(rate):
        return [0.0] * n
    if process == "constant":
        gaps = np.full(n, 1.0 / rate)
    else:
        shape = 1.0 if process == "poisson" else burstiness
        rng = np.random.default_rng(seed)
        gaps = rng.gamma(shape=shape, scale=1.0 / (rate * shape), size=n)
    return np.cumsum(gaps).tolist()


def scale_timestamps(timestamps_s: Sequence[float], time_scale: float) -> list[float]:
    """Trace timestamps (seconds, any origin) → offsets from the first one, divided by ``time_scale``.

    ``time_scale = 2`` replays the trace twice as fast (double the rate); ``0.5`` half as fast.
    Raises :class:`ArrivalError` for ``time_scale <= 0`` or timestamps that go backwards.
    """
    if not (time_scale > 0) or math.isinf(time_scale):
        raise ArrivalError(f"time scale must be a finite number > 0 (2 = replay twice as fast), got {time_scale}")
    if not timestamps_s:
        return []
    t0 = timestamps_s[0]
    out = []
    prev = t0
    for i, t in enumerate(timestamps_s):
        if t < prev:
            raise ArrivalError(f"trace timestamps must not decrease (entry {i}: {t} < {prev}): sort the trace first")
        prev = t
        out.append((t - t0) / time_scale)
    return out


def windowed_rate_offsets(
    windows: Sequence[tuple[float, float]], *, window_s: float, seed: int, max_arrivals: int | None = None
) -> list[float]:
    """Arrivals for piecewise-stationary rate windows (ServeGen's per-window rate + CV).

    ``windows``: ``(rate_rps, cv)`` per window, in order; each window lasts
    ``window_s`` seconds and draws gamma gaps with mean ``1/rate`` and CV ``cv`` (shape
    ``1/cv²``; cv 0 → constant), the process restarting at each window start. Idle windows
    (rate 0) produce nothing. Stops after ``max_arrivals`` when given. Source: ServeGen (Xiang et al.
    2025, §3: per-window Gamma/Weibull fits of the inter-arrival times).
    Raises :class:`ArrivalError` for a negative rate or CV.
    """
    rng = np.random.default_rng(seed)
    out: list[float] = []
    for i, (rate, cv) in enumerate(windows):
        if rate < 0 or cv < 0:
            raise ArrivalError(f"window {i}: rate and cv must be >= 0, got rate={rate}, cv={cv}")
        if rate == 0:
            continue
        start = i * window_s
        t = start
        while True:
            if cv == 0:
                gap = 1.0 / rate
            else:
                shape = 1.0 / (cv * cv)
                gap = float(rng.gamma(shape=shape, scale=1.0 / (rate * shape)))
            t += gap
            if t >= start + window_s:
                break
            out.append(t)
            if max_arrivals is not None and len(out) >= max_arrivals:
                return out
    return out
