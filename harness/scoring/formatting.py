"""Small pieces of the scorer's sentences: metric labels, conditions, weights and milliseconds."""

from __future__ import annotations

import math

from harness.metrics import SLO

METRIC_LABELS = {"ttft": "TTFT", "tpot": "TPOT", "e2el": "E2E latency", "itl": "ITL"}


def condition_label(condition: tuple[str, float]) -> str:
    """``("chat", 4.0)`` → ``"chat at 4 req/s"``; agentic rates are session starts
    (``"agentic at 0.753 sessions/s"``); an infinite rate → ``"at max load"``."""
    workload, rate = condition
    unit = "sessions/s" if workload == "agentic" else "req/s"
    return f"{workload} at {rate:.3g} {unit}" if math.isfinite(rate) else f"{workload} at max load (no rate limit)"


def format_weight(value: float) -> str:
    """A weight for a sentence: at most 3 decimals, no trailing zeros (1.004 → "1.004")."""
    return f"{value:.3f}".rstrip("0").rstrip(".")


def format_ms(value: float | None) -> str:
    """A latency in ms (``"1,234.5 ms"``); None or infinite → ``"∞ (failed requests)"``."""
    return "∞ (failed requests)" if value is None or math.isinf(value) else f"{value:,.1f} ms"


def slo_text(slo: SLO) -> str:
    """``"p99 TTFT ≤ 500 ms"``."""
    return f"p{slo.percentile:g} {METRIC_LABELS[slo.metric]} ≤ {slo.threshold_ms:g} ms"
