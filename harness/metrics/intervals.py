"""Confidence intervals for headline metrics and ties in a ranking (issue 12, "repeats and intervals").

Pure functions over numbers (any unit; a :class:`ConfidenceInterval` is in the unit of its input, e.g. ms
for latencies, req/s for rates). Statistics: ``median``, ``mean`` and percentiles ``pNN`` /
``pNN_N`` (``p99_9`` = p99.9), all with numpy's ``linear`` method like :mod:`.stats`.

Method and sources:

- **Interval**: the bootstrap *percentile* interval — the (1−c)/2 and (1+c)/2 quantiles of the
  statistic over resamples drawn with replacement (Efron & Tibshirani, *An Introduction to the
  Bootstrap*, 1993, ch. 13). Resampling is vectorised: one ``rng.integers`` draw of shape
  ``(n_resamples, n)`` (in row chunks of ≤ 4 M values), then the statistic along axis 1.
  Deterministic given ``seed`` (``numpy.random.default_rng``).
- **One repeat** → bootstrap over the requests (``basis="requests"``).
- **≥ 2 repeats with their requests** → *two-stage* bootstrap (Davison & Hinkley, *Bootstrap
  Methods and their Application*, 1997, §3.8 "hierarchical data", strategy 2): resample the
  repeats with replacement, then the requests within each picked repeat, and take the statistic
  of the pooled resample. Unlike a bootstrap stratified by repeat (E&T ch. 6; D&H §3.7), which
  treats the repeats as fixed and so measures only within-repeat sampling noise, this one widens
  when the repeats disagree — run-to-run noise is what the interval must show. D&H note that the
  second stage makes it somewhat conservative; with 2–3 repeats that is the right direction
  (a bootstrap over 2–3 per-repeat numbers alone is degenerate: with 2 it can only give
  [min, max], which holds the median of repeat values with probability 1/2).
- **≥ 2 repeats, per-repeat numbers only** (throughput, capacity) → bootstrap of the median of
  the per-repeat values (coarse for < 5 repeats, see above; the ``n`` field says how many).
- **Ties**: two engines are tied when their intervals overlap. Overlap of two 95% intervals is a
  conservative test of a difference (Schenker & Gentleman, *The American Statistician* 55(3),
  2001): non-overlap means a difference well beyond 5% significance; overlap does not prove
  equality. So "tied" reads "not shown different", the safe reading for "could noise flip it".
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any, Sequence

import numpy as np

BASES = ("repeats", "requests")
_MAX_ELEMS = 4_000_000  # values per resampling chunk (32 MB of float64)


@dataclass(frozen=True)
class ConfidenceInterval:
    """A statistic with its confidence interval, in the unit of the input values: what the
    functions here compute (a run stores it as ``results.schema.Interval``, from :meth:`as_dict`).

    ``point``: the statistic on the full sample (pooled requests for the two-stage method;
    median of the values for a bootstrap over per-repeat numbers). ``low``/``high``: the
    interval's bounds (``low == high == point`` when ``n == 1``). ``n``: sample size of the
    basis (repeats or requests). ``confidence``: e.g. 0.95. ``method``: how it was computed, in
    words ("bootstrap over requests", ...). ``cv``: coefficient of variation std(ddof=1)/mean of
    the basis sample (per-repeat statistics for basis "repeats"), ``None`` when n < 2 or mean 0.
    ``basis``: ``"repeats"`` or ``"requests"``.
    """

    point: float
    low: float
    high: float
    n: int
    confidence: float
    method: str
    cv: float | None
    basis: str = "requests"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def coefficient_of_variation(values: Sequence[float]) -> float | None:
    """std(ddof=1) / mean of ``values`` (dimensionless); ``None`` when n < 2 or the mean is 0."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.size < 2:
        return None
    mean = float(arr.mean())
    if mean == 0.0:
        return None
    return float(arr.std(ddof=1) / mean)


def _parse_stat(stat: str) -> float | None:
    """``None`` for the mean, else the percentile q ∈ [0, 100] (median = 50)."""
    s = stat.strip().lower()
    if s == "mean":
        return None
    if s == "median":
        return 50.0
    m = re.fullmatch(r"p(\d+(?:_\d+)?)", s)
    if m and float(m.group(1).replace("_", ".")) <= 100.0:
        return float(m.group(1).replace("_", "."))
    raise ValueError(f"unknown statistic {stat!r}: use median, mean or a percentile such as p99 or p99_9")


def _sample(values: Sequence[float], what: str) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{what} must be a flat list of numbers, got an array of shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"no {what} to compute an interval from: the sample is empty")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{what} contain nan or inf: leave failed requests out before computing an interval")
    return arr


