"""The reliability gate: an engine that fails too many requests is never ranked as healthy.

Applied before every other stage, with or without SLOs. For each measured condition of an
engine the failed share of its measured requests is pooled over the condition's repeats
(:func:`harness.metrics.failures.failure_rate`); above ``max_failure_rate`` (default
:data:`harness.metrics.failures.MAX_FAILURE_RATE`, 5 %) in any condition the engine is
eliminated at the ``"reliability"`` stage, its reason the count and the server's first error
messages (``"18 of 20 requests failed (90%, above the 5% bound) at chat at max load (no rate
limit): http_500 ×18 ("Internal Server Error")"``). Why any condition rather than the engine's
best: a load point the engine was measured at and failed is part of what it would be asked to
serve, and judging it at another condition would hide exactly the failure a review needs to see.
An engine with some failures under the bound stays in, "degraded" in the summary, its failures
counted by the error-adjusted latencies.
"""

from __future__ import annotations

from harness.metrics.failures import MAX_FAILURE_RATE, failure_text
from ..errors import ScorerError
from ..formatting import condition_label
from ..measured.gather import EngineRuns
from .constraints import Elimination


def check_bound(max_failure_rate: float) -> float:
    """``max_failure_rate`` itself; raises :class:`ScorerError` outside [0, 1)."""
    if not 0 <= max_failure_rate < 1:
        raise ScorerError(f"max_failure_rate must be in [0, 1) (0.05 = 5%), got {max_failure_rate}")
    return max_failure_rate


def judge_reliability(engines: dict[str, EngineRuns],
                      max_failure_rate: float = MAX_FAILURE_RATE) -> dict[str, Elimination]:
    """Engine name → ``("reliability", reason)`` for each engine that failed more than
    ``max_failure_rate`` of its measured requests under some condition (module docstring)."""
    check_bound(max_failure_rate)
    eliminated: dict[str, Elimination] = {}
    for name, engine in engines.items():
        worst: tuple[float, str] | None = None
        for condition in engine.conditions():
            repeats = engine.at(condition)
            failed = sum(m.requests_failed for m in repeats)
            total = failed + sum(m.requests_completed for m in repeats)
            rate = failed / total if total else None
            if rate is None or rate <= max_failure_rate:
                continue
            metrics = [m._summary_metrics for m in repeats if m._summary_metrics is not None]
            text = (failure_text(metrics, bound=max_failure_rate) if len(metrics) == len(repeats)
                    else f"{failed:.0f} of {total:.0f} requests failed ({rate:.0%}, above the {max_failure_rate:.0%} bound)")
            reason = f"{text} at {condition_label(condition, repeats)}"
            if worst is None or rate > worst[0]:
                worst = (rate, reason)
        if worst is not None:
            eliminated[name] = ("reliability", worst[1])
    return eliminated
