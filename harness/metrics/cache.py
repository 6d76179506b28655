"""The prefix cache accounted for against a known one (issue 40, item 3).

- **measured hit rate** = Σ cached prompt tokens / Σ prompt tokens over a point's successful
  requests that report cached tokens (the server's ``usage.prompt_tokens_details.cached_tokens``,
  the record's ``cached_tokens_server``; prompt tokens: server usage, else ours). An engine that
  reports none has no measured rate: it is never counted as 0.
- **the optimal** is the workload's theoretical hit rate under an infinite cache
  (:mod:`workloads.prefix_cache`: TensorRT-LLM's trace replay's "optimal prefix-cache hit rate"),
  which no eviction can reach above.
- **throughput with and without reused prefix tokens**: (prompt + output tokens) / s counts the
  tokens a cache served as if computed (TensorRT-LLM measured about 5× inflation on coder traces);
  (prompt − cached + output) / s counts the tokens the engine computed.
- **the eviction cliff** (:func:`eviction_cliff`): the first load whose measured rate falls more
  than ``drop`` (10 points) below the optimal while every lower load with a measured rate was
  within it: the cache held the sessions' prefixes up to there, and from there they no longer fit
  (with an LRU of N blocks, where the agents in flight × their context in blocks exceed N).
"""

from __future__ import annotations

from collections.abc import Sequence

from results.schema import CacheFigures, RequestRecord

CLIFF_DROP = 0.10  # a measured hit rate more than 10 points below the optimal has fallen off the cliff


def cache_figures(records: Sequence[RequestRecord], span_s: float, devices: int = 1,
                  optimal: float | None = None) -> CacheFigures:
    """One point's :class:`CacheFigures` from its measured ``records`` (module docstring);
    ``span_s``: its measured time (s; 0: no throughput); ``devices``: one deployment's;
    ``optimal``: the workload's infinite-cache hit rate (None: unknown)."""
    ok = [r for r in records if r.success]
    prompt = sum(r.input_tokens or 0 for r in ok)
    output = sum(r.output_tokens or 0 for r in ok)
    reported = [r for r in ok if r.cached_tokens_server is not None and r.input_tokens]
    cached = sum(r.cached_tokens_server or 0 for r in reported) if reported else None
    measured = cached / sum(r.input_tokens or 0 for r in reported) if reported else None
    per_s = (lambda tokens: tokens / span_s / max(1, devices)) if span_s > 0 else (lambda tokens: None)  # noqa: E731
    return CacheFigures(prompt_tokens=prompt, cached_tokens=cached, measured_hit_rate=measured, optimal_hit_rate=optimal,
                        total_tps_reused=per_s(prompt + output),
                        total_tps_computed=per_s(prompt - cached + output) if cached is not None else None)


def eviction_cliff(points: Sequence[tuple[float, float | None, float | None]], drop: float = CLIFF_DROP) -> float | None:
    """The load of the eviction cliff (module docstring) among ``points``, each ``(load, measured
    hit rate, optimal hit rate)`` (rates None where unknown: passed over); None when no point fell
    that far, or the lowest measured one already had (the cache never held the workload: no cliff
    to mark, the rate is low throughout)."""
    held = False
    for load, measured, optimal in sorted(points, key=lambda p: p[0]):
        if measured is None or optimal is None:
            continue
        if measured < optimal - drop:
            return load if held else None
        held = True
    return None
