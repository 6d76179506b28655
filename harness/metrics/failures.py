"""How many requests an engine failed, and in whose words: the numbers behind the reliability gate.

An engine that fails more than :data:`MAX_FAILURE_RATE` of its measured requests under a
condition is not a healthy engine, whatever its successful requests measured: its latency
percentiles are computed over the survivors (the error-adjusted ones put failures at +inf, but
only SLOs read those) and its throughput over a fraction of the work. A half-dead server (vLLM
with its engine-core process killed answers a few requests from its front end and fails the
rest) would otherwise be ranked on two fast successes. The bound is the share of requests a
production engine may fail before a review asks why; 5 % by default, ``--max-failure-rate``
changes it.

Incomplete requests (``Metrics.requests_incomplete``: a duration-based run cancelled them when
its drain bound ran out, ``results.schema.INCOMPLETE``) are neither failures nor part of the
total here: the run's clock cut them, not the engine, so they move neither the failure rate nor
the gate (their count is shown next to ok and failed instead).
"""

from __future__ import annotations

import json
from typing import Any, Iterable

from results.schema import Metrics

MAX_FAILURE_RATE = 0.05
"""Default bound on the failed share of a condition's measured requests (0.05 = 5 %)."""


def server_message(body: str) -> str:
    """The message of an OpenAI-style JSON error body (``{"error": {"message": ...}}``, vLLM's
    ``{"object": "error", "message": ...}``, FastAPI's ``{"detail": ...}``), else ``body`` itself."""
    try:
        obj: Any = json.loads(body)
    except (ValueError, TypeError):
        return body
    if isinstance(obj, dict):
        error = obj.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return error["message"]
        for key in ("message", "detail", "error"):
            if isinstance(obj.get(key), str):
                return obj[key]
    return body


def request_counts(metrics: Iterable[Metrics]) -> tuple[int, int]:
    """``(failed, total)`` measured requests over ``metrics`` (one per repeat); total = completed +
    failed, so incomplete requests (cut by a duration-based run's drain bound) count in neither."""
    failed = total = 0
    for m in metrics:
        failed += m.requests_failed
        total += m.requests_completed + m.requests_failed
    return failed, total


def failure_rate(metrics: Iterable[Metrics]) -> float | None:
    """The failed share of the measured requests over ``metrics`` (0.9 = 90 %); None when none was measured."""
    failed, total = request_counts(metrics)
    return failed / total if total else None


def failure_text(metrics: Iterable[Metrics], examples: int = 2, bound: float | None = None) -> str:
    """The failures in a sentence, with the server's first words for the commonest classes:
    ``"18 of 20 requests failed (90%): http_500 ×12 ("Internal Server Error"), connection ×6
    ("ServerDisconnectedError: ...")"``. ``examples``: how many classes are quoted; ``bound``
    (a fraction) adds ``", above the 5% bound"`` inside the parentheses."""
    metrics = list(metrics)
    failed, total = request_counts(metrics)
    by_class: dict[str, int] = {}
    messages: dict[str, str] = {}
    for m in metrics:
        for cls, count in m.failures_by_class.items():
            by_class[cls] = by_class.get(cls, 0) + count
        for cls, message in m.error_examples.items():
            messages.setdefault(cls, message)
    share = _percent(failed / total, bound) if total else "n/a"
    if bound is not None:
        share += f", above the {_percent(bound, failed / total if total else None)} bound" if bound else ", where none may fail"
    parts = []
    for index, (cls, count) in enumerate(sorted(by_class.items(), key=lambda item: (-item[1], item[0]))):
        quote = messages.get(cls) if index < examples else None
        parts.append(f"{cls} ×{count}" + (f" ({_quote(quote)})" if quote else ""))
    detail = f": {', '.join(parts)}" if parts else ""
    return f"{failed} of {total} requests failed ({share}){detail}"


def _percent(value: float, other: float | None) -> str:
    """``value`` as a percentage with as many decimals (0-2) as it takes to differ from ``other``
    when they differ (a share of 25.00 % above a bound of 24.99 % must not read "25% above 25%")."""
    for digits in range(3):
        text = f"{value:.{digits}%}"
        if other is None or other == value or text != f"{other:.{digits}%}":
            return text
    return f"{value:.2%}"


def _quote(message: str, limit: int = 120) -> str:
    text = " ".join(message.split())
    return '"' + (text if len(text) <= limit else text[: limit - 1] + "…") + '"'
