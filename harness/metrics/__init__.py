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

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from results.schema import RequestRecord

NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000

PERCENTILES: tuple[tuple[str, float], ...] = (
    ("p50", 50.0),
    ("p90", 90.0),
    ("p95", 95.0),
    ("p99", 99.0),
    ("p99_9", 99.9),
)
STAT_KEYS = ("mean", "median", "std", "p50", "p90", "p95", "p99", "p99_9", "max")
SLO_METRICS = ("ttft", "tpot", "e2el", "itl")
RATE_TOLERANCE = 0.05  # achieved vs offered arrival rate flag (±5 %)


class SLOError(ValueError):
    """An ``--slo`` string that cannot be parsed (message = the fix)."""


@dataclass(frozen=True)
class SLO:
    """A latency objective: ``metric`` ∈ {ttft, tpot, e2el, itl} must be ≤ ``threshold_ms``.

    Per request (goodput, DistServe): the request's own value must meet the threshold (for
    ``itl``: its largest gap). Per run (the scorer's hard constraint): the ``percentile`` of
    the metric's distribution must meet it (default 99).
    """

    metric: str
    threshold_ms: float
    percentile: float = 99.0

    @property
    def key(self) -> str:
        p = f"{self.percentile:g}".replace(".", "_")
        return f"{self.metric}_p{p}"


_STORED_PERCENTILES = {50.0: "p50", 90.0: "p90", 95.0: "p95", 99.0: "p99", 99.9: "p99_9", 100.0: "max"}


def parse_slos(text: str | None) -> list[SLO]:
    """Parse ``"ttft_p99=500,tpot_p99=50"`` (ms) into :class:`SLO` objects.

    Accepted keys: ``ttft``, ``tpot``, ``e2el``, ``itl``, each optionally with a percentile
    suffix ``_pNN`` or ``_pNN_N`` (``ttft_p99_9`` = p99.9); no suffix means p99.
    Raises :class:`SLOError` on anything else.
    """
    if not text:
        return []
    out: list[SLO] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "=" not in part:
            raise SLOError(f"SLO {part!r} has no value: write it as e.g. ttft_p99=500 (ms)")
        key, _, val = part.partition("=")
        m = re.fullmatch(r"(ttft|tpot|e2el|itl)(?:_p(\d+(?:_\d+)?))?", key.strip().lower())
        if not m:
            raise SLOError(
                f"unknown SLO {key!r}: use ttft, tpot, e2el or itl with an optional percentile, e.g. ttft_p99=500"
            )
        try:
            threshold = float(val)
        except ValueError:
            raise SLOError(f"SLO {key} needs a number of milliseconds, got {val!r}") from None
        if not threshold > 0 or math.isinf(threshold):
            raise SLOError(f"SLO {key} must be a positive number of milliseconds, got {val!r}")
        pct = float(m.group(2).replace("_", ".")) if m.group(2) else 99.0
        if pct not in _STORED_PERCENTILES:
            raise SLOError(f"SLO percentile p{pct:g} in {key!r} is not computed: use p50, p90, p95, p99, p99_9 or p100")
        slo = SLO(m.group(1), threshold, pct)
        if any(o.key == slo.key for o in out):
            raise SLOError(f"SLO {slo.key} is given twice: keep one value")
        out.append(slo)
    return out


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


def ttft_ms(r: RequestRecord) -> float | None:
    """TTFT in ms (first token-bearing chunk − send), or None when either is missing."""
    if r.first_token_ns is None or r.send_ns is None:
        return None
    return (r.first_token_ns - r.send_ns) / NS_PER_MS


def ttft_from_scheduled_ms(r: RequestRecord) -> float | None:
    """TTFT measured from the scheduled send time (ms): includes client-side queueing."""
    if r.first_token_ns is None:
        return None
    return (r.first_token_ns - r.scheduled_ns) / NS_PER_MS


def e2el_ms(r: RequestRecord) -> float | None:
    """E2E latency in ms: last token-bearing chunk − send."""
    if r.last_token_ns is None or r.send_ns is None:
        return None
    return (r.last_token_ns - r.send_ns) / NS_PER_MS


def tpot_ms(r: RequestRecord) -> float | None:
    """TPOT in ms: (E2E − TTFT) / (output_tokens − 1); None when output_tokens < 2."""
    n = r.output_tokens
    t, e = ttft_ms(r), e2el_ms(r)
    if n is None or n < 2 or t is None or e is None:
        return None
    return (e - t) / (n - 1)


def itls_ms(r: RequestRecord) -> list[float]:
    """Gaps between consecutive token-bearing chunks of one request, in ms."""
    ts = r.chunk_times_ns
    return [(b - a) / NS_PER_MS for a, b in zip(ts, ts[1:])]