def _check(confidence: float, n_resamples: int, basis: str) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1 (e.g. 0.95), got {confidence}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be at least 1, got {n_resamples}")
    if basis not in BASES:
        raise ValueError(f"basis must be 'repeats' or 'requests', got {basis!r}")


def _point(arr: np.ndarray, q: float | None) -> float:
    return float(arr.mean()) if q is None else float(np.percentile(arr, q, method="linear"))


def _rows_stat(samples: np.ndarray, q: float | None) -> np.ndarray:
    return samples.mean(axis=1) if q is None else np.percentile(samples, q, axis=1, method="linear")


def _ragged_rows_stat(vals: np.ndarray, counts: np.ndarray, q: float | None) -> np.ndarray:
    """Row statistic where row i holds ``counts[i]`` values and NaN padding (numpy-linear rule)."""
    if q is None:
        return np.nansum(vals, axis=1) / counts
    srt = np.sort(vals, axis=1)  # NaN sorts last
    pos = (counts - 1) * (q / 100.0)
    lo = np.floor(pos).astype(np.intp)
    hi = np.minimum(lo + 1, counts - 1)
    v_lo = np.take_along_axis(srt, lo[:, None], axis=1)[:, 0]
    v_hi = np.take_along_axis(srt, hi[:, None], axis=1)[:, 0]
    return v_lo + (v_hi - v_lo) * (pos - lo)


def _percentile_bounds(boot: np.ndarray, confidence: float) -> tuple[float, float]:
    """E&T ch. 13 percentile interval: the (1−c)/2 and (1+c)/2 quantiles of the bootstrap draws."""
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.percentile(boot, [100.0 * alpha, 100.0 * (1.0 - alpha)], method="linear")
    return float(lo), float(hi)


