"""Request records → one engine's :class:`results.schema.Metrics` (the numbers in ``summary.json``)."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from results.schema import INCOMPLETE, MAX_SAMPLES, WINDOW_PHASES, Metrics, RequestRecord, RunWindow, Samples

from results.schema.metric_registry import metrics

from .request import NS_PER_MS, NS_PER_S, ttft_ms
from .failures import server_message
from workloads.base import RunTiming, count_aborted

from .slo import SLO, meets_slos, slo_table
from .stats import distribution, error_adjusted_distribution

RATE_TOLERANCE = 0.05  # achieved vs offered arrival rate flag (±5 %)

SHORTFALL_TOLERANCE = 0.05
"""A reply is short when more than this fraction of ``max_tokens`` is missing (any missing
token for small ``max_tokens``): tolerates a tokenizer-estimated output count."""

def _rate(count: int, first_ns: int, last_ns: int) -> float | None:
    if count < 2 or last_ns <= first_ns:
        return None
    return (count - 1) / ((last_ns - first_ns) / NS_PER_S)

def completion_rate(records: Sequence[RequestRecord]) -> float | None:
    """The departure rate of the first turns (requests with ``turn_id`` in (None, 0)), req/s:
    ``(n-1) / (last end - first end)`` over the successful measured ones, the same formula as
    the achieved arrival rate applied to completions. In a stable queue departures keep pace
    with arrivals; an engine that cannot keep up completes at its own capacity, below the
    offered rate, however fast the client sent. None with fewer than 2 completions."""
    ends = sorted(r.end_ns for r in records  # type: ignore[misc]
                  if r.phase == "measured" and r.success and r.end_ns is not None and r.turn_id in (None, 0))
    return _rate(len(ends), ends[0], ends[-1]) if ends else None


def error_examples(failed: Sequence[RequestRecord], limit: int = 300) -> dict[str, str]:
    """Error class → the first failed request's message of that class (in record order, the
    message of a JSON error body, cut to ``limit`` characters): what the server said, so a
    reason can quote it (``"http_400":
    "maximum context length is 4096 tokens ..."``). Classes without a message are left out."""
    out: dict[str, str] = {}
    for r in failed:
        cls = r.error_class or "unknown"
        if cls not in out and r.error_message:
            out[cls] = " ".join(server_message(r.error_message).split())[:limit]
    return out


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

def output_shortfall(records: Sequence[RequestRecord]) -> dict[str, int]:
    """Replies that stopped early although ``ignore_eos`` was sent: ``finish_reason == "stop"``
    and ``max_tokens - output_tokens > SHORTFALL_TOLERANCE * max_tokens`` (tokens). Returns
    ``checked`` (requests sent with ignore_eos whose max and output counts are known),
    ``requests`` (the short ones) and ``tokens_missing`` (their missing tokens summed). A
    short reply means the endpoint did not honour ``ignore_eos`` (an EOS ended it), so it did
    less work than requested and than engines that did honour it."""
    checked = short = missing = 0
    for r in records:
        n, cap = r.output_tokens, r.max_tokens
        if not r.ignore_eos_sent or n is None or cap is None:
            continue
        checked += 1
        if r.finish_reason == "stop" and cap - n > SHORTFALL_TOLERANCE * cap:
            short += 1
            missing += cap - n
    return {"checked": checked, "requests": short, "tokens_missing": missing}


def peak_output_throughput(records: Sequence[RequestRecord], first_ns: int, last_ns: int) -> float | None:
    """The busiest ~1-s stretch of output, tokens/s, over successful ``records``.

    Each request's output tokens are spread over its token-bearing chunks (the per-chunk
    counts when the server gave them, ``chunk_token_counts``; else evenly), so a chunk that
    carries k tokens counts k (``vllm bench serve``'s ``max_output_tokens_per_s`` counts one
    per chunk, which puts its peak below the average under speculative decoding or any
    server that batches tokens into chunks). The measured span ``[first_ns, last_ns]`` is cut
    into n = max(1, floor(span / 1 s)) equal buckets (1 s wide for a whole number of seconds,
    under 2 s otherwise; the whole span below 1 s) and each chunk's tokens go to the bucket of
    its arrival; the peak is the fullest bucket's tokens over its width. So the peak is never
    below the average output throughput over the same span. None when the span is empty or no
    tokens were counted.
    """
    span = last_ns - first_ns
    if span <= 0:
        return None
    n = max(1, span // NS_PER_S)
    buckets = np.zeros(n, dtype=np.float64)
    for r in records:
        times, tokens = r.chunk_times_ns, r.output_tokens
        if not times or not tokens:
            continue
        counts = r.chunk_token_counts
        if len(counts) == len(times) and sum(counts) > 0:
            weights = np.asarray(counts, dtype=np.float64) * (tokens / sum(counts))
        else:
            weights = np.full(len(times), tokens / len(times))
        idx = np.clip((np.asarray(times, dtype=np.int64) - first_ns) * n // span, 0, n - 1)
        np.add.at(buckets, idx, weights)
    if not buckets.any():
        return None
    return float(buckets.max() / (span / n / NS_PER_S))


def session_metrics(records: Sequence[RequestRecord], planned_turns: Mapping[str, int] | None = None) -> dict[str, Any]:
    """Per-session outcome of multi-turn workloads (agentic).

    A session is every record sharing a ``session_id`` (branches included). **Session
    completion time** = last ``end_ns`` − first ``scheduled_ns`` of the session (ms): the time
    a user waits for the whole agent task, think/tool times included. ``completed`` counts
    sessions whose every request succeeded; only those enter the distribution.
    ``aborted_turns`` (with ``planned_turns``, session id → the turns it sends when every turn
    succeeds, ``Workload.planned_turns``): the turns a failed turn stopped
    (``workloads.base.count_aborted``); None without it.
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
        # a turn cut by a duration-based run's drain bound did not fail: it aborts nothing
        "aborted_turns": None if planned_turns is None else
        count_aborted(planned_turns, [(r.session_id, r.success or r.error_class == INCOMPLETE) for r in records]),
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
            "ttft_ms_p90": d["p90"],
            "ttft_ms_p99": d["p99"],
            "input_tokens_mean": float(np.mean([r.input_tokens or 0 for r in rs])),
            "cached_tokens_mean": float(np.mean(cached)) if cached else None,
        }
    return out