def meets_slos(r: RequestRecord, slos: Sequence[SLO]) -> bool:
    """DistServe per-request rule: success and every SLO met by this request's own value."""
    if not r.success:
        return False
    for slo in slos:
        if slo.metric == "ttft":
            v = ttft_ms(r)
        elif slo.metric == "tpot":
            v = tpot_ms(r)
            if v is None:  # a 1-token reply has no TPOT; it cannot violate it
                continue
        elif slo.metric == "e2el":
            v = e2el_ms(r)
        else:
            gaps = itls_ms(r)
            v = max(gaps) if gaps else 0.0
        if v is None or v > slo.threshold_ms:
            return False
    return True


def _rate(count: int, first_ns: int, last_ns: int) -> float | None:
    if count < 2 or last_ns <= first_ns:
        return None
    return (count - 1) / ((last_ns - first_ns) / NS_PER_S)


def token_drift(records: Sequence[RequestRecord]) -> dict[str, Any]:
    """Server usage vs one re-tokenization pass of the text, over requests that have both.

    Returns ``requests_compared``, ``output_mismatched`` (count), ``output_abs_diff_mean`` and
    ``output_abs_diff_max`` (tokens), ``output_rel_diff_mean`` (fraction of server count), the
    same three for input, and ``output_estimated`` (requests counted by the tokenizer because
    the server sent no usage).
    """
    out_pairs = [
        (r.output_tokens_server, r.output_tokens_retok)
        for r in records
        if r.output_tokens_server is not None and r.output_tokens_retok is not None
    ]
    in_pairs = [
        (r.input_tokens_server, r.input_tokens_retok)
        for r in records
        if r.input_tokens_server is not None and r.input_tokens_retok is not None
    ]

    def _side(pairs: list[tuple[int, int]], prefix: str) -> dict[str, Any]:
        if not pairs:
            return {f"{prefix}_mismatched": 0, f"{prefix}_abs_diff_mean": None, f"{prefix}_abs_diff_max": None,
                    f"{prefix}_rel_diff_mean": None}
        diffs = [abs(a - b) for a, b in pairs]
        rel = [abs(a - b) / a for a, b in pairs if a > 0]
        return {
            f"{prefix}_mismatched": sum(1 for d in diffs if d),
            f"{prefix}_abs_diff_mean": float(np.mean(diffs)),
            f"{prefix}_abs_diff_max": int(max(diffs)),
            f"{prefix}_rel_diff_mean": float(np.mean(rel)) if rel else None,
        }

    return {
        "requests_compared": len(out_pairs),
        **_side(out_pairs, "output"),
        **_side(in_pairs, "input"),
        "output_estimated": sum(1 for r in records if r.output_tokens_estimated),
    }


def session_metrics(records: Sequence[RequestRecord]) -> dict[str, Any]:
    """Per-session outcome of multi-turn workloads (agentic).

    A session is every record sharing a ``session_id`` (branches included). **Session
    completion time** = last ``end_ns`` − first ``scheduled_ns`` of the session (ms): the time
    a user waits for the whole agent task, think/tool times included. ``completed`` counts
    sessions whose every request succeeded; only those enter the distribution.
    """
    groups: dict[str, list[RequestRecord]] = {}
    for r in records:
        if r.session_id is not None:
            groups.setdefault(r.session_id, []).append(r)
    times = [
        (max(r.end_ns or 0 for r in g) - min(r.scheduled_ns for r in g)) / NS_PER_MS
        for g in groups.values()
        if all(r.success for r in g)
    ]
    return {
        "sessions": len(groups),
        "completed": len(times),
        "requests_per_session_mean": float(np.mean([len(g) for g in groups.values()])) if groups else None,
        "completion_time_ms": distribution(times),
    }


def per_turn_metrics(records: Sequence[RequestRecord]) -> dict[str, dict[str, Any]]:
    """TTFT and prompt/cached tokens by turn index (successful requests; keys are turn ids as
    strings for JSON). Shows how latency grows with the shared prefix on agentic workloads."""
    turns: dict[int, list[RequestRecord]] = {}
    for r in records:
        if r.turn_id is not None and r.success:
            turns.setdefault(r.turn_id, []).append(r)
    out: dict[str, dict[str, Any]] = {}
    for t in sorted(turns):
        rs = turns[t]
        d = distribution([v for r in rs if (v := ttft_ms(r)) is not None])
        cached = [r.cached_tokens_server for r in rs if r.cached_tokens_server is not None]
        out[str(t)] = {
            "requests": len(rs),
            "ttft_ms_p50": d["p50"],
            "ttft_ms_p99": d["p99"],
            "input_tokens_mean": float(np.mean([r.input_tokens or 0 for r in rs])),
            "cached_tokens_mean": float(np.mean(cached)) if cached else None,
        }
    return out


