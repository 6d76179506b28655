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


def _get(m: dict[str, float], *names: str) -> float | None:
    for n in names:
        if n in m:
            return m[n]
    return None


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den <= 0:
        return None
    return num / den


def _finite(v: float | None) -> float | None:
    return None if v is None or math.isnan(v) else v


def _vllm(m: dict[str, float]) -> dict[str, float | None]:
    accepted = _get(m, "vllm:spec_decode_num_accepted_tokens_total")
    drafts = _get(m, "vllm:spec_decode_num_drafts_total")
    return {
        "prefix_cache_hit_rate": _ratio(_get(m, "vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
                                        _get(m, "vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total")),
        "kv_cache_usage": _get(m, "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "vllm:cpu_cache_usage_perc"),
        "num_preemptions": _get(m, "vllm:num_preemptions_total"),
        "spec_acceptance_rate": _ratio(accepted, _get(m, "vllm:spec_decode_num_draft_tokens_total")),
        "spec_mean_accepted_length": (1.0 + accepted / drafts) if accepted is not None and drafts else None,
    }


def _own(m: dict[str, float]) -> dict[str, float | None]:
    accepted = _get(m, "own:spec_decode_num_accepted_tokens_total")
    drafts = _get(m, "own:spec_decode_num_drafts_total")
    return {
        "prefix_cache_hit_rate": _ratio(_get(m, "own:prefix_cache_hits_total"), _get(m, "own:prefix_cache_queries_total")),
        "kv_cache_usage": _finite(_get(m, "own:kv_cache_usage_perc")),
        "num_preemptions": _get(m, "own:num_preemptions_total"),
        "spec_acceptance_rate": _ratio(accepted, _get(m, "own:spec_decode_num_draft_tokens_total")),
        "spec_mean_accepted_length": (1.0 + accepted / drafts) if accepted is not None and drafts else None,
    }


def _sglang(m: dict[str, float]) -> dict[str, float | None]:
    counted = _ratio(_get(m, "sglang:cached_tokens_total"), _get(m, "sglang:prompt_tokens_total"))
    return {
        "prefix_cache_hit_rate": counted if counted is not None else _get(m, "sglang:cache_hit_rate"),
        "kv_cache_usage": _get(m, "sglang:token_usage"),
        "num_preemptions": _get(m, "sglang:num_retracted_reqs", "sglang:num_retracted_requests_total"),
        "spec_acceptance_rate": _get(m, "sglang:spec_accept_rate"),
        "spec_mean_accepted_length": _get(m, "sglang:spec_accept_length"),
    }


def _llamacpp(m: dict[str, float]) -> dict[str, float | None]:
    """llama-server's ``llamacpp:*`` (``--metrics``): prompt tokens reused from its prompt cache
    (``prompt_tokens_cached_total``) over all prompt tokens (``prompt_tokens_total`` counts the
    processed ones, cached excluded); the KV-cache gauge where the build exports it (older builds
    only); speculative counters under either spelling. It has no preemption (a slot keeps its
    context), so ``num_preemptions`` stays None."""
    cached, processed = _get(m, "llamacpp:prompt_tokens_cached_total"), _get(m, "llamacpp:prompt_tokens_total")
    accepted = _get(m, "llamacpp:spec_decode_num_accepted_tokens_total", "llamacpp:tokens_drafted_accepted_total")
    drafted = _get(m, "llamacpp:spec_decode_num_draft_tokens_total", "llamacpp:tokens_drafted_total")
    steps = _get(m, "llamacpp:spec_decode_num_drafts_total")
    return {
        "prefix_cache_hit_rate": _ratio(cached, None if cached is None or processed is None else cached + processed),
        "kv_cache_usage": _get(m, "llamacpp:kv_cache_usage_ratio"),
        "num_preemptions": None,
        "spec_acceptance_rate": _ratio(accepted, drafted),
        "spec_mean_accepted_length": (1.0 + accepted / steps) if accepted is not None and steps else None,
    }


MAPPERS: dict[str, Callable[[dict[str, float]], dict[str, float | None]]] = {
    "vllm": _vllm,
    "own": _own,
    "sglang": _sglang,
    "llamacpp": _llamacpp,
    "llamacpp_q8_0": _llamacpp,
}


COUNTER_SUFFIXES = ("_total", "_count", "_sum")

GAUGE_ONLY_HIT_RATES = {"sglang": ("sglang:cached_tokens_total", "sglang:prompt_tokens_total")}
"""Engines whose hit rate falls back to a gauge when these counters are absent."""


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
    needed = GAUGE_ONLY_HIT_RATES.get(engine)
    if needed and out.get("prefix_cache_hit_rate") is not None and not all(n in after for n in needed):
        out["prefix_cache_hit_rate_scope"] = "engine gauge (includes warm-up)"
    return out


def common_metrics(engine: str, parsed: dict[str, float]) -> dict[str, float | None]:
    """Map one engine's parsed ``/metrics`` to :data:`COMMON_KEYS` (all None for unknown engines)."""
    mapper = MAPPERS.get(engine)
    if mapper is None:
        return dict.fromkeys(COMMON_KEYS)
    result = mapper(parsed)
    return {k: result.get(k) for k in COMMON_KEYS}


# ------------------------------------------------------------------------------------------
# the engine's time series (issue 43): one named parser per engine family, on its adapter
# (``series_parser``); each maps a parsed page to the raw series keys below (None: not reported)

SERIES_KEYS = ("kv_cache_usage", "running", "waiting", "preemptions_total", "prefix_hits_total", "prefix_queries_total")


def _series(kv: tuple[str, ...], running: str, waiting: str, preempt: tuple[str, ...], hits: str | None,
            queries: str | None) -> Callable[[dict[str, float]], dict[str, float | None]]:
    def parse(m: dict[str, float]) -> dict[str, float | None]:
        return {"kv_cache_usage": _finite(_get(m, *kv)), "running": _get(m, running), "waiting": _get(m, waiting),
                "preemptions_total": _get(m, *preempt) if preempt else None,
                "prefix_hits_total": _get(m, hits) if hits else None,
                "prefix_queries_total": _get(m, queries) if queries else None}
    return parse


SERIES_PARSERS: dict[str, Callable[[dict[str, float]], dict[str, float | None]]] = {
    "vllm": _series(("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "vllm:cpu_cache_usage_perc"),
                    "vllm:num_requests_running", "vllm:num_requests_waiting", ("vllm:num_preemptions_total",),
                    "vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"),
    "own": _series(("own:kv_cache_usage_perc",), "own:num_requests_running", "own:num_requests_waiting",
                   ("own:num_preemptions_total",), "own:prefix_cache_hits_total", "own:prefix_cache_queries_total"),
    "sglang": _series(("sglang:token_usage",), "sglang:num_running_reqs", "sglang:num_queue_reqs",
                      ("sglang:num_retracted_requests_total", "sglang:num_retracted_reqs"), "sglang:cached_tokens_total",
                      "sglang:prompt_tokens_total"),
    # llama-server (--metrics): slots busy and requests deferred; no preemption (a slot keeps its context)
    "llamacpp": _series(("llamacpp:kv_cache_usage_ratio",), "llamacpp:requests_processing", "llamacpp:requests_deferred",
                        (), None, None),
}
"""Named parsers of the engines' ``/metrics`` into the series' keys (:data:`SERIES_KEYS`): KV-cache
usage (0..1), running and waiting requests, and the cumulative preemption and prefix-cache counters."""