def compute_metrics(
    records: Sequence[RequestRecord],
    slos: Sequence[SLO] = (),
    offered_rate: float | None = None,
    requested_rate: float | None = None,
    planned_turns: Mapping[str, int] | None = None,
    timing: RunTiming | None = None,
) -> Metrics:
    """The ``engines.<name>.metrics`` object of ``summary.json`` for one engine's records.

    ``offered_rate`` (req/s; ``inf`` or None = no open-loop target) is compared with the
    achieved arrival rate of the first turns (requests with ``turn_id`` in (None, 0)),
    ``(n-1) / (last send - first send)``; outside ±5 % sets ``rate_valid = False``. The
    offered rate is the start schedule's rate by that same formula (``Workload.offered_rate``:
    a drawn schedule is rescaled so that it equals the requested rate; a trace's own rate), so
    the check compares like with like and measures only how well the client kept the schedule.
    ``requested_rate``: the rate asked for, recorded as ``Metrics.requested_rate`` (None when
    infinite); None → ``offered_rate``, which is the requested rate for every drawn schedule
    (for a trace replay: the trace's rate, what replaying it asks for). Units: ``*_ms`` in ms,
    ``*_throughput`` in tokens/s, ``request_throughput``/``goodput`` in requests/s,
    ``duration_s`` in s.

    Duration-based runs (``timing``, ``Workload.timing``): a request the drain bound cancelled
    (``error_class`` :data:`results.schema.INCOMPLETE`) is counted in ``requests_incomplete``,
    not in ``requests_failed``, in no latency distribution or error-adjusted percentile, and its
    cut does not end the measured duration (its send still counts as sent: in the achieved rate
    and as not good in SLO attainment). Records of the warm-up / cool-down windows
    (:data:`results.schema.WINDOW_PHASES`) are skipped like warm-up ones and counted in
    ``run_window`` (with the limits from ``timing``; None for a count-based run).
    """
    grouped = _group(records)
    metrics: dict[str, Any] = {
        "run_window": run_window(records, timing),
        **_counts_and_latencies(grouped),
        **_arrival_rates(records, grouped.sent, offered_rate, requested_rate),
    }
    if any(r.turn_id is not None for r in grouped.measured):
        metrics["sessions"] = session_metrics(grouped.measured, planned_turns)
        metrics["per_turn"] = per_turn_metrics(grouped.measured)
    if slos:
        metrics["goodput"] = _goodput(grouped, slos)
    return Metrics.model_validate(metrics)


