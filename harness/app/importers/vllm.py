"""``vllm bench serve --save-result [--save-detailed]`` JSON → records and metrics.

Read against vLLM 0.32.0 as installed in ``.engines/vllm``: ``vllm/benchmarks/serve.py``
(``calculate_metrics``; ``benchmark`` builds the result: ``duration``, ``completed``, ``failed``,
``request_throughput``, ``output_throughput``, ``input_lens``, ``output_lens``, ``ttfts``, ``itls``,
``latencies``, ``start_times``, ``queue_times``, ``generated_texts``, ``errors``,
``max_output_tokens_per_s``, ``mean/median/std/p<P>_<metric>_ms``; ``main`` adds ``date``,
``backend``, ``model_id``, ``tokenizer_id``, ``num_prompts``, ``request_rate``, ``burstiness``,
``max_concurrency`` and, without ``--save-detailed``, drops the per-request arrays) and
``vllm/benchmarks/lib/endpoint_request_func.py`` (how one request is timed). Times are seconds
of ``time.perf_counter()``. SGLang's ``bench_serving`` writes the same per-request arrays
(``harness.app.importers.sglang`` reuses :func:`records_from_arrays`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .common import (ImportFormatError, ParsedImport, Timed, copy_scalars, copy_summary, distribution_from, flatten_summary,
                     make_record, number, rate, s_to_ns, unavailable)

TOOL, LABEL, ENGINE = "vllm", "vllm bench serve", "vllm-bench-serve"
SRC = "vllm/benchmarks/serve.py + lib/endpoint_request_func.py, vLLM 0.32.0"
METRICS = {"ttft": "ttft_ms", "tpot": "tpot_ms", "itl": "itl_ms", "e2el": "e2el_ms"}
_PCT = re.compile(r"^p(\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el)_ms$")
_OURS = {"50": "p50", "90": "p90", "95": "p95", "99": "p99", "99.9": "p99_9"}

RECOMPUTED = {
    "ttft_ms": ("recomputed from vLLM's per-request ttfts; vLLM stamps the first SSE chunk with a non-empty "
                "'choices' list even when its text is empty (ours: the first chunk carrying a token) and starts the "
                "clock before session.post, so connection set-up is included (ours: after the body is written)"),
    "itl_ms": ("recomputed from vLLM's itls: the gaps between chunks with 'choices', empty-text chunks included "
               "(ours: token-bearing chunks only)"),
    "tpot_ms": ("recomputed: (E2E - TTFT) / (output tokens - 1) over requests with >= 2 tokens, vLLM's own TPOT "
                "formula (first token excluded); tokens are vLLM's output_lens"),
    "e2el_ms": "recomputed: the last chunk with 'choices' - vLLM's request start",
    "ttft_from_scheduled_ms": "recomputed: vLLM's start_times - queue_times is the request's arrival time",
    "e2el_from_scheduled_ms": "recomputed: vLLM's start_times - queue_times is the request's arrival time",
    "output_throughput": ("recomputed: output tokens / our duration (first request start -> last token); tokens "
                          "are vLLM's output_lens: the server's usage.completion_tokens when it sent usage, else "
                          "vLLM's tokenizer re-count of the text; vLLM's own output_throughput divides by its "
                          "benchmark duration (from before the first request to after the last one returned)"),
    "request_throughput": "recomputed over our duration (vLLM divides by its benchmark duration)",
    "input_throughput": "recomputed over our duration; input tokens are vLLM's input_lens (usage.prompt_tokens when sent)",
    "duration_s": ("recomputed: first request start -> last token chunk (vLLM records no stream end, so the usage "
                   "chunk and [DONE] after it are not in it)"),
    "peak_output_throughput": ("recomputed, counting each chunk's share of the tokens; vLLM's "
                               "max_output_tokens_per_s counts one token per chunk"),
}
COPIED = {
    "ttft_ms": "copied: vLLM's TTFT (first chunk with non-empty 'choices', from before session.post)",
    "itl_ms": "copied: vLLM's ITL (gaps between chunks with 'choices', empty-text chunks included)",
    "tpot_ms": "copied: vLLM's TPOT ((latency - ttft) / (output_len - 1), output_len >= 2)",
    "e2el_ms": "copied: vLLM's E2E latency (to the last chunk with 'choices')",
    "output_throughput": ("copied: vLLM's output_throughput = sum(output_lens) / its benchmark duration (usage "
                          "completion_tokens, else its tokenizer re-count)"),
    "request_throughput": "copied: vLLM's completed / its benchmark duration",
    "input_throughput": "copied: vLLM's total_input_tokens / its benchmark duration",
    "duration_s": "copied: vLLM's benchmark duration (before the first request until every request returned)",
    "peak_output_throughput": "copied: vLLM's max_output_tokens_per_s (one token per chunk, 1-s buckets)",
}
CAVEATS = [
    f"Failed requests: vLLM keeps ttft 0 and output_len 0 for them and leaves them out of its latencies, as we do ({SRC}).",
    "vLLM's percentiles are numpy's linear ones, as ours; its std is the population std, as ours.",
    ("vllm bench serve 0.32 sends no temperature unless --temperature is given (serve.py warns: 'no longer sets "
     "temperature==0'): the server's default applies (sampling at 1.0 on most servers) while bench run sends 0.0, "
     "so pass --temperature 0 to compare like for like."),
    ("vLLM's random dataset draws its prompts from np.random.default_rng(--seed) (datasets/datasets.py "
     "RandomDataset): a second run with the same seed against the same server repeats the prompts and is served "
     "from its prefix cache; restart the server or change --seed between runs."),
]


def sniff(entry: Any) -> bool:
    """A ``vllm bench serve`` result: its run settings (``endpoint_type``, ``tokenizer_id``) or
    its E2E key spelling ``mean_e2el_ms`` (SGLang writes ``mean_e2e_latency_ms``)."""
    return isinstance(entry, dict) and any(k in entry for k in ("endpoint_type", "tokenizer_id", "mean_e2el_ms"))


def tool_distributions(d: dict[str, Any]) -> dict[str, dict[str, float] | None]:
    """Our metric → the tool's summary distribution (ms) from ``mean_/median_/std_/p<P>_<m>_ms``."""
    out: dict[str, dict[str, float] | None] = {}
    for short, ours in METRICS.items():
        keys = {"mean": f"mean_{short}_ms", "median": f"median_{short}_ms", "std": f"std_{short}_ms"}
        for k in d:
            if (m := _PCT.match(k)) and m.group(2) == short and m.group(1) in _OURS:
                keys[_OURS[m.group(1)]] = k
        out[ours] = distribution_from(d, keys)
    return out


