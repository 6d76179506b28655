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
  ``burstiness = inf`` is the limit of that family: every gap exactly ``1/rate`` (CV 0), the
  ``"constant"`` process (vLLM's convention: its ``get_request`` uses the delay ``1/rate``
  when ``burstiness == inf``, "the delay time becomes constant").
- ``"poisson"``: gamma with ``burstiness = 1`` (exponential gaps, CV 1).
- ``"constant"``: evenly spaced gaps of exactly ``1/rate`` (CV 0).
- ``rate = inf``: every offset is 0 (all requests at once; use the runner's
  ``max_concurrency`` for a closed loop).

**The offered load is the requested load.** A drawn (gamma/Poisson) schedule is rescaled
so that it offers exactly ``rate``: every drawn gap is multiplied by one factor, so the
draw's shape (the gaps' proportions, hence their CV and burst pattern) is kept and only its
time unit changes. vLLM (``vllm bench serve``) does the same: without the rescale, the rate
of ``n`` drawn arrivals is off by about ``1/sqrt(n-1)`` (18 % at 32 requests; ``--request-rate
2`` with 32 requests and seed 0 drew 1.71 req/s, the default 4-session agentic run at 0.5
sessions/s drew 1.44).
vLLM makes its ``N`` cumulative gaps, counted from the start including the lead gap
before the first request, sum to ``N/rate``. Here the ``N - 1`` gaps *between the first and
the last arrival* sum to ``(N - 1)/rate``, so that :func:`workloads.stats.schedule_rate`
``(n-1) / (last - first)`` — the formula ``harness.metrics`` uses for the achieved rate —
gives ``rate`` exactly (to float error): achieved vs offered then compares like with like,
and the runner, which starts its clock at the first arrival (the lead gap is never waited
out), really offers ``rate``. Both conventions make the mean counted gap ``1/rate`` and the
schedule span about ``N/rate`` from the start; vLLM's, read by the metrics' formula, would
still miss the rate on short schedules (the default agentic run: 0.62 instead of 0.5
sessions/s) because its lead gap is part of the sum. One arrival has no gap between
arrivals: it is put at ``1/rate`` (vLLM's ``N/rate`` for ``N = 1``). ``rescale=False`` gives
the raw draw.

Trace timestamps are not a process here: the trace workloads turn recorded timestamps into
offsets themselves (divided by their ``time_scale``) and are never rescaled (their offered
rate is the trace's); :func:`scale_timestamps` is the shared helper, and
:func:`windowed_rate_offsets` (ServeGen's rate windows) is a trace replay too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

PROCESSES = ("gamma", "poisson", "constant")


class ArrivalError(ValueError):
    """Bad arrival-process parameters (the message names the parameter and the fix)."""


def arrival_offsets(
    n: int, *, rate: float, burstiness: float = 1.0, seed: int, process: str = "gamma", rescale: bool = True
) -> list[float]:
    """Offsets (seconds from start, ascending, length ``n``) of ``n`` arrivals.

    ``rate``: the requested mean arrival rate per second (``> 0``; ``inf`` → all offsets 0).
    ``burstiness``: gamma shape ``k`` (``> 0``; ``inf`` = constant gaps of exactly ``1/rate``,
    vLLM's convention; ignored by ``"poisson"`` and ``"constant"``).
    ``seed``: numpy ``default_rng`` seed; the same arguments always give the same offsets.
    ``process``: one of :data:`PROCESSES` (see the module docstring for the formulas).
    ``rescale``: scale a drawn schedule (gamma/Poisson) by one factor so that
    ``(n-1) / (last - first) == rate`` (``n >= 2``; one arrival lands at ``1/rate``), keeping the
    gaps' proportions — see "The offered load is the requested load" in the module
    docstring. ``False``: the raw draw, whose rate is only ``rate`` on average.

    A constant schedule (``"constant"``, or ``"gamma"`` with ``burstiness = inf``) is
    ``[1/rate, 2/rate, …, n/rate]``: it offers ``rate`` already, so it is never rescaled.

    Raises :class:`ArrivalError` (a ``ValueError``) for ``n < 0``, ``rate <= 0`` or NaN,
    ``burstiness <= 0`` or NaN, or an unknown process.
    """
    if n < 0:
        raise ArrivalError(f"number of arrivals must be >= 0, got {n}")
    if process not in PROCESSES:
        raise ArrivalError(f"unknown arrival process {process!r}: use one of {', '.join(PROCESSES)}")
    if not (rate > 0) or math.isnan(rate):
        raise ArrivalError(f"request rate must be > 0 (or inf for all at once), got {rate}")
    if not (burstiness > 0) or math.isnan(burstiness):
        raise ArrivalError(f"burstiness must be a number > 0 (1 = Poisson, inf = constant spacing), got {burstiness}")
    if n == 0:
        return []
    if math.isinf(rate):
        return [0.0] * n
    if process == "constant" or (process == "gamma" and math.isinf(burstiness)):
        return (np.arange(1, n + 1, dtype=np.float64) / rate).tolist()  # exactly the rate already
    shape = 1.0 if process == "poisson" else burstiness
    rng = np.random.default_rng(seed)
    offsets = np.cumsum(rng.gamma(shape=shape, scale=1.0 / (rate * shape), size=n))
    return (offsets * _rescale_factor(offsets, rate)).tolist() if rescale else offsets.tolist()


def _rescale_factor(offsets: np.ndarray, rate: float) -> float:
    """The one factor that makes the drawn ``offsets`` offer ``rate``: the ``n-1`` gaps between
    the first and last arrival then sum to ``(n-1)/rate``; one arrival lands at ``1/rate``.
    Degenerate draws (gaps that underflowed to 0, possible at a very small burstiness): when
    every arrival after the first drew a zero gap, vLLM's factor (the last offset at ``n/rate``);
    when every gap is 0, no scaling (the schedule is all at once either way)."""
    n = len(offsets)
    span = float(offsets[-1] - offsets[0])
    if n >= 2 and span > 0:
        return ((n - 1) / rate) / span
    if offsets[-1] > 0:
        return (n / rate) / float(offsets[-1])
    return 1.0


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


# --- duration-based schedules and ramps ----------------------------------------------------------
RAMP_STRATEGIES = ("linear", "exponential")


def count_within(duration_s: float, rate: float) -> int:
    """Arrivals at ``rate`` per second that fall within ``duration_s`` seconds of the first one:
    the largest ``n`` with ``(n - 1) / rate < duration_s``, i.e. ``ceil(duration_s · rate)`` (at
    least 1; a product within 1e-9 of an integer counts as that integer, so 10 s at 4 req/s is
    40, not 41 from float error). A drawn schedule of ``n`` arrivals is rescaled to span
    ``(n - 1) / rate`` (:func:`arrival_offsets`), so it fits the duration too. Raises
    :class:`ArrivalError` for a duration or rate that is not a finite number > 0."""
    if not (duration_s > 0) or not math.isfinite(duration_s):
        raise ArrivalError(f"duration must be a finite number of seconds > 0, got {duration_s}")
    if not (rate > 0) or not math.isfinite(rate):
        raise ArrivalError(f"request rate must be a finite number > 0 for a duration-based schedule, got {rate}")
    product = duration_s * rate
    nearest = round(product)
    n = nearest if abs(product - nearest) <= 1e-9 * max(1.0, product) else math.ceil(product)
    return max(1, int(n))


def ramp_rates(n: int, strategy: str, start_rps: float, end_rps: float) -> np.ndarray:
    """The rate of each of ``n`` requests under a ramp, vLLM's ``_get_current_request_rate``
    (``vllm/benchmarks/serve.py``): with ``progress = i / max(n - 1, 1)`` for request ``i``,
    ``linear``: ``start + (end - start) · progress``; ``exponential``: ``start · (end /
    start) ** progress``. So the first request is at the start rate and the last at the end
    rate: the rate ramps over the run, by request index."""
    if strategy not in RAMP_STRATEGIES:
        raise ArrivalError(f"unknown ramp-up strategy {strategy!r}: use one of {', '.join(RAMP_STRATEGIES)}")
    if not (0 < start_rps <= end_rps) or not math.isfinite(end_rps):
        raise ArrivalError(f"a ramp needs 0 < start rps <= end rps (finite), got {start_rps} and {end_rps}")
    progress = np.arange(n, dtype=np.float64) / max(n - 1, 1)
    if strategy == "linear":
        return start_rps + (end_rps - start_rps) * progress
    return start_rps * (end_rps / start_rps) ** progress


def _ramp_gaps(n: int, burstiness: float, seed: int, process: str) -> np.ndarray | None:
    """Unit-rate gaps of the ramp's ``n`` requests (a gap at rate r is this / r): None for
    constant spacing, else standard gamma draws of shape ``k`` divided by ``k`` (gamma with mean
    1; the first ``m`` draws of ``n`` equal a draw of ``m``, so a longer schedule extends a
    shorter one's draws)."""
    if process not in PROCESSES:
        raise ArrivalError(f"unknown arrival process {process!r}: use one of {', '.join(PROCESSES)}")
    if not (burstiness > 0) or math.isnan(burstiness):
        raise ArrivalError(f"burstiness must be a number > 0 (1 = Poisson, inf = constant spacing), got {burstiness}")
    if process == "constant" or (process == "gamma" and math.isinf(burstiness)):
        return None
    shape = 1.0 if process == "poisson" else burstiness
    return np.random.default_rng(seed).standard_gamma(shape, size=n) / shape


def ramp_offsets(n: int, *, strategy: str, start_rps: float, end_rps: float, burstiness: float = 1.0, seed: int,
                 process: str = "gamma") -> list[float]:
    """Offsets (seconds, ascending) of ``n`` arrivals whose rate ramps from ``start_rps`` to
    ``end_rps`` (:func:`ramp_rates`). vLLM's ``get_request``: request ``i`` waits one gap drawn
    at its own rate ``r_i`` (gamma with shape ``burstiness`` and scale ``1 / (r_i ·
    burstiness)``; exactly ``1 / r_i`` for constant spacing, ``burstiness = inf``), the offsets
    are the cumulative sums (the first is one gap after the start, like :func:`arrival_offsets`)
    and, as in vLLM, a ramp is never rescaled. Deterministic in ``seed``. Raises
    :class:`ArrivalError` for bad rates, burstiness or process, or ``n < 0``."""
    if n < 0:
        raise ArrivalError(f"number of arrivals must be >= 0, got {n}")
    rates = ramp_rates(n, strategy, start_rps, end_rps)
    unit = _ramp_gaps(n, burstiness, seed, process)
    gaps = 1.0 / rates if unit is None else unit / rates
    return np.cumsum(gaps).tolist()


def ramp_count_within(duration_s: float, *, strategy: str, start_rps: float, end_rps: float, burstiness: float = 1.0,
                      seed: int, process: str = "gamma", limit: int) -> int:
    """The most arrivals (at most ``limit``) a ramp over them fits into ``duration_s``: the
    largest ``n`` whose :func:`ramp_offsets` end less than ``duration_s`` after their first.
    That span grows with ``n`` (more gaps, and each request's rate falls as the ramp stretches
    over more requests), so a bisection finds it; the gamma draws are the same for every ``n``
    (see :func:`_ramp_gaps`). Raises :class:`ArrivalError` for a duration that is not a finite
    number > 0 or bad ramp parameters."""
    if not (duration_s > 0) or not math.isfinite(duration_s):
        raise ArrivalError(f"duration must be a finite number of seconds > 0, got {duration_s}")
    unit = _ramp_gaps(max(1, limit), burstiness, seed, process)

    def span(n: int) -> float:
        rates = ramp_rates(n, strategy, start_rps, end_rps)[1:]
        gaps = 1.0 / rates if unit is None else unit[1:n] / rates
        return float(gaps.sum())

    lo, hi = 1, max(1, limit)  # span(1) = 0 < duration: one arrival always fits
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if span(mid) < duration_s:
            lo = mid
        else:
            hi = mid - 1
    return lo


def schedule_offsets(n: int, *, rate: float, burstiness: float, seed: int, process: str,
                     ramp: tuple[str, float, float] | None = None) -> list[float]:
    """A workload's arrival offsets: :func:`ramp_offsets` for ``ramp`` = ``(strategy, start
    rps, end rps)`` (``rate`` is then unused), else :func:`arrival_offsets` at ``rate``."""
    if ramp is not None:
        strategy, start, end = ramp
        return ramp_offsets(n, strategy=strategy, start_rps=start, end_rps=end, burstiness=burstiness, seed=seed,
                            process=process)
    return arrival_offsets(n, rate=rate, burstiness=burstiness, seed=seed, process=process)