@dataclass(frozen=True)
class _Measured:
    """One engine's measured-phase records, grouped as :func:`compute_metrics` counts them:
    ``ok`` succeeded, ``failed`` failed (a drain-bound cut, ``incomplete``, is neither), ``sent``
    were sent; ``ends``: end times (ns) of all but the cut ones; the measured ``duration_s``
    runs from ``first_send`` (ns; None without a send and an end) to the last of ``ends``."""

    measured: list[RequestRecord]
    incomplete: list[RequestRecord]
    ok: list[RequestRecord]
    failed: list[RequestRecord]
    sent: list[RequestRecord]
    ends: list[int]
    first_send: int | None
    duration_s: float

    def per_s(self, x: float) -> float | None:
        """``x`` per second of the measured duration; None when it is 0."""
        return x / self.duration_s if self.duration_s > 0 else None


def _group(records: Sequence[RequestRecord]) -> _Measured:
    measured = [r for r in records if r.phase == "measured"]
    sent = [r for r in measured if r.send_ns is not None]
    ends = [r.end_ns for r in measured if r.end_ns is not None and r.error_class != INCOMPLETE]
    if sent and ends:
        first_send = min(r.send_ns for r in sent)  # type: ignore[type-var]
        duration_s = max(0.0, (max(ends) - first_send) / NS_PER_S)
    else:
        first_send = None
        duration_s = 0.0
    return _Measured(
        measured=measured,
        incomplete=[r for r in measured if r.error_class == INCOMPLETE],
        ok=[r for r in measured if r.success],
        failed=[r for r in measured if not r.success and r.error_class != INCOMPLETE],
        sent=sent,
        ends=ends,  # type: ignore[arg-type]
        first_send=first_send,
        duration_s=duration_s,
    )


def _counts_and_latencies(m: _Measured) -> dict[str, Any]:
    """Counts, throughputs, every registered metric's distribution (:func:`metric_values`; the
    error-adjusted ones count each failure as +inf), failures and token accounting."""
    ok, failed, per_s = m.ok, m.failed, m.per_s
    out_tokens = sum(r.output_tokens or 0 for r in ok)
    in_tokens = sum(r.input_tokens or 0 for r in ok)
    values = metric_values(m.ok, m.measured)
    return {
        "requests_sent": len(m.sent),
        "requests_completed": len(ok),
        "requests_failed": len(failed),
        "requests_incomplete": len(m.incomplete),
        "duration_s": m.duration_s,
        "request_throughput": per_s(len(ok)),
        "output_throughput": per_s(out_tokens),
        "input_throughput": per_s(in_tokens),
        "total_token_throughput": per_s(out_tokens + in_tokens),
        "total_input_tokens": in_tokens,
        "total_output_tokens": out_tokens,
        **{metric.field: distribution(values[metric.name]) for metric in metrics()},
        "connections_opened": len(values["connect"]),  # the requests that opened one: the connect metric's
        "peak_output_throughput": (peak_output_throughput(ok, m.first_send, max(m.ends))
                                   if m.first_send is not None else None),
        "output_shortfall": output_shortfall(ok),
        "error_adjusted": {metric.field: error_adjusted_distribution(values[metric.name], len(failed))
                           for metric in metrics() if metric.failures == "inf"},
        "failures_by_class": dict(Counter(r.error_class or "unknown" for r in failed)),
        "error_examples": error_examples(failed),
        "cached_tokens": sum(r.cached_tokens_server or 0 for r in ok),
        "token_drift": token_drift(ok),
        "samples_ms": samples(values),
    }


