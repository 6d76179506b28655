"""AIPerf's ``profile_export.jsonl`` (one record per request) and ``profile_export_aiperf.json``
(aggregated statistics) → records and metrics.

Schemas from ai-dynamo/aiperf's documentation: ``docs/tutorials/working-with-profile-exports.md``
(a record: ``metadata`` with ``request_start_ns`` / ``request_end_ns`` epoch nanoseconds,
``benchmark_phase``, ``was_cancelled``, ``turn_index``; ``metrics`` of ``{"value", "unit"}`` such
as ``time_to_first_token``, ``inter_chunk_latency`` (a list), ``request_latency``,
``output_sequence_length``, ``input_sequence_length``; ``error`` with ``code``, ``type``,
``message``), ``docs/reference/json-export-schema.md`` (per-metric ``unit``, ``avg``, ``std``,
``p1``..``p99``, ``min``, ``max``; top-level ``aiperf_version``, ``input_config``) and
``docs/metrics-reference.md`` (every metric's formula). Either file may be given, or the
artifact folder: the other one beside it (``X.jsonl`` / ``X_aiperf.json``) is read too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .common import (ImportFormatError, ParsedImport, Timed, copy_summary, flatten_summary, make_record,
                     number, read_entries, unavailable)

TOOL, LABEL, ENGINE = "aiperf", "aiperf profile", "aiperf"
SRC = "ai-dynamo/aiperf docs/metrics-reference.md"
_TO_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9, "sec": 1e9, "seconds": 1e9}
_DISTS = {"ttft_ms": "time_to_first_token", "tpot_ms": "inter_token_latency", "itl_ms": "inter_chunk_latency",
          "e2el_ms": "request_latency"}

RECOMPUTED = {
    "ttft_ms": ("recomputed from AIPerf's time_to_first_token: the first response with non-empty content - request "
                "start, as ours (AIPerf stamps the start before the request is written)"),
    "itl_ms": ("recomputed from AIPerf's inter_chunk_latency (gaps between content responses, our ITL); AIPerf's "
               "'inter_token_latency' is a per-request (request_latency - TTFT) / (OSL - 1), which is our TPOT"),
    "tpot_ms": ("recomputed: (E2E - TTFT) / (output tokens - 1), AIPerf's inter_token_latency formula, with the "
                "server's usage.completion_tokens where AIPerf recorded it, else AIPerf's OSL (its tokenizer's count)"),
    "e2el_ms": "recomputed: the last content response - request start (AIPerf's request_latency)",
    "output_throughput": ("recomputed over first request start -> last response (AIPerf's benchmark_duration); "
                          "AIPerf's own output_token_throughput counts OSL: its tokenizer over the text, reasoning "
                          "included, add_special_tokens=False; ours prefers the server's usage"),
    "duration_s": "recomputed: first request start -> last response received, AIPerf's benchmark_duration",
}
COPIED = {
    "ttft_ms": "copied: AIPerf's time_to_first_token (first non-empty content response - request start)",
    "tpot_ms": "copied: AIPerf's inter_token_latency ((request_latency - TTFT) / (OSL - 1), OSL by its tokenizer)",
    "itl_ms": "copied: AIPerf's inter_chunk_latency (gaps between content responses)",
    "e2el_ms": "copied: AIPerf's request_latency (to the last content response)",
    "output_throughput": "copied: AIPerf's output_token_throughput = total OSL (its tokenizer's count) / benchmark_duration",
    "request_throughput": "copied: AIPerf's request_count / benchmark_duration",
    "duration_s": "copied: AIPerf's benchmark_duration (first request -> last response)",
}
CAVEATS = [
    "AIPerf's summary std is the sample standard deviation (n - 1); ours is the population std "
    "(docs/reference/json-export-schema.md).",
    "AIPerf's warm-up requests (benchmark_phase 'warmup') are kept as warm-up records and never enter our metrics.",
]


def sniff(entry: Any) -> bool:
    """An AIPerf per-request record (``metadata`` with ``request_start_ns`` and ``metrics``) or its
    aggregated export (``aiperf_version``, or metric blocks with ``unit`` and ``avg``)."""
    if not isinstance(entry, dict):
        return False
    if isinstance(entry.get("metadata"), dict) and "request_start_ns" in entry["metadata"]:
        return True
    return "aiperf_version" in entry or (isinstance(entry.get("time_to_first_token"), dict)
                                        and "unit" in entry["time_to_first_token"])


def companions(path: Path) -> tuple[Path | None, Path | None]:
    """(per-request JSONL, aggregated JSON) for ``path``: the artifact folder, or either file."""
    if path.is_dir():
        jsonl, summary = path / "profile_export.jsonl", path / "profile_export_aiperf.json"
    elif path.name.endswith("_aiperf.json"):
        jsonl, summary = path.with_name(path.name[: -len("_aiperf.json")] + ".jsonl"), path
    else:
        jsonl, summary = path, path.with_name(path.stem + "_aiperf.json")
    return (jsonl if jsonl.is_file() else None), (summary if summary.is_file() else None)


def _value_ns(metrics: dict[str, Any], name: str) -> float | list[float] | None:
    """A record metric in ns (``{"value": 12.5, "unit": "ms"}`` → 12.5e6; lists element-wise)."""
    m = metrics.get(name)
    if not isinstance(m, dict) or m.get("value") is None:
        return None
    scale = _TO_NS.get(str(m.get("unit", "ms")).lower())
    if scale is None:
        return None
    v = m["value"]
    if isinstance(v, list):
        return [x * scale for x in v if number(x) is not None]
    return number(v) * scale if number(v) is not None else None


def _epoch_ns(value: Any) -> int | None:
    """An epoch-nanosecond stamp kept as an exact integer (a float cannot hold 1.76e18 to the ns)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    v = number(value)
    return int(round(v)) if v is not None else None


