"""Repeats of one engine in one run (``bench run --repeats N``) → pooled metrics and the
headline numbers with their confidence intervals.

- **Pooled metrics** (:func:`pooled_metrics`): distributions (TTFT, TPOT, ITL, E2E latency)
  over every measured request of every repeat; rates (throughputs, goodput) over the *summed*
  measured time of the repeats — the time between repeats (other engines' turns, restarts) is
  not measured time; the achieved arrival rate is the median of the repeats' and the rate is
  valid only when every repeat's is.
- **Headline intervals** (:func:`headline_intervals`): per-request metrics by a two-stage
  bootstrap over repeats then requests (≥ 2 repeats), else over the requests of the one
  repeat; rates by a bootstrap of the median over the per-repeat values (≥ 2 repeats; with one
  there is no interval for a rate). ``harness.metrics.intervals`` has the methods and sources.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import numpy as np

from results.schema import Interval, Metrics, RequestRecord, metric_number
from results.schema.metric_registry import Metric, metrics

from .intervals import ConfidenceInterval
from .intervals import bootstrap_ci, headline_interval, median_ci_over_repeats
from .slo import SLO, meets_slos
from .summary import compute_metrics



def latency_headlines() -> dict[str, tuple[Metric, str]]:
    """Headline key → (metric, statistic) for every registered metric's ``intervals``
    (``"ttft_ms.p50"`` → (TTFT, ``"median"``)), in registry order."""
    return {f"{m.field}.{stat}": (m, "median" if stat == "p50" else stat) for m in metrics() for stat in m.intervals}

RATE_HEADLINES = ("output_throughput", "request_throughput", "goodput.request_goodput")
RESAMPLES = 1000  # bootstrap resamples per headline number (~10 ms each for 1,000 requests)


def by_repeat(records: Sequence[RequestRecord]) -> list[list[RequestRecord]]:
    """Measured records grouped by ``record.repeat``, in repeat order (empty repeats dropped)."""
    groups: dict[int, list[RequestRecord]] = {}
    for record in records:
        if record.phase == "measured":
            groups.setdefault(record.repeat, []).append(record)
    return [groups[k] for k in sorted(groups)]


def pooled_metrics(repeats: Sequence[Metrics], records: Sequence[RequestRecord], slos: Sequence[SLO] = (),
                   offered_rate: float | None = None, requested_rate: float | None = None) -> Metrics:
    """One engine's metrics over all its repeats (see module docstring); ``repeats``: each
    repeat's :func:`compute_metrics`, ``records``: the measured records of all of them.

    Raises ValueError for no repeats.
    """
    if not repeats:
        raise ValueError("pooled_metrics needs at least one repeat")
    if len(repeats) == 1:
        return repeats[0]
    pooled = compute_metrics(records, slos, offered_rate, requested_rate)
    duration = sum(m.duration_s for m in repeats)

    def per_s(total: float) -> float | None:
        return total / duration if duration > 0 else None

    update = {
        "duration_s": duration,
        "request_throughput": per_s(pooled.requests_completed),
        "output_throughput": per_s(pooled.total_output_tokens),
        "input_throughput": per_s(pooled.total_input_tokens),
        "total_token_throughput": per_s(pooled.total_output_tokens + pooled.total_input_tokens),
    }
    achieved = [m.achieved_rate for m in repeats if m.achieved_rate is not None]
    update["achieved_rate"] = float(np.median(achieved)) if achieved else None
    valid = [m.rate_valid for m in repeats]
    update["rate_valid"] = None if any(v is None for v in valid) else all(valid)
    if pooled.goodput is not None:
        update["goodput"] = pooled.goodput.model_copy(update={"request_goodput": per_s(pooled.goodput.good_requests)})
    if pooled.run_window is not None and repeats[0].run_window is not None:  # the limits are each repeat's
        limits = repeats[0].run_window.model_dump(include={"duration_s", "drain_timeout_s", "warmup_s", "cooldown_s"})
        update["run_window"] = pooled.run_window.model_copy(update=limits)
    if pooled.sessions is not None:  # session ids repeat across repeats: the aborted turns add up per repeat
        aborted = [m.sessions.aborted_turns if m.sessions else None for m in repeats]
        update["sessions"] = pooled.sessions.model_copy(
            update={"aborted_turns": None if None in aborted else sum(a or 0 for a in aborted)})
    return pooled.model_copy(update=update)


def _honest(ci: ConfidenceInterval) -> ConfidenceInterval:
    """An interval over per-repeat numbers, labelled with the coverage it really has for few
    repeats: a bootstrap over 2 values is their range, which holds the median with probability
    1 - 2 × 0.5² = 0.5, not 0.95 (for n values the range holds it with 1 - 2 × 0.5ⁿ: 0.75 for 3,
    0.875 for 4, 0.94 for 5)."""
    if ci.n >= 6:
        return ci
    coverage = 1 - 2 * 0.5 ** ci.n
    return replace(ci, confidence=min(ci.confidence, coverage),
                   method=f"{ci.method}; with {ci.n} repeats about the range, which holds the median "
                          f"with probability {coverage:.0%}, not {ci.confidence:.0%}")


def headline_intervals(repeats: Sequence[Metrics], records: Sequence[RequestRecord],
                       slos: Sequence[SLO] = (), seed: int = 0) -> dict[str, Interval]:
    """Each headline number (``ttft_ms.p99``, ``output_throughput`` ...) with its 95 % CI.

    ``repeats``: each repeat's metrics in repeat order; ``records``: their measured records.
    A number without any value (e.g. TPOT of one-token replies, goodput without SLOs) is
    left out.
    """
    groups = by_repeat(records)
    out: dict[str, Interval] = {}
    for key, (metric, stat) in latency_headlines().items():
        values = [[v for r in g if r.success or metric.over == "measured" for v in metric.values_of(r)] for g in groups]
        values = [v for v in values if v]
        if not values:
            continue
        ci = headline_interval(None, values if len(values) >= 2 else values[0], stat, n_resamples=RESAMPLES, seed=seed)
        out[key] = Interval(**ci.as_dict())
    for key in RATE_HEADLINES:
        per_repeat = [v for m in repeats if (v := metric_number(m, key)) is not None]
        if len(per_repeat) >= 2:
            ci = _honest(median_ci_over_repeats(per_repeat, n_resamples=RESAMPLES, seed=seed))
        elif per_repeat:
            ci = bootstrap_ci(per_repeat, "median", basis="repeats")  # one repeat: no interval for a rate
        else:
            continue
        out[key] = Interval(**ci.as_dict())
    if slos and groups:
        attained = [sum(meets_slos(r, slos) for r in g) / len(g) for g in groups]
        ci = (_honest(median_ci_over_repeats(attained, n_resamples=RESAMPLES, seed=seed)) if len(attained) >= 2
              else bootstrap_ci([float(meets_slos(r, slos)) for r in groups[0]], "mean", n_resamples=RESAMPLES,
                                seed=seed))
        out["goodput.slo_attainment"] = Interval(**ci.as_dict())
    return out
