"""Metric computation: request records → the numbers in ``summary.json``.

One convention, stated in every report and in the README ("Metric definitions"). All latencies are in
milliseconds, rates per second. Percentiles use numpy's ``linear`` method (vLLM's
``benchmark_serving`` convention). Only ``phase == "measured"`` records enter metrics.

Definitions (per request, from ``perf_counter_ns`` timestamps):

- **TTFT** = first token-bearing chunk − send.  **TTFT from scheduled** = first token-bearing
  chunk − scheduled (includes client-side queueing; exposes coordinated omission).
- **E2E latency** (``e2el``) = last token-bearing chunk − send.  **E2E from scheduled** =
  last token-bearing chunk − scheduled (client-side queueing included, like TTFT from scheduled).
- **TTFAT** (time to first answer token) = first chunk carrying answer text (content or tool
  calls, after any ``reasoning_content``) − send; equal to TTFT for a reply without reasoning.
- **send** = the request's body handed to the socket (an aiohttp trace hook), after connection
  set-up: DNS, TCP connect and TLS are not in TTFT/E2E; **connect** (``connect_ms``) records
  them for requests that opened a new connection.
- **TPOT** = (E2E − TTFT) / (output_tokens − 1), only for output_tokens ≥ 2; the summary is
  request-weighted (vLLM convention).
- **ITL** = every gap between consecutive token-bearing chunks, pooled over requests.
- **duration** = first send of the measured phase → last completion (``end_ns``) of it.
- **throughput** = successful requests' tokens (or count) / duration.  **peak output
  throughput** = tokens/s in the fullest of n = floor(duration / 1 s) equal buckets of chunk
  arrival, counting each chunk's tokens (not 1 per chunk, as vLLM did), so peak ≥ average.
- **output shortfall** = replies with ``finish_reason "stop"`` more than 5 % short of
  ``max_tokens`` although ``ignore_eos`` was sent (the endpoint ignored it).
- **success** = the stream ended with a finish reason (not ``error``/``abort``) or ``[DONE]``,
  carried at least one token, decoded as UTF-8 and held no error event.
- **goodput** = successful requests meeting every per-request SLO / duration (DistServe,
  Zhong et al. 2024 §2); **SLO attainment** = good / all sent.
- **error-adjusted percentiles**: failures count as +inf latency; a percentile that lands
  on a failure is reported as ``None`` (JSON null = infinite).
"""

from .request import (NS_PER_MS, NS_PER_S, connect_ms, e2el_from_scheduled_ms, e2el_ms, itls_ms, tpot_ms, ttfat_ms,
                      ttft_from_scheduled_ms, ttft_ms)
from .slo import (SLO, SLO_METRICS, SLOError, meets_slos, parse_slos, slo_metric_names, slo_percentile_value, slo_table,
                  slos_of)
from .stats import PERCENTILES, STAT_KEYS, distribution, error_adjusted_distribution
from .summary import (RATE_TOLERANCE, SHORTFALL_TOLERANCE, completion_rate, compute_metrics, output_shortfall,
                      peak_output_throughput, per_turn_metrics, session_metrics, token_drift)
from .intervals import (  # noqa: F401  (issue 12: repeats and intervals)
    ConfidenceInterval,
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
    "SHORTFALL_TOLERANCE",
    "SLO",
    "SLOError",
    "SLO_METRICS",
    "STAT_KEYS",
    "compute_metrics",
    "connect_ms",
    "distribution",
    "e2el_from_scheduled_ms",
    "e2el_ms",
    "error_adjusted_distribution",
    "itls_ms",
    "meets_slos",
    "output_shortfall",
    "parse_slos",
    "peak_output_throughput",
    "per_turn_metrics",
    "session_metrics",
    "slo_metric_names",
    "slo_percentile_value",
    "slo_table",
    "slos_of",
    "token_drift",
    "tpot_ms",
    "ttfat_ms",
    "ttft_from_scheduled_ms",
    "ttft_ms",
]
