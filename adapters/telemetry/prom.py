"""Prometheus ``/metrics`` text → numbers, and each engine's names → the common keys.

Parsing uses ``prometheus_client.parser`` (the reference implementation of the text format).
Common keys (None when the engine does not report them):

- ``prefix_cache_hit_rate``: cached prompt tokens / prompt tokens looked up (fraction 0..1);
- ``kv_cache_usage``: KV-cache blocks used / total at scrape time (fraction 0..1);
- ``num_preemptions``: preemptions since start (count);
- ``spec_acceptance_rate``: accepted / proposed draft tokens (fraction 0..1);
- ``spec_mean_accepted_length``: 1 + accepted / verification steps (tokens per target step,
  vLLM's "mean acceptance length" convention).

Counters are cumulative since the engine started, so a single scrape at the end mixes the
warm-up and equivalence prompts into the measured numbers (a warm-up that fills the prefix cache
raises the "hit rate" of a measured phase that never hits). :func:`measured_phase` therefore
takes two scrapes, one right before the measured phase and one right after, and maps the
difference of every counter (``_total``, ``_count``, ``_sum``) together with the gauges' final
values; the result says which scope it has (``counters_scope``). A hit rate an engine reports only
as a gauge (SGLang's ``cache_hit_rate``, when its ``cached_tokens_total`` /
``prompt_tokens_total`` counters are absent) cannot be taken apart and is marked so.
"""

from __future__ import annotations

import math
from typing import Callable

from prometheus_client.parser import text_string_to_metric_families

from adapters import registry

COMMON_KEYS = ("prefix_cache_hit_rate", "kv_cache_usage", "num_preemptions", "spec_acceptance_rate",
               "spec_mean_accepted_length")


def parse_prometheus(text: str) -> dict[str, float]:
    """Sum every sample over its labels: ``{"vllm:num_preemptions_total": 3.0, ...}``.

    Sample names keep their suffixes (``_total``, ``_bucket``, ``_sum``, ``_count``); histogram
    buckets are summed over ``le`` too, which is meaningless - use ``_sum``/``_count``.
    Raises ValueError (one line) when the text is not Prometheus exposition format.
    """
    out: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                out[sample.name] = out.get(sample.name, 0.0) + float(sample.value)
    except Exception as exc:  # the parser raises ValueError/TypeError/IndexError on bad text
        raise ValueError(f"not Prometheus text format ({type(exc).__name__}: {str(exc)[:100]})") from exc
    return out


def labelled_samples(text: str, name: str) -> list[dict[str, str]]:
    """The label sets of every sample called ``name`` (an info-style gauge such as vLLM's
    ``vllm:cache_config_info``, whose labels carry its settings as strings), in text order;
    [] when there is none. Raises ValueError (one line) for text that is not Prometheus format."""
    out: list[dict[str, str]] = []
    try:
        for family in text_string_to_metric_families(text):
            out += [dict(sample.labels) for sample in family.samples if sample.name == name]
    except Exception as exc:  # the parser raises ValueError/TypeError/IndexError on bad text
        raise ValueError(f"not Prometheus text format ({type(exc).__name__}: {str(exc)[:100]})") from exc
    return out


def metric(m: dict[str, float], *names: str) -> float | None:
    """The value of the first of ``names`` in the parsed page ``m`` (an engine's spellings, newest
    first); None when it has none of them."""
    for n in names:
        if n in m:
            return m[n]
    return None


def ratio(num: float | None, den: float | None) -> float | None:
    """``num / den``; None when either is missing or ``den`` is not positive."""
    if num is None or den is None or den <= 0:
        return None
    return num / den


def finite(v: float | None) -> float | None:
    """``v``, or None for None and NaN (a gauge an engine exports before it knows the value)."""
    return None if v is None or math.isnan(v) else v