def _count(metrics: dict[str, Any], name: str) -> int | None:
    m = metrics.get(name)
    v = number(m.get("value")) if isinstance(m, dict) else None
    return int(v) if v is not None else None


def _records(parsed: ParsedImport, lines: list[Any], workload: str, path: Path) -> None:
    """Rebuild a record per AIPerf line; send = ``request_start_ns`` - the earliest start."""
    if not all(sniff(x) and isinstance(x.get("metadata"), dict) for x in lines):
        raise ImportFormatError(f"{path}: not every line is an AIPerf record (metadata.request_start_ns, metrics); "
                                "pass profile_export.jsonl as AIPerf wrote it")
    starts = [_epoch_ns(x["metadata"].get("request_start_ns")) for x in lines]
    t0 = min((s for s in starts if s is not None), default=0)
    multi_turn = any((x["metadata"].get("turn_index") or 0) > 0 for x in lines)
    for i, (x, start) in enumerate(zip(lines, starts)):
        meta, metrics, err = x["metadata"], x.get("metrics") or {}, x.get("error")
        ttft, gaps = _value_ns(metrics, "time_to_first_token"), _value_ns(metrics, "inter_chunk_latency")
        latency = _value_ns(metrics, "request_latency")
        end = _epoch_ns(meta.get("request_end_ns"))
        send = int(start - t0) if start is not None else None
        t = Timed(send=send, first=int(round(ttft)) if isinstance(ttft, float) else None,
                  gaps=[int(round(g)) for g in gaps] if isinstance(gaps, list) else [],
                  last=int(round(latency)) if isinstance(latency, float) and not gaps else None,
                  end=int(end - start) if end is not None and start is not None else None)
        ok = err is None and not meta.get("was_cancelled")
        message = ""
        cls = None
        if isinstance(err, dict):
            message = f"{err.get('type') or 'error'}: {err.get('message') or ''}".strip()
            cls = f"http_{err['code']}" if isinstance(err.get("code"), int) and 400 <= err["code"] < 600 else None
        if meta.get("was_cancelled"):
            cls, message = "cancelled", message or "cancelled by AIPerf (--request-cancellation-rate)"
        parsed.records.append(make_record(
            i, parsed, workload, t, ok=ok, error=message, error_class=cls,
            output_server=_count(metrics, "usage_completion_tokens"), output_retok=_count(metrics, "output_sequence_length"),
            input_server=_count(metrics, "usage_prompt_tokens"),
            input_retok=_count(metrics, "input_sequence_length") or _count(metrics, "error_isl"),
            phase="warmup" if meta.get("benchmark_phase") == "warmup" else "measured",
            session=str(meta.get("x_correlation_id")) if multi_turn else None,
            turn=int(meta.get("turn_index") or 0) if multi_turn else None))