def _list(d: dict[str, Any], key: str, n: int, path: Path) -> list[Any] | None:
    v = d.get(key)
    if v is None:
        return None
    if not isinstance(v, list) or len(v) != n:
        raise ImportFormatError(f"{path}: '{key}' should be a list of {n} values (one per request, like 'ttfts'); "
                                "the file is damaged")
    return v


def records_from_arrays(parsed: ParsedImport, d: dict[str, Any], workload: str, path: Path) -> bool:
    """Fill ``parsed.records`` from vLLM/SGLang per-request arrays (seconds). Returns whether the
    file had send times (``start_times``): without them every request is placed at time 0 and
    only per-request latencies mean anything.

    A request succeeded when its error text is empty and its TTFT is positive (vLLM and SGLang
    record ttft 0.0 until a token came; SGLang counts a stream that carried no text as
    completed, we as failed ``no_token``). First token = start + ttft; every later chunk = the
    previous one + its ITL; E2E ends at the last chunk."""
    ttfts = d.get("ttfts")
    if not isinstance(ttfts, list):
        raise ImportFormatError(f"{path}: 'ttfts' is not a list; the file is damaged")
    n = len(ttfts)
    itls = _list(d, "itls", n, path) or [[] for _ in range(n)]
    starts = _list(d, "start_times", n, path)
    queues = _list(d, "queue_times", n, path)
    ins, outs = _list(d, "input_lens", n, path), _list(d, "output_lens", n, path)
    errors, texts = _list(d, "errors", n, path), _list(d, "generated_texts", n, path)
    t0 = min((number(s) for s in starts or [] if number(s) is not None), default=0.0)
    for i in range(n):
        ttft = number(ttfts[i]) or 0.0
        error = str(errors[i] or "") if errors else ""
        ok = not error and ttft > 0
        start = number(starts[i]) if starts else None
        send = s_to_ns(start - t0) if start is not None else 0
        queue = number(queues[i]) if queues else None
        gaps = [s_to_ns(g) for g in (itls[i] or []) if number(g) is not None]
        out = int(outs[i]) if outs and number(outs[i]) is not None else None
        t = Timed(send=send, first=s_to_ns(ttft), gaps=gaps,
                  scheduled=send - s_to_ns(queue) if queue is not None and start is not None else None)
        parsed.records.append(make_record(
            i, parsed, workload, t, ok=ok, error=error, output_server=out,
            input_server=int(ins[i]) if ins and number(ins[i]) is not None else None,
            text=str(texts[i]) if texts and texts[i] is not None else None,
            error_class=None if error or ok else "no_token"))
    return starts is not None


