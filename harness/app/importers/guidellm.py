"""GuideLLM's ``benchmarks.json`` (``guidellm benchmark --output-path``) → records and metrics.

Schema from vllm-project/guidellm: ``src/guidellm/benchmark/schemas/generative/report.py``
(``GenerativeBenchmarksReport``: ``args``, ``benchmarks``; newer files add ``metadata`` with
``guidellm_version``), ``.../generative/benchmark.py`` (a benchmark: ``config``,
``scheduler_metrics``, ``metrics``, ``requests`` with ``successful`` / ``incomplete`` /
``errored`` lists of sampled requests, computed ``start_time`` / ``end_time`` / ``duration``),
``src/guidellm/schemas/request_stats.py`` (``GenerativeRequestStats``: ``info.timings``,
``input_metrics`` / ``output_metrics`` with ``total_tokens``, computed ``prompt_tokens``,
``output_tokens``, ``time_to_first_token_ms``, ``time_per_output_token_ms``,
``inter_token_latency_ms``, ``request_latency`` in s), ``src/guidellm/schemas/info.py``
(``RequestTimings``: ``targeted_start``, ``request_start``, ``first_token_iteration``,
``last_token_iteration``, ``token_iterations``, ``request_end``; Unix seconds) and
``src/guidellm/schemas/statistics.py`` (``DistributionSummary``: ``mean``, ``median``,
``std_dev``, ``max``, ``percentiles.p50`` ... from a weighted PDF).
"""

from __future__ import annotations

from typing import Any

from results.schema import INCOMPLETE

from .common import (ImportFormatError, ParsedImport, Timed, copy_scalars, copy_summary, flatten_summary, make_record,
                     number, pick_entry, s_to_ns, unavailable)

TOOL, LABEL, ENGINE = "guidellm", "guidellm benchmark", "guidellm"
SRC = "vllm-project/guidellm src/guidellm/schemas/request_stats.py"
_DISTS = {"ttft_ms": ("time_to_first_token_ms", 1.0), "tpot_ms": ("inter_token_latency_ms", 1.0),
          "e2el_ms": ("request_latency", 1000.0)}

RECOMPUTED = {
    "ttft_ms": "recomputed: first_token_iteration - request_start, GuideLLM's TTFT (the first streamed line with content)",
    "tpot_ms": ("recomputed: (last - first token) / (output tokens - 1), which is GuideLLM's inter_token_latency_ms; "
                "GuideLLM's time_per_output_token_ms is (last token - request start) / output tokens: TTFT and the "
                "first token included"),
    "e2el_ms": ("recomputed to last_token_iteration; GuideLLM's request_latency runs to request_end (the end of the "
                "stream) and is in seconds"),
    "output_throughput": ("recomputed: output tokens / (first request_start -> last request_end); GuideLLM's own "
                          "output_tokens_per_second is a time-weighted distribution of instantaneous rates, not "
                          "tokens / duration"),
    "request_throughput": "recomputed over first request_start -> last request_end (GuideLLM's is a rate distribution)",
    "input_throughput": "recomputed over first request_start -> last request_end",
    "duration_s": "recomputed: first request_start -> last request_end (GuideLLM's benchmark duration is its measure window)",
    "ttft_from_scheduled_ms": "recomputed from GuideLLM's targeted_start (when its scheduler wanted the request sent)",
    "e2el_from_scheduled_ms": "recomputed from GuideLLM's targeted_start",
}
COPIED = {
    "ttft_ms": "copied: GuideLLM's time_to_first_token_ms (PDF percentiles, not numpy linear)",
    "tpot_ms": "copied: GuideLLM's inter_token_latency_ms ((last - first token) / (output tokens - 1))",
    "e2el_ms": "copied: GuideLLM's request_latency (to the end of the stream, s x 1000)",
    "output_throughput": "copied: GuideLLM's output_tokens_per_second mean (a time-weighted rate distribution)",
    "request_throughput": "copied: GuideLLM's requests_per_second mean (a time-weighted rate distribution)",
    "duration_s": "copied: GuideLLM's benchmark duration (its measurement window)",
}
CAVEATS = [
    f"GuideLLM stores only the first and last token times and an iteration count per request, no per-chunk times ({SRC}).",
    "Output tokens: GuideLLM's output_metrics.total_tokens (the server's usage) when sent, else its count of streamed "
    "iterations (one token each).",
    "GuideLLM's incomplete requests (cancelled when the benchmark ended) are stored as incomplete, neither ok nor "
    "failed, as a duration-based bench run stores the requests its drain bound cancelled (results.schema.INCOMPLETE).",
    "GuideLLM's summary percentiles come from a weighted PDF (the value at the percentile, no interpolation); ours are "
    "numpy linear.",
]