def _summary(parsed: ParsedImport, summary: dict[str, Any]) -> tuple[dict[str, Any], dict[str, float | None]]:
    """The aggregated export's distributions (ms) and scalars, and its version and settings."""
    def block(name: str) -> dict[str, Any]:
        b = summary.get(name)
        return b if isinstance(b, dict) else {}

    dists: dict[str, Any] = {}
    for ours, theirs in _DISTS.items():
        b = block(theirs)
        scale = _TO_NS.get(str(b.get("unit", "ms")).lower(), 1e6) / 1e6
        d = {k: number(b.get(src)) * scale for k, src in (("mean", "avg"), ("std", "std"), ("p50", "p50"),
             ("p90", "p90"), ("p95", "p95"), ("p99", "p99"), ("max", "max")) if number(b.get(src)) is not None}
        if "p50" in d:
            d["median"] = d["p50"]
        dists[ours] = d or None
    dur = block("benchmark_duration")
    dur_s = number(dur.get("avg"))
    if dur_s is not None:
        dur_s *= _TO_NS.get(str(dur.get("unit", "sec")).lower(), 1e9) / 1e9
    scalars = {"output_throughput": number(block("output_token_throughput").get("avg")),
               "request_throughput": number(block("request_throughput").get("avg")), "duration_s": dur_s,
               "requests_completed": number(block("request_count").get("avg")),
               "requests_failed": number(block("error_request_count").get("avg")) or 0.0,
               "total_output_tokens": number(block("total_output_tokens").get("avg"))}
    parsed.version = str(summary["aiperf_version"]) if summary.get("aiperf_version") else None
    cfg = summary.get("input_config") if isinstance(summary.get("input_config"), dict) else {}
    endpoint = cfg.get("endpoint") if isinstance(cfg.get("endpoint"), dict) else {}
    names = endpoint.get("model_names")
    parsed.model = names[0] if isinstance(names, list) and names else None
    parsed.config = {k: summary[k] for k in ("benchmark_id", "start_time", "end_time", "was_cancelled") if k in summary}
    parsed.config.update({f"endpoint.{k}": endpoint[k] for k in ("type", "url", "streaming") if k in endpoint})
    loadgen = cfg.get("loadgen") if isinstance(cfg.get("loadgen"), dict) else {}
    parsed.config.update({f"loadgen.{k}": loadgen[k] for k in ("concurrency", "request_rate", "request_count")
                          if loadgen.get(k) is not None})
    parsed.offered_rate = number(loadgen.get("request_rate"))
    return dists, scalars


def load(path: Path, entry: int | None, parsed: ParsedImport, workload: str) -> None:
    """Fill ``parsed`` from an AIPerf artifact folder or either of its exports."""
    jsonl, summary_path = companions(path)
    if jsonl is None and summary_path is None:
        raise ImportFormatError(f"{path}: no profile_export.jsonl or profile_export_aiperf.json there; pass AIPerf's "
                                "artifact folder or one of those files")
    if entry not in (None, 1):
        raise ImportFormatError(f"--entry {entry}: an AIPerf export holds one profile run; leave --entry out")
    dists: dict[str, Any] = {}
    scalars: dict[str, float | None] = {}
    if summary_path is not None:
        doc = read_entries(summary_path)
        if len(doc) != 1 or not sniff(doc[0]) or "metadata" in doc[0]:
            raise ImportFormatError(f"{summary_path}: not AIPerf's aggregated export (no aiperf_version or metric "
                                    "blocks with unit and avg)")
        dists, scalars = _summary(parsed, doc[0])
        parsed.tool_summary = flatten_summary(dists, scalars)
    parsed.caveats += CAVEATS
    if jsonl is None:
        parsed.file = summary_path  # type: ignore[assignment]
        parsed.notes.append(f"no profile_export.jsonl beside {summary_path.name}: every number is AIPerf's own")  # type: ignore[union-attr]
        copy_summary(parsed, dists, scalars, COPIED)
        return
    parsed.file = jsonl
    _records(parsed, read_entries(jsonl), workload, jsonl)
    parsed.definitions.update(RECOMPUTED)
    for k in ("request_throughput", "input_throughput", "peak_output_throughput"):
        parsed.definitions[k] = "recomputed over first request start -> last response"
    unavailable(parsed, ("ttft_from_scheduled_ms", "e2el_from_scheduled_ms"), "AIPerf's records carry no schedule time")
    if summary_path is None:
        parsed.notes.append(f"no {jsonl.stem}_aiperf.json beside {jsonl.name}: the AIPerf version and its own "
                            "summary are not recorded")
