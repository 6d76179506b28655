"""Prometheus ``/metrics`` text for the reference engine's server.

Names follow vLLM's ``vllm:*`` metrics with the ``own:`` prefix, so a dashboard or the
harness's post-run scrape reads both the same way. Every sample carries the label
``model_name``. The text is produced by ``prometheus_client`` from a fresh, per-call
:class:`~prometheus_client.CollectorRegistry` (no process-global registry).

=============================================  =======  ================================================
name                                           type     meaning (unit)
=============================================  =======  ================================================
``own:num_requests_running``                   gauge    sequences in the engine's running queue
``own:num_requests_waiting``                   gauge    sequences waiting to be scheduled
``own:kv_cache_blocks_used``                   gauge    KV-cache blocks in use (``block_size`` tokens each)
``own:kv_cache_blocks_total``                  gauge    KV-cache blocks in the pool
``own:kv_cache_usage_perc``                    gauge    used / total, a fraction in [0, 1] (vLLM's
                                                        ``gpu_cache_usage_perc`` convention)
``own:prefix_cache_queries_total``             counter  prompt tokens looked up in the prefix cache
``own:prefix_cache_hits_total``                counter  of those, tokens found cached
``own:prefix_cache_hit_rate``                  gauge    hits / queries since start; NaN before any query
``own:num_preemptions_total``                  counter  preemptions by recompute
``own:spec_decode_num_draft_tokens_total``     counter  tokens proposed by the speculative proposer
``own:spec_decode_num_accepted_tokens_total``  counter  of those, accepted by the target model
``own:spec_decode_num_drafts_total``           counter  verification steps (one target pass each)
``own:spec_decode_acceptance_rate``            gauge    accepted / draft tokens; NaN before any draft
``own:spec_decode_mean_acceptance_length``     gauge    1 + accepted / verification steps: tokens
                                                        emitted per step incl. the bonus token
                                                        (vLLM's "mean acceptance length"); NaN before
                                                        any step
``own:request_success_total``                  counter  finished requests (each choice when n > 1, as
                                                        vLLM v1 counts child requests) by
                                                        ``finished_reason`` = ``stop`` | ``length`` |
                                                        ``abort`` (client left)
``own:request_failure_total``                  counter  requests (choices) ended by an engine error
``own:prompt_tokens_total``                    counter  prompt tokens of accepted requests
``own:generation_tokens_total``                counter  generated tokens streamed to clients (after
                                                        stop-string truncation)
=============================================  =======  ================================================

Engine-side values come from ``LLMEngine.stats()``; a key the engine does not report is left
out rather than shown as 0. Server-side counts live in :class:`ServerCounters`, owned by one
app instance and updated only on its event loop.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

__all__ = ["CONTENT_TYPE", "FINISHED_REASONS", "ServerCounters", "render_metrics"]

CONTENT_TYPE = CONTENT_TYPE_LATEST
FINISHED_REASONS = ("stop", "length", "abort")


@dataclass
class ServerCounters:
    """Request and token counters the server keeps (the engine does not see stop strings or
    client disconnects). One instance per app; mutate only from its event loop."""

    request_success: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FINISHED_REASONS, 0))
    request_failure: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0

    def record_finished(self, finish_reason: str) -> None:
        """Count one request that ended with ``finish_reason`` (``stop``/``length``/``abort``)."""
        self.request_success[finish_reason] = self.request_success.get(finish_reason, 0) + 1


def _ratio(num: float, den: float) -> float:
    return num / den if den > 0 else math.nan


class _Collector:
    """A one-shot collector over a stats snapshot (prometheus_client custom-collector API)."""

    def __init__(self, stats: Mapping[str, Any], counters: ServerCounters, model_name: str) -> None:
        self._stats = stats
        self._counters = counters
        self._model = model_name

    def _gauge(self, name: str, doc: str, value: float) -> Metric:
        g = GaugeMetricFamily(name, doc, labels=["model_name"])
        g.add_metric([self._model], float(value))
        return g

    def _counter(self, name: str, doc: str, value: float) -> Metric:
        c = CounterMetricFamily(name, doc, labels=["model_name"])
        c.add_metric([self._model], float(value))
        return c

    def collect(self) -> Iterator[Metric]:
        s = self._stats
        has = s.__contains__
        if has("num_running"):
            yield self._gauge("own:num_requests_running", "Requests in the running queue.", s["num_running"])
        if has("num_waiting"):
            yield self._gauge("own:num_requests_waiting", "Requests waiting to be scheduled.", s["num_waiting"])
        if has("kv_blocks_used"):
            yield self._gauge("own:kv_cache_blocks_used", "KV-cache blocks in use.", s["kv_blocks_used"])
        if has("kv_blocks_total"):
            yield self._gauge("own:kv_cache_blocks_total", "KV-cache blocks in the pool.", s["kv_blocks_total"])
        if has("kv_blocks_used") and has("kv_blocks_total"):
            yield self._gauge(
                "own:kv_cache_usage_perc",
                "KV-cache usage, fraction of blocks in use (0..1).",
                _ratio(s["kv_blocks_used"], s["kv_blocks_total"]),
            )
        if has("prefix_cache_queries"):
            yield self._counter(
                "own:prefix_cache_queries", "Prompt tokens looked up in the prefix cache.", s["prefix_cache_queries"]
            )
        if has("prefix_cache_hits"):
            yield self._counter("own:prefix_cache_hits", "Prompt tokens found in the prefix cache.", s["prefix_cache_hits"])
        if has("prefix_cache_queries") and has("prefix_cache_hits"):
            yield self._gauge(
                "own:prefix_cache_hit_rate",
                "Prefix-cache hit rate in tokens (hits / queries); NaN before any query.",
                _ratio(s["prefix_cache_hits"], s["prefix_cache_queries"]),
            )
        if has("num_preemptions"):
            yield self._counter("own:num_preemptions", "Preemptions by recompute.", s["num_preemptions"])
        if has("spec_num_draft_tokens"):
            yield self._counter(
                "own:spec_decode_num_draft_tokens", "Speculative tokens proposed.", s["spec_num_draft_tokens"]
            )
        if has("spec_num_accepted_tokens"):
            yield self._counter(
                "own:spec_decode_num_accepted_tokens", "Speculative tokens accepted.", s["spec_num_accepted_tokens"]
            )
        if has("spec_num_verify_steps"):
            yield self._counter(
                "own:spec_decode_num_drafts", "Speculative verification steps.", s["spec_num_verify_steps"]
            )
        if has("spec_num_draft_tokens") and has("spec_num_accepted_tokens"):
            yield self._gauge(
                "own:spec_decode_acceptance_rate",
                "Accepted / proposed speculative tokens; NaN before any proposal.",
                _ratio(s["spec_num_accepted_tokens"], s["spec_num_draft_tokens"]),
            )
        if has("spec_num_accepted_tokens") and has("spec_num_verify_steps"):
            steps = s["spec_num_verify_steps"]
            yield self._gauge(
                "own:spec_decode_mean_acceptance_length",
                "Tokens emitted per verification step incl. the bonus token; NaN before any step.",
                1.0 + s["spec_num_accepted_tokens"] / steps if steps > 0 else math.nan,
            )
        c = self._counters
        ok = CounterMetricFamily(
            "own:request_success", "Finished requests (choices when n > 1) by finish reason.", labels=["model_name", "finished_reason"]
        )
        for reason in sorted(c.request_success):
            ok.add_metric([self._model, reason], float(c.request_success[reason]))
        yield ok
        yield self._counter("own:request_failure", "Requests (choices when n > 1) ended by an engine error.", c.request_failure)
        yield self._counter("own:prompt_tokens", "Prompt tokens of accepted requests.", c.prompt_tokens)
        yield self._counter("own:generation_tokens", "Generated tokens streamed to clients.", c.generation_tokens)


def render_metrics(stats: Mapping[str, Any], counters: ServerCounters, model_name: str) -> bytes:
    """Prometheus text exposition (format 0.0.4) of ``stats`` (``LLMEngine.stats()``) and ``counters``.

    Serve it with ``Content-Type: CONTENT_TYPE``.
    """
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(stats, counters, model_name))
    return generate_latest(registry)
