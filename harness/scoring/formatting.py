"""Small pieces of the scorer's sentences: metric labels, conditions, weights and milliseconds."""

from __future__ import annotations

import math
from typing import Any, Iterator, Mapping, TYPE_CHECKING, Sequence

from harness.metrics import SLO
from results.schema.metric_registry import metric, metric_figure, slo_metrics, tps_figure

if TYPE_CHECKING:
    from .measured.gather import Measurement


class _Labels(Mapping[str, str]):
    """SLO metric name → its label for a sentence (``"e2el"`` → ``"E2E latency"``), read from the
    registry (``Metric.label``) when asked, so a metric registered later has its label too."""

    def __getitem__(self, name: str) -> str:
        try:
            return metric(name).label
        except KeyError:
            raise KeyError(name) from None

    def __iter__(self) -> Iterator[str]:
        return iter([m.name for m in slo_metrics()])

    def __len__(self) -> int:
        return len(slo_metrics())


METRIC_LABELS: Mapping[str, str] = _Labels()


def rate_text(value: float) -> str:
    """A rate for a sentence: 2 decimals (``0.5`` → ``"0.50"``), 2 significant digits below 0.1."""
    return f"{value:.2f}" if value >= 0.1 else f"{value:.2g}"


def in_flight(records: Sequence[Any]) -> int:
    """The most sessions (a single-turn request is its own) in flight at once over ``records``,
    each from its first send to its last end: a closed loop's load; 0 without times, or when every
    session was in flight at once (a burst with no rate limit, not a closed loop)."""
    spans: dict[tuple[int, str], list[int]] = {}
    for r in records:
        if r.send_ns is None or r.end_ns is None:
            continue  # ids repeat across the measurements of one point: a session is one measurement's
        span = spans.setdefault((r.repeat, r.session_id or r.request_id), [r.send_ns, r.end_ns])
        span[0], span[1] = min(span[0], r.send_ns), max(span[1], r.end_ns)
    events = sorted([(a, 1) for a, _ in spans.values()] + [(b, -1) for _, b in spans.values()], key=lambda e: (e[0], e[1]))
    most = now = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most if most < len(spans) else 0


def condition_label(condition: tuple[str, float], repeats: Sequence[Measurement] | None = None) -> str:
    """The condition for a sentence; an infinite rate → ``"chat at max load (no rate limit)"``.

    Without ``repeats``: the short form, ``("chat", 4.0)`` → ``"chat at 4 req/s"`` (agentic
    rates are session starts: ``"agentic at 0.5 sessions/s"``).

    With the condition's ``repeats`` (its measurements): the requested load and the achieved
    one, ``"agentic at 0.50 sessions/s requested, 0.49 achieved"``; several repeats give the
    achieved range (``"0.48–0.50 achieved"``), none measured ``"achieved not measured"``.
    The condition's rate is the offered rate, which is the requested one since drawn schedules
    are rescaled to it (``workloads.arrivals``); runs that did not record a requested rate
    (older runs, whose offered rate was the raw draw's) read ``"offered"`` instead, and a trace
    replay ``"the trace's own rate, … achieved"``.
    """
    workload, rate = condition
    unit = "sessions/s" if workload == "agentic" else "req/s"
    if not math.isfinite(rate):
        loads = sorted({n for m in repeats or [] if (n := in_flight(m.records))})
        what = "sessions" if workload == "agentic" else "requests"
        if loads:  # a closed loop (a ladder point): the load is what was in flight, not a rate
            shown = f"{loads[0]}" if len(loads) == 1 else f"{loads[0]}–{loads[-1]}"
            return f"{workload} at {shown} {what} in flight (closed loop)"
        return f"{workload} at max load (no rate limit)"
    if repeats is None:
        return f"{workload} at {rate:.3g} {unit}"
    achieved = sorted(float(m.achieved_rate) for m in repeats if m.achieved_rate is not None)
    if not achieved:
        achieved_text = "achieved not measured"
    else:
        low, high = rate_text(achieved[0]), rate_text(achieved[-1])
        achieved_text = f"{low} achieved" if low == high else f"{low}–{high} achieved"
    if workload == "trace":
        return f"{workload} at {rate_text(rate)} {unit}, the trace's own rate, {achieved_text}"
    requested = [r for m in repeats if (r := _requested_rate(m)) is not None]
    if not repeats or len(requested) < len(repeats):
        return f"{workload} at {rate_text(rate)} {unit} offered, {achieved_text}"
    asked = sorted(requested)[len(requested) // 2]  # one value in practice: the condition's
    if not math.isclose(asked, rate, rel_tol=1e-9):  # a schedule that did not offer what was asked
        achieved_text = f"{rate_text(rate)} offered, {achieved_text}"
    return f"{workload} at {rate_text(asked)} {unit} requested, {achieved_text}"


def _requested_rate(measurement: Measurement) -> float | None:
    """The requested rate the run recorded (``Metrics.requested_rate``); None for older runs."""
    metrics = measurement._summary_metrics
    return None if metrics is None else metrics.requested_rate


def tps_text(value: float | None) -> str:
    """Output tokens/s for a sentence, as the tables print it (``metric_registry.tps_figure``); None → 0."""
    return tps_figure(value or 0.0)


def format_weight(value: float) -> str:
    """A weight for a sentence: at most 3 decimals, no trailing zeros (1.004 → "1.004")."""
    return f"{value:.3f}".rstrip("0").rstrip(".")


def format_ms(value: float | None, key: str) -> str:
    """A latency in ms of the metric ``key`` names (``"tpot_p99"``, ``"slo:tpot_p99"``,
    ``"ttft_p99_ms"``) in its one printed form (``metric_registry.metric_figure``: ``"138 ms"``, as
    the console's and the report's tables print it); None or infinite → ``"∞ (failed requests)"``."""
    if value is None or math.isinf(value):
        return "∞ (failed requests)"
    return f"{metric_figure(key.removeprefix('slo:'), value)} ms"


def slo_text(slo: SLO) -> str:
    """``"p99 TTFT ≤ 500 ms"``."""
    return f"p{slo.percentile:g} {METRIC_LABELS[slo.metric]} ≤ {slo.threshold_ms:g} ms"