def sniff(entry: Any) -> bool:
    """A GuideLLM report: a ``benchmarks`` list whose items have ``requests`` and ``metrics``."""
    return (isinstance(entry, dict) and isinstance(entry.get("benchmarks"), list)
            and all(isinstance(b, dict) and "requests" in b and "metrics" in b for b in entry["benchmarks"]))


def _dist(summary: Any, scale: float) -> dict[str, float] | None:
    """Our Distribution (ms) from a GuideLLM ``StatusDistributionSummary``'s ``successful`` part."""
    d = summary.get("successful") if isinstance(summary, dict) else None
    if not isinstance(d, dict):
        return None
    pct = d.get("percentiles") if isinstance(d.get("percentiles"), dict) else {}
    out = {k: number(v) * scale for k, v in (("mean", d.get("mean")), ("median", d.get("median")),
                                               ("std", d.get("std_dev")), ("max", d.get("max")), ("p50", pct.get("p50")),
                                               ("p90", pct.get("p90")), ("p95", pct.get("p95")),
                                               ("p99", pct.get("p99")), ("p99_9", pct.get("p999")))
           if number(v) is not None}
    return out or None


def _label(b: dict[str, Any]) -> str:
    cfg = b.get("config") if isinstance(b.get("config"), dict) else {}
    strategy = cfg.get("strategy") if isinstance(cfg.get("strategy"), dict) else {}
    kind = strategy.get("type_") or "benchmark"
    r = strategy.get("rate") or strategy.get("streams")
    return f"{kind}@{r:g}" if isinstance(r, (int, float)) else str(kind)


def _records(parsed: ParsedImport, b: dict[str, Any], workload: str) -> None:
    reqs = b["requests"]
    groups = [(status, reqs.get(status) or []) for status in ("successful", "incomplete", "errored")]
    items = [(status, r) for status, rs in groups for r in rs if isinstance(r, dict)]
    for _, r in items:
        if not isinstance((r.get("info") or {}).get("timings"), dict):
            raise ImportFormatError(f"{parsed.file}: a request has no info.timings (the GenerativeRequestStats format "
                                    "of guidellm's schemas/request_stats.py); this GuideLLM version's file is not supported")
    starts = [number(r["info"]["timings"].get("request_start")) for _, r in items]
    t0 = min((s for s in starts if s is not None), default=0.0)
    for i, ((status, r), start) in enumerate(zip(items, starts)):
        tm = r["info"]["timings"]

        def rel(key: str) -> int | None:
            v = number(tm.get(key))
            return s_to_ns(v - start) if v is not None and start is not None else None

        send = s_to_ns(start - t0) if start is not None else None
        target = number(tm.get("targeted_start"))
        t = Timed(send=send, first=rel("first_token_iteration"), last=rel("last_token_iteration"), end=rel("request_end"),
                  scheduled=s_to_ns(target - t0) if target is not None and send is not None else None)
        out_usage = number((r.get("output_metrics") or {}).get("total_tokens"))
        out_count = number(r.get("output_tokens"))
        ok = status == "successful" and t.first is not None
        error = str((r.get("info") or {}).get("error") or "")
        parsed.records.append(make_record(
            i, parsed, workload, t, ok=ok, error=error,
            error_class=INCOMPLETE if status == "incomplete" else (None if error else "no_token"),
            output_server=int(out_usage) if out_usage is not None else None,
            output_retok=int(out_count) if out_usage is None and out_count is not None else None,
            input_server=int(v) if (v := number(r.get("prompt_tokens"))) is not None else None,
            text=r.get("output") if isinstance(r.get("output"), str) else None))
        if status == "incomplete":
            parsed.records[-1].error_message = "cut off when the benchmark ended (GuideLLM's incomplete)"


