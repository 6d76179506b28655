"""SGLang ``bench_serving`` ``--output-file`` JSONL (one result per line, appended) → records and
metrics; ``--output-details`` adds the per-request arrays.

Read against SGLang 0.5.x as installed in ``.engines/sglang``: ``sglang/benchmark/serving.py``
(``sglang.bench_serving`` re-exports it): ``benchmark`` writes ``result`` (``backend``,
``dataset_name``, ``request_rate``, ``max_concurrency``, ``random_input_len``,
``random_output_len``, ``random_range_ratio``, ``server_info``, ``duration``, ``completed``,
``total_input_tokens``, ``total_output_tokens``, ``total_output_tokens_retokenized``,
``request_throughput``, ``input_throughput``, ``output_throughput``, ``mean/median/std/p90/p95/
p99_{e2e_latency,ttft,tpot,itl}_ms``, ``max_output_tokens_per_s``) and, with --output-details,
``input_lens``, ``output_lens``, ``ttfts``, ``itls``, ``generated_texts``, ``errors`` — but no
send times and no latencies, so throughput and duration are SGLang's own.
``async_request_openai_completions`` times one request; ``calculate_metrics`` summarises;
``datasets/common.py`` ``compute_random_lens`` draws the random lengths.
"""

from __future__ import annotations

from typing import Any

from .common import ParsedImport, copy_scalars, copy_summary, distribution_from, flatten_summary, number, rate, unavailable
from .vllm import records_from_arrays

TOOL, LABEL, ENGINE = "sglang", "sglang bench_serving", "sglang-bench-serving"
SRC = "sglang/benchmark/serving.py, SGLang 0.5"
_NAMES = {"ttft": "ttft_ms", "tpot": "tpot_ms", "itl": "itl_ms", "e2e_latency": "e2el_ms"}

RECOMPUTED = {
    "ttft_ms": ("recomputed from SGLang's ttfts: the first chunk with non-empty text, as ours; SGLang's clock starts "
                "before session.post on a new aiohttp session per request, so connection set-up is included"),
    "itl_ms": ("recomputed from SGLang's itls: gaps between chunks with non-empty text, as ours (SGLang's own summary "
               "splits each gap per re-tokenized token for sglang-oai backends with speculative decoding)"),
    "tpot_ms": ("recomputed: sum(ITL) / (output tokens - 1); SGLang's own TPOT takes its latency at the last SSE "
                "line, [DONE] included, so it is slightly larger"),
    "e2el_ms": "recomputed to the last text chunk; SGLang's own E2E latency runs to the last SSE line, [DONE] included",
}
COPIED = {
    "ttft_ms": "copied: SGLang's TTFT (first chunk with non-empty text, clock from before session.post)",
    "itl_ms": "copied: SGLang's ITL (gaps between text chunks; per re-tokenized token under speculative decoding)",
    "tpot_ms": "copied: SGLang's TPOT ((latency to the last SSE line incl. [DONE] - ttft) / (output_len - 1))",
    "e2el_ms": "copied: SGLang's E2E latency (to the last SSE line, [DONE] included)",
    "output_throughput": ("copied: SGLang's sum(output_lens) / its benchmark duration; output_lens is "
                          "usage.completion_tokens when a chunk carried usage, else the requested output length"),
    "request_throughput": "copied: SGLang's completed / its benchmark duration",
    "input_throughput": "copied: SGLang's total_input_tokens / its benchmark duration",
    "duration_s": "copied: SGLang's benchmark duration (before the first request until every request returned)",
    "peak_output_throughput": "copied: SGLang's max_output_tokens_per_s (one token per chunk, 1-s buckets)",
}
CAVEATS = [
    ("Output tokens: SGLang's completions client does not request usage (no stream_options), so unless the server "
     "sends usage anyway output_lens is the requested max_tokens, not the generated count; "
     f"total_output_tokens_retokenized is its tokenizer's count ({SRC})."),
    "SGLang counts a stream that carried no text as completed; we count it as failed (no_token).",
    "SGLang's random lengths are uniform in [max(L x range_ratio, 1), L] (datasets/common.py compute_random_lens): "
    "--random-range-ratio 1 is a fixed length, our --range-ratio 0.",
]