def parse(entry: dict[str, Any], parsed: ParsedImport, workload: str) -> None:
    """Fill ``parsed`` from one ``vllm bench serve`` result object."""
    path = parsed.file
    dists = tool_distributions(entry)
    scalars = {"output_throughput": number(entry.get("output_throughput")),
               "request_throughput": number(entry.get("request_throughput")),
               "duration_s": number(entry.get("duration")),
               "peak_output_throughput": number(entry.get("max_output_tokens_per_s")),
               "requests_completed": number(entry.get("completed")), "requests_failed": number(entry.get("failed")),
               "total_output_tokens": number(entry.get("total_output_tokens")),
               "total_input_tokens": number(entry.get("total_input_tokens"))}
    duration = scalars["duration_s"]
    if duration and (tin := number(entry.get("total_input_tokens"))) is not None:
        scalars["input_throughput"] = tin / duration
    parsed.tool_summary = flatten_summary(dists, scalars)
    parsed.config = {k: entry[k] for k in ("date", "backend", "label", "model_id", "tokenizer_id", "num_prompts",
                                           "request_rate", "burstiness", "max_concurrency", "ramp_up_strategy")
                     if entry.get(k) is not None}
    parsed.model = entry.get("model_id")
    parsed.offered_rate = rate(entry.get("request_rate"))
    parsed.caveats += CAVEATS
    parsed.shape = {"api": "chat" if "chat" in str(entry.get("backend", "")) else "completions"}
    if entry.get("tokenizer_id"):
        parsed.shape["tokenizer"] = entry["tokenizer_id"]
    if isinstance(entry.get("ttfts"), list) and entry["ttfts"]:
        timed = records_from_arrays(parsed, entry, workload, path)
        parsed.definitions.update(RECOMPUTED)
        if not timed:  # an older vLLM: per-request latencies without send times
            parsed.notes.append(f"{path.name} has per-request latencies but no start_times (an older vLLM): "
                                "throughput and duration are vLLM's own")
            copy_scalars(parsed, scalars, COPIED, ("output_throughput", "request_throughput", "input_throughput",
                                                   "duration_s", "peak_output_throughput"))
            unavailable(parsed, ("ttft_from_scheduled_ms", "e2el_from_scheduled_ms"), "no send times in the file")
        return
    parsed.notes.append(f"{path.name} has no per-request data (run vllm bench serve with --save-detailed to "
                        "recompute every metric under our definitions): every number is vLLM's own")
    copy_summary(parsed, dists, scalars, COPIED)
