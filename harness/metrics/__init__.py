"""Metric computation: request records → the numbers in ``summary.json``.

One convention, stated in every report and in the README ("Metric definitions"). All latencies are in
milliseconds, rates per second. Percentiles use numpy's ``linear`` method (vLLM's
``benchmark_serving`` convention). Only ``phase == "measured"`` records enter metrics.

Definitions (per request, from ``perf_counter_ns`` timestamps):

- **TTFT** = first token-bearing chunk − send.  **TTFT from scheduled** = first token-bearing
  chunk − scheduled (includes client-side queueing; exposes coordinated omission).
- **E2E latency** (``e2el``) = last token-bearing chunk − send.
- **TPOT** = (E2E − TTFT) / (output_tokens − 1), only for output_tokens ≥ 2; the summary is
  request-weighted (vLLM convention).
- **ITL** = every gap between consecutive token-bearing chunks, pooled over requests.
- **duration** = first send of the measured phase → last completion (``end_ns``) of it.
- **throughput** = successful requests' tokens (or count) / duration.
- **goodput** = successful requests meeting every per-request SLO / duration (DistServe,
  Zhong et al. 2024 §2); **SLO attainment** = good / all sent.
- **error-adjusted percentiles**: failures count as +inf latency; a percentile that lands
  on a failure is reported as ``None`` (JSON null = infinite).
"""

from .request import NS_PER_MS, NS_PER_S, e2el_ms, itls_ms, tpot_ms, ttft_from_scheduled_ms, ttft_ms
from .slo import SLO, SLO_METRICS, SLOError, meets_slos, parse_slos, slo_percentile_value
from .stats import PERCENTILES, STAT_KEYS, distribution, error_adjusted_distribution
from .summary import RATE_TOLERANCE, completion_rate, compute_metrics, per_turn_metrics, session_metrics, token_drift
from .intervals import (  # noqa: F401  (issue 12: repeats and intervals)
    Interval,
    bootstrap_ci,
    coefficient_of_variation,
    could_flip,
    headline_interval,
    intervals_overlap,
    median_ci_over_repeats,
    rank_with_ties,
    two_stage_bootstrap_ci,
)

__all__ = [
    "NS_PER_MS",
    "NS_PER_S",
    "PERCENTILES",
    "RATE_TOLERANCE",
    "SLO",
    "SLOError",
    "SLO_METRICS",
    "STAT_KEYS",
    "compute_metrics",
    "distribution",
    "e2el_ms",
    "error_adjusted_distribution",
    "itls_ms",
    "meets_slos",
    "parse_slos",
    "per_turn_metrics",
    "session_metrics",
    "slo_percentile_value",
    "token_drift",
    "tpot_ms",
    "ttft_from_scheduled_ms",
    "ttft_ms",
]