def bootstrap_ci(
    values: Sequence[float],
    stat: str = "median",
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
    basis: str = "requests",
) -> ConfidenceInterval:
    """Percentile-bootstrap interval of ``stat`` over a 1-D sample (E&T ch. 13).

    ``values`` in any unit (the result is in the same unit); ``basis`` labels what one value is
    (``"requests"``: one request's latency; ``"repeats"``: one repeat's number) and goes into
    ``method``. n == 1 gives ``low == high == point`` and ``cv=None``. An empty sample or a
    non-finite value raises :class:`ValueError`.
    """
    q = _parse_stat(stat)
    _check(confidence, n_resamples, basis)
    arr = _sample(values, basis)
    n = arr.size
    point = _point(arr, q)
    if n == 1:
        return ConfidenceInterval(point, point, point, 1, confidence, f"single {basis[:-1]}: no interval", None, basis)
    rng = np.random.default_rng(seed)
    boot = np.empty(n_resamples)
    rows = max(1, _MAX_ELEMS // n)
    for start in range(0, n_resamples, rows):
        b = min(rows, n_resamples - start)
        boot[start : start + b] = _rows_stat(arr[rng.integers(0, n, size=(b, n))], q)
    low, high = _percentile_bounds(boot, confidence)
    return ConfidenceInterval(point, low, high, n, confidence, f"bootstrap over {basis}", coefficient_of_variation(arr),
                              basis)


def median_ci_over_repeats(
    per_repeat_values: Sequence[float], confidence: float = 0.95, n_resamples: int = 2000, seed: int = 0
) -> ConfidenceInterval:
    """Bootstrap interval of the median of per-repeat numbers (one number per repeat, any unit).

    For repeat-level quantities without a per-request distribution (throughput, goodput, found
    capacity). Needs ≥ 2 repeats. Coarse below 5 repeats (module docstring); prefer
    :func:`two_stage_bootstrap_ci` where the per-request values exist.
    """
    if len(per_repeat_values) < 2:
        raise ValueError(f"an interval over repeats needs at least 2 repeats, got {len(per_repeat_values)}")
    return bootstrap_ci(per_repeat_values, "median", confidence, n_resamples, seed, basis="repeats")


def two_stage_bootstrap_ci(
    requests_by_repeat: Sequence[Sequence[float]],
    stat: str = "median",
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
) -> ConfidenceInterval:
    """Two-stage bootstrap (D&H §3.8): repeats with replacement, then requests within each.

    ``requests_by_repeat``: one list of per-request values per repeat (any unit, ≥ 2 repeats,
    each non-empty; sizes may differ). ``point`` = ``stat`` of all requests pooled; ``n`` = the
    number of repeats; ``cv`` = CV of the per-repeat ``stat`` values (run-to-run noise).
    """
    q = _parse_stat(stat)
    _check(confidence, n_resamples, "repeats")
    groups = [_sample(g, "requests of a repeat") for g in requests_by_repeat]
    k = len(groups)
    if k < 2:
        raise ValueError(f"a two-stage bootstrap needs at least 2 repeats, got {k}: use bootstrap_ci over requests")
    pooled = np.concatenate(groups)
    sizes = np.array([g.size for g in groups])
    offsets = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    width = int(sizes.max())
    cols = np.arange(width)
    rng = np.random.default_rng(seed)
    boot = np.empty(n_resamples)
    rows = max(1, _MAX_ELEMS // (k * width))
    for start in range(0, n_resamples, rows):
        b = min(rows, n_resamples - start)
        pick = rng.integers(0, k, size=(b, k))  # stage 1: which repeats
        n_pick = sizes[pick]
        high = width if bool(np.all(sizes == width)) else n_pick[:, :, None]
        within = rng.integers(0, high, size=(b, k, width))  # stage 2: requests inside each
        vals = pooled[offsets[pick][:, :, None] + within]
        vals[cols[None, None, :] >= n_pick[:, :, None]] = np.nan
        boot[start : start + b] = _ragged_rows_stat(vals.reshape(b, k * width), n_pick.sum(axis=1), q)
    low, high_ = _percentile_bounds(boot, confidence)
    cv = coefficient_of_variation([_point(g, q) for g in groups])
    method = "bootstrap over repeats (two-stage: repeats, then requests within each)"
    return ConfidenceInterval(_point(pooled, q), low, high_, k, confidence, method, cv, "repeats")


def _grouped(values: Sequence[Any]) -> list[Sequence[float]] | None:
    """The per-repeat lists if ``values`` is a list of lists, ``None`` if it is a flat list."""
    if len(values) == 0 or all(np.ndim(v) == 0 for v in values):
        return None
    if all(np.ndim(v) == 1 for v in values):
        return list(values)
    raise ValueError("per-request values must be a flat list of numbers or one list per repeat")


def headline_interval(
    per_repeat_values: Sequence[float] | None,
    per_request_values: Sequence[float] | Sequence[Sequence[float]],
    stat: str = "median",
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
) -> ConfidenceInterval:
    """The interval for one headline metric, choosing the basis; ``method`` states which.

    ``per_request_values``: the requests' values (ms, ...), flat or one list per repeat.
    ``per_repeat_values``: the metric per repeat (may be ``None``). Rule, first match:

    1. ≥ 2 repeats of requests → :func:`two_stage_bootstrap_ci` (basis "repeats");
    2. ≥ 2 per-repeat values → :func:`median_ci_over_repeats` (basis "repeats");
    3. requests of one repeat → :func:`bootstrap_ci` over them (basis "requests");
    4. one per-repeat value and no requests → that value, no interval (basis "repeats").
    """
    grouped = _grouped(per_request_values)
    if grouped is not None and len(grouped) >= 2:
        return two_stage_bootstrap_ci(grouped, stat, confidence, n_resamples, seed)
    n_repeats = 0 if per_repeat_values is None else len(per_repeat_values)
    if n_repeats >= 2:
        return median_ci_over_repeats(per_repeat_values, confidence, n_resamples, seed)  # type: ignore[arg-type]
    flat = grouped[0] if grouped is not None else per_request_values
    if len(flat) == 0 and n_repeats == 1:
        return bootstrap_ci(per_repeat_values, "median", confidence, n_resamples, seed, basis="repeats")  # type: ignore[arg-type]
    return bootstrap_ci(flat, stat, confidence, n_resamples, seed, basis="requests")  # type: ignore[arg-type]


def intervals_overlap(a: ConfidenceInterval, b: ConfidenceInterval) -> bool:
    """True when the closed intervals [a.low, a.high] and [b.low, b.high] share a point."""
    return a.low <= b.high and b.low <= a.high


def could_flip(winner: ConfidenceInterval, runner_up: ConfidenceInterval) -> bool:
    """True when measured noise could reverse the order of the two: their intervals overlap."""
    return intervals_overlap(winner, runner_up)


def rank_with_ties(scores: dict[str, ConfidenceInterval], higher_is_better: bool = True) -> list[list[str]]:
    """Engines in rank order, grouped into ties.

    Sort by ``point`` (best first; equal points by name). Walk the list: an engine joins the
    current group when its interval overlaps that of the group's *leader* (its best engine),
    else it leads a new group. Comparing with the leader, not with any member, stops chains
    (A≈B, B≈C, A clearly better than C gives [[A, B], [C]]): a group is "the engines not shown
    worse than its leader". ``higher_is_better=False`` for latencies.
    """
    sign = -1.0 if higher_is_better else 1.0
    order = sorted(scores, key=lambda name: (sign * scores[name].point, name))
    groups: list[list[str]] = []
    for name in order:
        if groups and intervals_overlap(scores[groups[-1][0]], scores[name]):
            groups[-1].append(name)
        else:
            groups.append([name])
    return groups