def metric_values(ok: Sequence[RequestRecord], measured: Sequence[RequestRecord]) -> dict[str, list[float]]:
    """Every registered metric's values (its unit: ms) over one engine's measured records: name →
    the values of its requests (``Metric.over``: the successful ones ``ok``, or all ``measured``),
    in record order (``Metric.values_of``: ITL adds every gap)."""
    return {m.name: [v for r in (ok if m.over == "ok" else measured) for v in m.values_of(r)] for m in metrics()}


def _arrival_rates(records: Sequence[RequestRecord], sent: list[RequestRecord], offered_rate: float | None,
                   requested_rate: float | None) -> dict[str, Any]:
    """``offered_rate``, ``requested_rate`` (None when infinite), the ``achieved_rate`` of the
    first turns and ``rate_valid`` (see :func:`compute_metrics`)."""
    firsts = sorted(r.send_ns for r in sent if r.turn_id in (None, 0))  # type: ignore[misc]
    achieved = _rate(len(firsts), firsts[0], firsts[-1]) if firsts else None
    offered = None if offered_rate is None or math.isinf(offered_rate) else offered_rate
    requested = offered_rate if requested_rate is None else requested_rate
    target = offered
    if target and any(r.phase in WINDOW_PHASES for r in records):
        # warm-up / cool-down windows keep a random slice of the arrivals: the slice is judged
        # against its own schedule (its scheduled sends, the same formula), not the whole run's rate
        planned = sorted(r.scheduled_ns for r in sent if r.turn_id in (None, 0))
        target = _rate(len(planned), planned[0], planned[-1]) if planned else None
    return {
        "offered_rate": offered,
        "requested_rate": None if requested is None or math.isinf(requested) else requested,
        "achieved_rate": achieved,
        "rate_valid": abs(achieved - target) / target <= RATE_TOLERANCE if target and achieved is not None else None,
    }


def _goodput(m: _Measured, slos: Sequence[SLO]) -> dict[str, Any]:
    """Requests that succeed and meet every SLO, per second of the measured duration, and as a
    share of the measured requests."""
    good = sum(1 for r in m.measured if meets_slos(r, slos))
    return {
        "request_goodput": m.per_s(good),
        "good_requests": good,
        "slo_attainment": good / len(m.measured) if m.measured else None,
        "slos": slo_table(slos),
    }


def run_window(records: Sequence[RequestRecord], timing: RunTiming | None) -> RunWindow | None:
    """A duration-based run's limits (``timing``) and the sent requests its warm-up / cool-down
    windows kept out of the metrics (by phase, stamped by the runner at send time); None for a
    count-based run (no ``timing`` and no windowed record)."""
    warm = sum(1 for r in records if r.phase == WINDOW_PHASES[0])
    cool = sum(1 for r in records if r.phase == WINDOW_PHASES[1])
    if timing is None and not warm + cool:
        return None
    sent = sum(1 for r in records if r.send_ns is not None and (r.phase == "measured" or r.phase in WINDOW_PHASES))
    limits = {} if timing is None else {"duration_s": timing.duration_s, "drain_timeout_s": timing.drain_timeout_s,
                                        "warmup_s": timing.warmup_window_s, "cooldown_s": timing.cooldown_window_s}
    return RunWindow(warmup_requests=warm, cooldown_requests=cool, requests=sent, **limits)


def _bounded(values: list[float]) -> list[float]:
    """Sorted values; above :data:`MAX_SAMPLES` that many evenly spaced quantiles (numpy linear)."""
    arr = np.sort(np.asarray(values, dtype=np.float64))
    if arr.size > MAX_SAMPLES:
        arr = np.quantile(arr, np.linspace(0.0, 1.0, MAX_SAMPLES), method="linear")
    return [float(v) for v in arr]


def samples(values: Mapping[str, list[float]]) -> Samples:
    """The per-request values (ms) the report draws its CDFs from, bounded in size: those of
    every metric declared with ``cdf``, from ``values`` (name → values, :func:`metric_values`)."""
    return Samples.model_validate({m.name: _bounded(values.get(m.name, [])) for m in metrics() if m.cdf})