def sniff(entry: Any) -> bool:
    """An SGLang ``bench_serving`` result: its spelling ``mean_e2e_latency_ms``, its
    ``total_output_tokens_retokenized`` or its ``server_info``."""
    return isinstance(entry, dict) and any(k in entry for k in ("mean_e2e_latency_ms", "total_output_tokens_retokenized",
                                                                "server_info"))


def _shape(entry: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """The workload the file names: SGLang's random dataset with fixed lengths is our ``random``
    with ``range_ratio`` 0; another range ratio draws from a range ours cannot (recorded so a
    comparison names the difference)."""
    name = entry.get("dataset_name")
    if name != "random":
        return (str(name) if name else None), {}
    lin, lout, r = number(entry.get("random_input_len")), number(entry.get("random_output_len")), number(
        entry.get("random_range_ratio"))
    shape: dict[str, Any] = {"kind": "random"}
    if lin is not None and lout is not None:
        shape.update(input_len=int(lin), output_len=int(lout))
    if r is not None:
        shape["range_ratio"] = 0.0 if r == 1.0 else (f"uniform in [L x {r:g}, L] (SGLang --random-range-ratio {r:g}; "
                                                     "ours is symmetric around L)")
    return "random", shape


def parse(entry: dict[str, Any], parsed: ParsedImport, workload: str) -> None:
    """Fill ``parsed`` from one SGLang ``bench_serving`` result line."""
    dists = {ours: distribution_from(entry, {"mean": f"mean_{m}_ms", "median": f"median_{m}_ms", "std": f"std_{m}_ms",
                                             "p90": f"p90_{m}_ms", "p95": f"p95_{m}_ms", "p99": f"p99_{m}_ms",
                                             "max": f"max_{m}_ms"})
             for m, ours in _NAMES.items()}
    scalars = {k: number(entry.get(src)) for k, src in (
        ("output_throughput", "output_throughput"), ("request_throughput", "request_throughput"),
        ("input_throughput", "input_throughput"), ("duration_s", "duration"),
        ("peak_output_throughput", "max_output_tokens_per_s"), ("requests_completed", "completed"),
        ("total_output_tokens", "total_output_tokens"), ("total_input_tokens", "total_input_tokens"))}
    parsed.tool_summary = flatten_summary(dists, scalars)
    if (retok := number(entry.get("total_output_tokens_retokenized"))) is not None:
        parsed.tool_summary["total_output_tokens_retokenized"] = retok
    info = entry.get("server_info") if isinstance(entry.get("server_info"), dict) else {}
    parsed.version = str(info["version"]) if info.get("version") else None  # the server's, when it is SGLang
    parsed.model = info.get("model_path") or info.get("served_model_name")
    parsed.config = {k: entry[k] for k in ("tag", "backend", "dataset_name", "request_rate", "max_concurrency",
                                           "random_input_len", "random_output_len", "random_range_ratio")
                     if entry.get(k) is not None}
    parsed.offered_rate = rate(entry.get("request_rate"))
    parsed.workload, parsed.shape = _shape(entry)
    parsed.shape["api"] = "chat" if "chat" in str(entry.get("backend", "")) else "completions"
    parsed.caveats += CAVEATS
    if isinstance(entry.get("ttfts"), list) and entry["ttfts"]:
        records_from_arrays(parsed, entry, workload, parsed.file)  # no start_times: every send at 0
        parsed.definitions.update(RECOMPUTED)
        parsed.notes.append("SGLang records no per-request send times: throughput and duration are SGLang's own")
        copy_scalars(parsed, scalars, COPIED, ("output_throughput", "request_throughput", "input_throughput",
                                               "duration_s", "peak_output_throughput"))
        unavailable(parsed, ("ttft_from_scheduled_ms", "e2el_from_scheduled_ms"), "SGLang records no send times")
        return
    parsed.notes.append(f"{parsed.file.name} has no per-request data (run bench_serving with --output-details to "
                        "recompute the latencies under our definitions): every number is SGLang's own")
    scalars["requests_failed"] = None  # SGLang's result has no failure count
    copy_summary(parsed, dists, scalars, COPIED)