def vllm_counters(m: dict[str, float]) -> dict[str, float | None]:
    accepted = metric(m, "vllm:spec_decode_num_accepted_tokens_total")
    drafts = metric(m, "vllm:spec_decode_num_drafts_total")
    return {
        "prefix_cache_hit_rate": ratio(metric(m, "vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
                                        metric(m, "vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total")),
        "kv_cache_usage": metric(m, "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "vllm:cpu_cache_usage_perc"),
        "num_preemptions": metric(m, "vllm:num_preemptions_total"),
        "spec_acceptance_rate": ratio(accepted, metric(m, "vllm:spec_decode_num_draft_tokens_total")),
        "spec_mean_accepted_length": (1.0 + accepted / drafts) if accepted is not None and drafts else None,
    }


def own_counters(m: dict[str, float]) -> dict[str, float | None]:
    accepted = metric(m, "own:spec_decode_num_accepted_tokens_total")
    drafts = metric(m, "own:spec_decode_num_drafts_total")
    return {
        "prefix_cache_hit_rate": ratio(metric(m, "own:prefix_cache_hits_total"), metric(m, "own:prefix_cache_queries_total")),
        "kv_cache_usage": finite(metric(m, "own:kv_cache_usage_perc")),
        "num_preemptions": metric(m, "own:num_preemptions_total"),
        "spec_acceptance_rate": ratio(accepted, metric(m, "own:spec_decode_num_draft_tokens_total")),
        "spec_mean_accepted_length": (1.0 + accepted / drafts) if accepted is not None and drafts else None,
    }


def sglang_counters(m: dict[str, float]) -> dict[str, float | None]:
    counted = ratio(metric(m, "sglang:cached_tokens_total"), metric(m, "sglang:prompt_tokens_total"))
    return {
        "prefix_cache_hit_rate": counted if counted is not None else metric(m, "sglang:cache_hit_rate"),
        "kv_cache_usage": metric(m, "sglang:token_usage"),
        "num_preemptions": metric(m, "sglang:num_retracted_reqs", "sglang:num_retracted_requests_total"),
        "spec_acceptance_rate": metric(m, "sglang:spec_accept_rate"),
        "spec_mean_accepted_length": metric(m, "sglang:spec_accept_length"),
    }


def llamacpp_counters(m: dict[str, float]) -> dict[str, float | None]:
    """llama-server's ``llamacpp:*`` (``--metrics``): prompt tokens reused from its prompt cache
    (``prompt_tokens_cached_total``) over all prompt tokens (``prompt_tokens_total`` counts the
    processed ones, cached excluded); the KV-cache gauge where the build exports it (older builds
    only); speculative counters under either spelling. It has no preemption (a slot keeps its
    context), so ``num_preemptions`` stays None."""
    cached, processed = metric(m, "llamacpp:prompt_tokens_cached_total"), metric(m, "llamacpp:prompt_tokens_total")
    accepted = metric(m, "llamacpp:spec_decode_num_accepted_tokens_total", "llamacpp:tokens_drafted_accepted_total")
    drafted = metric(m, "llamacpp:spec_decode_num_draft_tokens_total", "llamacpp:tokens_drafted_total")
    steps = metric(m, "llamacpp:spec_decode_num_drafts_total")
    return {
        "prefix_cache_hit_rate": ratio(cached, None if cached is None or processed is None else cached + processed),
        "kv_cache_usage": metric(m, "llamacpp:kv_cache_usage_ratio"),
        "num_preemptions": None,
        "spec_acceptance_rate": ratio(accepted, drafted),
        "spec_mean_accepted_length": (1.0 + accepted / steps) if accepted is not None and steps else None,
    }


COUNTER_SUFFIXES = ("_total", "_count", "_sum")


def counter_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """``after`` with every counter (name ending in :data:`COUNTER_SUFFIXES`) replaced by its
    increase since ``before`` (a counter that went down - an engine restart - keeps ``after``'s
    value); gauges keep ``after``'s value."""
    out = dict(after)
    for name, value in after.items():
        if name.endswith(COUNTER_SUFFIXES) and name in before and value >= before[name]:
            out[name] = value - before[name]
    return out


def measured_phase(engine: str, before: dict[str, float] | None, after: dict[str, float]) -> dict[str, object]:
    """:func:`common_metrics` over the measured phase: counters as ``after - before``
    (:func:`counter_delta`). ``counters_scope`` is ``"measured phase"``, or ``"since engine
    start"`` without a ``before`` scrape; ``prefix_cache_hit_rate_scope`` is ``"engine gauge"``
    when the hit rate came from a gauge that includes earlier requests."""
    scoped = counter_delta(before, after) if before is not None else after
    out: dict[str, object] = dict(common_metrics(engine, scoped))
    out["counters_scope"] = "measured phase" if before is not None else "since engine start"
    needed = registry.declared(engine, "gauge_only_hit_rate")  # the counters without which it read a gauge
    if needed and out.get("prefix_cache_hit_rate") is not None and not all(n in after for n in needed):
        out["prefix_cache_hit_rate_scope"] = "engine gauge (includes warm-up)"
    return out


def common_metrics(engine: str, parsed: dict[str, float]) -> dict[str, float | None]:
    """Map one engine's parsed ``/metrics`` to :data:`COMMON_KEYS` with the ``counters`` mapper its
    adapter class declares (all None for an engine without one, or a name not registered)."""
    mapper = registry.declared(engine, "counters")
    if mapper is None:
        return dict.fromkeys(COMMON_KEYS)
    result = mapper(parsed)
    return {k: result.get(k) for k in COMMON_KEYS}


# ------------------------------------------------------------------------------------------
# the engine's time series (issue 43): one parser per engine family, declared on its adapter
# (``read_series``, named by ``series_parser``); each maps a parsed page to the raw series keys
# below (None: not reported)

SERIES_KEYS = ("kv_cache_usage", "running", "waiting", "preemptions_total", "prefix_hits_total", "prefix_queries_total",
               "spec_accepted_total", "spec_draft_total")


def series_reader(kv: tuple[str, ...], running: str, waiting: str, preempt: tuple[str, ...], hits: str | None,
                  queries: str | None, spec: tuple[str, str] | None = None
                  ) -> Callable[[dict[str, float]], dict[str, float | None]]:
    """The parser of an engine's parsed ``/metrics`` page into :data:`SERIES_KEYS`, from the names
    of its metrics: KV-cache usage (``kv``: gauges, 0..1, first found), running and waiting
    requests (gauges), the cumulative preemption counter (``preempt``, first found; () none), the
    prefix-cache hit and query counters (None: not exported) and the speculative-decoding
    counters (``spec``: accepted and proposed draft tokens; None: the engine has none)."""
    def parse(m: dict[str, float]) -> dict[str, float | None]:
        return {"kv_cache_usage": finite(metric(m, *kv)), "running": metric(m, running), "waiting": metric(m, waiting),
                "preemptions_total": metric(m, *preempt) if preempt else None,
                "prefix_hits_total": metric(m, hits) if hits else None,
                "prefix_queries_total": metric(m, queries) if queries else None,
                "spec_accepted_total": metric(m, spec[0]) if spec else None,
                "spec_draft_total": metric(m, spec[1]) if spec else None}
    return parse

