"""Jobs as the agent user sees them (issue 40, item 4): an agent session is one job, and what its
user buys is the finished task, not the requests on the way.

- **job latency** (s) = a completed session's last ``end_ns`` − its first ``scheduled_ns``: the
  time the user waits for the task, tool time included (:func:`harness.metrics.session_metrics`'
  session completion time, per measurement). A session is completed when every turn it sent
  succeeded and none was cut (``cut``: the sessions of a point that stopped early).
- **jobs per hour per user** = 3600 / mean job latency: what one agent completes back to back.
  By Little's law ``jobs/h × devices ≈ sessions in flight × jobs/h per user`` (the mean, not
  the median, so the two axes of the job frontier agree).
- **per-turn interactivity, tool time excluded** (MLPerf Endpoints' convention: output
  tokens/s per user over the generating time only) = a successful turn's output tokens /
  (its ``last_token_ns`` − its ``send_ns``) in s: the wait for its first token included, the tool
  time before it (``scheduled_ns`` of the next turn − ``end_ns`` of this one) never.

Percentiles are numpy ``linear``. Jobs per hour per device is the judge's sessions/s at the
point (``harness.scoring.capacity.jobs``), so one figure is printed per point.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from results.schema import JobFigures, RequestRecord

from .request import NS_PER_S

SECONDS_PER_HOUR = 3600.0


def session_key(r: RequestRecord) -> tuple[int, int | None, str]:
    """A session within one point: its measurement (``repeat``), client worker and id (a single
    request is a session of its own)."""
    return r.repeat, r.worker, r.session_id or r.request_id


def job_latencies_s(records: Sequence[RequestRecord], cut: Iterable[tuple[int, int | None, str]] = ()) -> list[float]:
    """Each completed session's job latency (s; module docstring), in first-appearance order;
    ``cut``: :func:`session_key` s of sessions a stopped point cut (never completed)."""
    stopped = set(cut)
    groups: dict[tuple[int, int | None, str], list[RequestRecord]] = {}
    for r in records:
        groups.setdefault(session_key(r), []).append(r)
    out = []
    for key, g in groups.items():
        if key in stopped or not all(r.success and r.end_ns is not None for r in g):
            continue
        out.append((max(r.end_ns or 0 for r in g) - min(r.scheduled_ns for r in g)) / NS_PER_S)
    return out


def turn_tps(records: Sequence[RequestRecord]) -> list[float]:
    """Each successful turn's output tokens / s over its generating time (module docstring);
    turns without a send, a last token or an output count are left out."""
    out = []
    for r in records:
        n = r.output_tokens
        if r.success and n and r.send_ns is not None and r.last_token_ns is not None and r.last_token_ns > r.send_ns:
            out.append(n / ((r.last_token_ns - r.send_ns) / NS_PER_S))
    return out


def job_figures(records: Sequence[RequestRecord], sessions_per_s: float | None, devices: int = 1,
                cut: Iterable[tuple[int, int | None, str]] = ()) -> JobFigures:
    """One agentic point's :class:`JobFigures` from its measured ``records`` (every measurement);
    ``sessions_per_s``: the sessions it completed per second (the judge's rate; None: unknown);
    ``devices``: what one deployment used. Raises ValueError for ``devices < 1``."""
    if devices < 1:
        raise ValueError(f"devices must be >= 1, got {devices}")
    latencies = np.asarray(job_latencies_s(records, cut), dtype=np.float64)
    tps = np.asarray(turn_tps(records), dtype=np.float64)
    mean = float(latencies.mean()) if latencies.size else 0.0

    def pct(a: np.ndarray, q: float) -> float | None:
        return float(np.percentile(a, q)) if a.size else None

    return JobFigures(completed=int(latencies.size),
                      per_hour_per_device=sessions_per_s * SECONDS_PER_HOUR / devices if sessions_per_s is not None else None,
                      per_hour_per_user=SECONDS_PER_HOUR / mean if mean > 0 else None,
                      latency_s_p50=pct(latencies, 50), latency_s_p90=pct(latencies, 90),
                      turn_tps_p50=pct(tps, 50), turn_tps_p10=pct(tps, 10))
