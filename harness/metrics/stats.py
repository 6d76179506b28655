"""Distributions: mean, median, std and numpy-linear percentiles (vLLM's convention), plain and
error-adjusted (a failure = +inf latency)."""

from __future__ import annotations

import math
from typing import Iterable, Sequence

import numpy as np

PERCENTILES: tuple[tuple[str, float], ...] = (
    ("p50", 50.0),
    ("p90", 90.0),
    ("p95", 95.0),
    ("p99", 99.0),
    ("p99_9", 99.9),
)

STAT_KEYS = ("mean", "median", "std", "p50", "p90", "p95", "p99", "p99_9", "max")

def distribution(values: Iterable[float]) -> dict[str, float | None]:
    """mean, median, std (population), p50/p90/p95/p99/p99.9 (numpy linear), max.

    ``values`` in any unit; the result is in the same unit. An empty input gives ``None`` for
    every key (no invented zeros).
    """
    arr = np.asarray(list(values), dtype=np.float64)
    if arr.size == 0:
        return {k: None for k in STAT_KEYS}
    out: dict[str, float | None] = {
        "mean": float(arr.mean()),
        "median": float(np.median(arr)),
        "std": float(arr.std()),
    }
    for name, q in PERCENTILES:
        out[name] = float(np.percentile(arr, q, method="linear"))
    out["max"] = float(arr.max())
    return out

def error_adjusted_distribution(values: Sequence[float], num_failed: int) -> dict[str, float | None]:
    """Percentiles where each failed request counts as +inf latency (ms).

    A percentile whose interpolation touches +inf is reported as ``None`` (= infinite).
    ``mean``/``std`` are ``None`` as soon as one request failed.
    """
    arr = np.asarray(list(values) + [math.inf] * num_failed, dtype=np.float64)
    if arr.size == 0:
        return {k: None for k in STAT_KEYS}
    out: dict[str, float | None] = {}
    finite = num_failed == 0
    out["mean"] = float(arr.mean()) if finite else None
    out["std"] = float(arr.std()) if finite else None
    srt = np.sort(arr)
    for name, q in (("median", 50.0),) + PERCENTILES:
        # numpy's linear interpolation with inf gives nan/inf; compute the index rule directly
        pos = (srt.size - 1) * q / 100.0
        lo, hi = int(math.floor(pos)), int(math.ceil(pos))
        if math.isinf(srt[hi]) or math.isinf(srt[lo]):
            out[name] = None
        else:
            out[name] = float(srt[lo] + (srt[hi] - srt[lo]) * (pos - lo))
    out["max"] = None if not finite else float(srt[-1])
    return out