def load(doc: dict[str, Any], entry: int | None, parsed: ParsedImport, workload: str) -> None:
    """Fill ``parsed`` from one benchmark of a GuideLLM report (by default the last)."""
    benchmarks = doc["benchmarks"]
    if not benchmarks:
        raise ImportFormatError(f"{parsed.file}: the report holds no benchmark (did guidellm finish one?)")
    b, parsed.entry = pick_entry(benchmarks, entry, parsed.file, "benchmark", parsed.notes)
    parsed.entries = len(benchmarks)
    if len(benchmarks) > 1:
        parsed.notes.append("benchmarks: " + ", ".join(f"{i} {_label(x)}" for i, x in enumerate(benchmarks, 1)))
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    parsed.version = str(meta["guidellm_version"]) if meta.get("guidellm_version") else None
    metrics = b.get("metrics") if isinstance(b.get("metrics"), dict) else {}
    dists = {ours: _dist(metrics.get(theirs), scale) for ours, (theirs, scale) in _DISTS.items()}
    totals = metrics.get("request_totals") if isinstance(metrics.get("request_totals"), dict) else {}
    rps, ops = _dist(metrics.get("requests_per_second"), 1.0), _dist(metrics.get("output_tokens_per_second"), 1.0)
    duration = number(b.get("duration"))
    if duration is None and number(b.get("end_time")) is not None and number(b.get("start_time")) is not None:
        duration = float(b["end_time"]) - float(b["start_time"])
    scalars = {"request_throughput": (rps or {}).get("mean"), "output_throughput": (ops or {}).get("mean"),
               "duration_s": duration, "requests_completed": number(totals.get("successful")),
               "requests_failed": (number(totals.get("errored")) or 0.0) + (number(totals.get("incomplete")) or 0.0)}
    parsed.tool_summary = flatten_summary(dists, scalars)
    if tpot := _dist(metrics.get("time_per_output_token_ms"), 1.0):
        parsed.tool_summary.update({f"time_per_output_token_ms.{k}": v for k, v in tpot.items()})
    cfg = b.get("config") if isinstance(b.get("config"), dict) else {}
    strategy = cfg.get("strategy") if isinstance(cfg.get("strategy"), dict) else {}
    parsed.config = {"benchmark": _label(b), **{f"strategy.{k}": v for k, v in strategy.items()
                                               if isinstance(v, (str, int, float, bool))}}
    args = doc.get("args") if isinstance(doc.get("args"), dict) else {}
    parsed.config.update({f"args.{k}": args[k] for k in ("target", "model", "data", "profile", "rate") if args.get(k)})
    parsed.model = args.get("model") if isinstance(args.get("model"), str) else None
    if strategy.get("type_") in ("constant", "poisson") and number(strategy.get("rate")) is not None:
        parsed.offered_rate = number(strategy.get("rate"))
    parsed.caveats += CAVEATS
    reqs = b.get("requests") if isinstance(b.get("requests"), dict) else {}
    if not any(reqs.get(s) for s in ("successful", "incomplete", "errored")):
        parsed.notes.append("the benchmark stores no requests: every number is GuideLLM's own")
        copy_summary(parsed, {**dists, "itl_ms": None}, scalars, COPIED)
        return
    _records(parsed, b, workload)
    parsed.definitions.update(RECOMPUTED)
    unavailable(parsed, ("itl_ms",), "GuideLLM records no per-chunk times (only the first and last token)")
    unavailable(parsed, ("peak_output_throughput",), "GuideLLM records no per-chunk times")
    stored = len(reqs.get("successful") or [])
    if totals.get("successful") is not None and stored < (number(totals["successful"]) or 0):
        parsed.notes.append(f"GuideLLM kept a sample of {stored} of {int(totals['successful'])} successful requests "
                            "(--sample-requests): the latencies are over the sample, the rates and counts are GuideLLM's")
        copy_scalars(parsed, scalars, COPIED, ("output_throughput", "request_throughput", "duration_s"))
        unavailable(parsed, ("input_throughput",), "GuideLLM kept a sample of the requests")
        parsed.copied.update({k: int(scalars[k] or 0) for k in ("requests_completed", "requests_failed")})