def compute_metrics(
    records: Sequence[RequestRecord],
    slos: Sequence[SLO] = (),
    offered_rate: float | None = None,
) -> dict[str, Any]:
    """The ``engines.<name>.metrics`` object of ``summary.json`` for one engine's records.

    ``offered_rate`` (req/s; ``inf`` or None = no open-loop target) is compared with the
    achieved arrival rate of the first turns (requests with ``turn_id`` in (None, 0)); outside
    ±5 % sets ``rate_valid = False``. Units: ``*_ms`` in ms, ``*_throughput`` in tokens/s,
    ``request_throughput``/``goodput`` in requests/s, ``duration_s`` in s.
    """
    measured = [r for r in records if r.phase == "measured"]
    ok = [r for r in measured if r.success]
    failed = [r for r in measured if not r.success]
    sent = [r for r in measured if r.send_ns is not None]
    ends = [r.end_ns for r in measured if r.end_ns is not None]

    if sent and ends:
        first_send = min(r.send_ns for r in sent)  # type: ignore[type-var]
        duration_s = max(0.0, (max(ends) - first_send) / NS_PER_S)
    else:
        first_send = None
        duration_s = 0.0

    def per_s(x: float) -> float | None:
        return x / duration_s if duration_s > 0 else None

    out_tokens = sum(r.output_tokens or 0 for r in ok)
    in_tokens = sum(r.input_tokens or 0 for r in ok)
    ttfts = [v for r in ok if (v := ttft_ms(r)) is not None]
    ttfts_sched = [v for r in ok if (v := ttft_from_scheduled_ms(r)) is not None]
    e2els = [v for r in ok if (v := e2el_ms(r)) is not None]
    tpots = [v for r in ok if (v := tpot_ms(r)) is not None]
    itls = [g for r in ok for g in itls_ms(r)]

    metrics: dict[str, Any] = {
        "requests_sent": len(sent),
        "requests_completed": len(ok),
        "requests_failed": len(failed),
        "duration_s": duration_s,
        "request_throughput": per_s(len(ok)),
        "output_throughput": per_s(out_tokens),
        "input_throughput": per_s(in_tokens),
        "total_token_throughput": per_s(out_tokens + in_tokens),
        "total_input_tokens": in_tokens,
        "total_output_tokens": out_tokens,
        "ttft_ms": distribution(ttfts),
        "ttft_from_scheduled_ms": distribution(ttfts_sched),
        "tpot_ms": distribution(tpots),
        "itl_ms": distribution(itls),
        "e2el_ms": distribution(e2els),
        "error_adjusted": {
            "ttft_ms": error_adjusted_distribution(ttfts, len(failed)),
            "e2el_ms": error_adjusted_distribution(e2els, len(failed)),
        },
        "failures_by_class": dict(Counter(r.error_class or "unknown" for r in failed)),
        "cached_tokens": sum(r.cached_tokens_server or 0 for r in ok),
        "token_drift": token_drift(ok),
    }

    firsts = sorted(r.send_ns for r in sent if r.turn_id in (None, 0))  # type: ignore[misc]
    achieved = _rate(len(firsts), firsts[0], firsts[-1]) if firsts else None
    metrics["offered_rate"] = None if offered_rate is None or math.isinf(offered_rate) else offered_rate
    metrics["achieved_rate"] = achieved
    if metrics["offered_rate"] and achieved is not None:
        metrics["rate_valid"] = abs(achieved - offered_rate) / offered_rate <= RATE_TOLERANCE  # type: ignore[operator]
    else:
        metrics["rate_valid"] = None

    if any(r.turn_id is not None for r in measured):
        metrics["sessions"] = session_metrics(measured)
        metrics["per_turn"] = per_turn_metrics(measured)

    if slos:
        good = sum(1 for r in measured if meets_slos(r, slos))
        metrics["goodput"] = {
            "request_goodput": per_s(good),
            "good_requests": good,
            "slo_attainment": good / len(measured) if measured else None,
            "slos": {s.key: s.threshold_ms for s in slos},
        }
    return metrics


def slo_percentile_value(metrics: dict[str, Any], slo: SLO) -> float | None:
    """The run-level value an SLO is judged on: the SLO's percentile of its metric (ms).

    Uses the error-adjusted distribution for ttft/e2el when requests failed (a failure can
    only make the percentile worse; None = infinite). Percentiles outside the stored set
    raise ValueError.
    """
    name = _STORED_PERCENTILES.get(slo.percentile)
    if name is None:
        raise ValueError(f"percentile p{slo.percentile:g} is not stored; use 50, 90, 95, 99, 99.9 or 100")
    if slo.metric in ("ttft", "e2el") and metrics.get("requests_failed"):
        return metrics["error_adjusted"][f"{slo.metric}_ms"][name]
    return metrics[f"{slo.metric}_ms"][name]
