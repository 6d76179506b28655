"""What every importer shares: reading a tool's JSON / JSONL file, rebuilding request records
from per-request numbers, and the parsed result every tool module returns.

Times in other tools' files are seconds (vLLM, SGLang, GuideLLM) or milliseconds and epoch
nanoseconds (AIPerf); records hold integer nanoseconds relative to the earliest send of the
file (only differences matter, as for ``perf_counter_ns``). Each conversion rounds to the
nearest nanosecond once per stored time, so a recomputed TTFT of 12.5 ms is exactly 12.5.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Any, Sequence

from results.schema import RequestRecord

NS_PER_S = 1_000_000_000
NS_PER_MS = 1_000_000


class ImportFormatError(ValueError):
    """The file is not what ``--from`` says (unreadable, truncated, another tool's format, missing
    a field the import needs). The message is one line naming the file and the fix."""


@dataclass
class ParsedImport:
    """One tool result read into our terms (the tool modules fill it; ``harness.app.importers.write``
    turns it into a run folder).

    ``records``: rebuilt :class:`RequestRecord` s (empty for a summary-only file);
    ``definitions``: metric (a :class:`results.schema.Metrics` field) → how it is obtained
    ("recomputed", "recomputed: ...", "copied: ...", "unavailable: ..."); ``copied``: metric →
    the tool's value put in place of ours (a number, or a ``Distribution`` dict in ms);
    ``blank``: metrics left empty (nothing to compute them from); ``tool_summary``: the tool's
    own headline numbers keyed like ours (``ttft_ms.p99``); ``caveats``: further differences;
    ``config``: the tool's recorded run settings; ``workload`` / ``shape``: the workload the
    file itself names (SGLang's ``dataset_name`` and lengths), if any; ``offered_rate``: the
    tool's request rate (req/s; None = unlimited); ``notes``: lines for the console."""

    tool: str
    label: str
    engine: str
    file: Path
    version: str | None = None
    entry: int = 1
    entries: int = 1
    records: list[RequestRecord] = field(default_factory=list)
    definitions: dict[str, str] = field(default_factory=dict)
    copied: dict[str, Any] = field(default_factory=dict)
    blank: list[str] = field(default_factory=list)
    tool_summary: dict[str, float] = field(default_factory=dict)
    caveats: list[str] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    workload: str | None = None
    shape: dict[str, Any] = field(default_factory=dict)
    model: str | None = None
    offered_rate: float | None = None
    notes: list[str] = field(default_factory=list)


# ------------------------------------------------------------------------------------------
# reading files


def read_entries(path: Path) -> list[Any]:
    """The JSON values in ``path``: one document, or one per line (JSON Lines; ``vllm bench serve
    --append-result`` and SGLang's ``--output-file`` append one result per line).

    Raises :class:`ImportFormatError` for a missing, unreadable, empty, non-UTF-8 or truncated
    file, naming the line and column where the JSON breaks."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ImportFormatError(f"{path}: no such file; pass the result file the tool wrote") from None
    except IsADirectoryError:
        raise ImportFormatError(f"{path} is a folder: pass the result file itself") from None
    except UnicodeDecodeError as exc:
        raise ImportFormatError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}): not a JSON result "
                                "file") from None
    except OSError as exc:
        raise ImportFormatError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if not text.strip():
        raise ImportFormatError(f"{path} is empty: the tool wrote no result (did the benchmark finish?)")
    try:
        return [json.loads(text)]
    except json.JSONDecodeError as whole:
        lines = [(i, ln) for i, ln in enumerate(text.splitlines(), 1) if ln.strip()]
        if len(lines) < 2:
            raise ImportFormatError(f"{path}: not valid JSON ({whole.msg} at line {whole.lineno} column {whole.colno}; "
                                    "truncated?): pass the complete file the tool wrote") from None
    out = []
    for i, line in lines:
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise ImportFormatError(f"{path}: line {i} is not valid JSON ({exc.msg} at column {exc.colno}; "
                                    "truncated?): pass the complete file the tool wrote") from None
    return out


def pick_entry(entries: Sequence[Any], entry: int | None, path: Path, what: str, parsed_notes: list[str]) -> tuple[Any, int]:
    """The ``entry``-th (1-based) of ``entries``, by default the last (the newest of an appended
    file), noting which one was taken when there are several. Raises :class:`ImportFormatError`
    for an index out of range."""
    n = len(entries)
    if entry is None:
        if n > 1:
            parsed_notes.append(f"{path.name} holds {n} {what}s; imported the last one (--entry {n}); --entry 1..{n} "
                                "picks another")
        return entries[-1], n
    if not 1 <= entry <= n:
        raise ImportFormatError(f"--entry {entry}: {path.name} holds {n} {what}{'s' if n != 1 else ''}; pass 1..{n}")
    return entries[entry - 1], entry


def number(value: Any) -> float | None:
    """A finite float from a JSON value (int, float, numeric string such as vLLM's "inf"), else None."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def rate(value: Any) -> float | None:
    """A request rate (req/s) from a tool's file: None for unlimited ("inf", inf, None)."""
    return number(value)


# ------------------------------------------------------------------------------------------
# records


_HTTP_CODE = re.compile(r"^\s*([45]\d\d)\b|\b(?:http|status|code)[\s:=_]*([45]\d\d)\b|error:?\s+([45]\d\d)\b",
                        re.IGNORECASE)


def classify_error(message: str) -> str:
    """Our error class for a tool's error text: ``http_<code>`` when it names an HTTP status (a
    leading code, "HTTP 503", "status: 429", aiohttp's "ClientResponseError: 500, ...", or a reason phrase such as "Internal Server Error"
    at its start, as vLLM and SGLang store ``response.reason``), ``timeout``, ``connection``,
    else ``tool_error``."""
    text = message.strip()
    low = text.lower()
    if m := _HTTP_CODE.search(text):
        return f"http_{m.group(1) or m.group(2) or m.group(3)}"
    for status in HTTPStatus:
        if status.value >= 400 and low.startswith(status.phrase.lower()):
            return f"http_{status.value}"
    if "timeout" in low or "timed out" in low:
        return "timeout"
    if "connect" in low or "refused" in low:
        return "connection"
    return "tool_error"


def error_line(message: str, limit: int = 300) -> str:
    """The line of a tool's error text that says what went wrong (a traceback's last line)."""
    lines = [ln.strip() for ln in message.strip().splitlines() if ln.strip()]
    return (lines[-1] if lines else "")[:limit]


def s_to_ns(seconds: float) -> int:
    """Seconds → integer nanoseconds (rounded)."""
    return int(round(seconds * NS_PER_S))


def ms_to_ns(ms: float) -> int:
    """Milliseconds → integer nanoseconds (rounded)."""
    return int(round(ms * NS_PER_MS))


@dataclass
class Timed:
    """One request as another tool saw it, in nanoseconds relative to the file's first send:
    ``send`` (the tool's request start), ``scheduled`` (when its arrival process wanted it sent;
    None = not recorded), ``first`` (first token chunk), ``gaps`` (every later chunk's gap to the
    previous one), ``last`` (last token chunk when the tool recorded it apart; else the end of
    the gaps), ``end`` (the stream's end, when recorded)."""

    send: int | None
    first: int | None = None
    gaps: list[int] = field(default_factory=list)
    last: int | None = None
    end: int | None = None
    scheduled: int | None = None


def make_record(i: int, parsed: ParsedImport, workload: str, t: Timed, *, ok: bool, error: str = "",
                output_server: int | None = None, output_retok: int | None = None, input_server: int | None = None,
                input_retok: int | None = None, text: str | None = None, phase: str = "measured",
                error_class: str | None = None, session: str | None = None, turn: int | None = None) -> RequestRecord:
    """One :class:`RequestRecord` from a tool's request: ``first_token_ns = send + ttft``, each
    later chunk at the previous one plus its gap, ``last_token_ns`` the last chunk (or ``t.last``),
    ``end_ns`` the stream end when recorded, else the last token (the tool did not record it).
    A failed request keeps its send (for the failure counts and the duration) and its error."""
    chunks: list[int] = []
    if ok and t.send is not None and t.first is not None:
        chunks = [t.send + t.first]
        for g in t.gaps:
            chunks.append(chunks[-1] + g)
    last = (t.send + t.last) if ok and t.send is not None and t.last is not None else (chunks[-1] if chunks else None)
    end = (t.send + t.end) if t.send is not None and t.end is not None else last
    send = t.send
    return RequestRecord(
        request_id=str(i), engine=parsed.engine, workload=workload, phase=phase, session_id=session, turn_id=turn,
        scheduled_ns=(send if t.scheduled is None else t.scheduled) if send is not None else 0,
        send_ns=send, first_token_ns=chunks[0] if chunks else None, last_token_ns=last, end_ns=end,
        chunk_times_ns=chunks if len(chunks) > 1 or t.last is None else [],
        input_tokens_server=input_server, input_tokens_retok=input_retok,
        output_tokens_server=output_server if ok else None, output_tokens_retok=output_retok if ok else None,
        output_text_len=len(text or ""), success=ok,
        error_class=None if ok else (error_class or (classify_error(error) if error else "no_token")),
        error_message=None if ok else (error_line(error) or "the tool recorded no token and no error"),
        imported_from=parsed.label,
    )


def distribution_from(summary: dict[str, Any], keys: dict[str, str], scale: float = 1.0) -> dict[str, float] | None:
    """A :class:`results.schema.Distribution` dict from a tool's summary: ``keys`` maps our
    statistic (``mean``, ``p99``, ...) to the tool's key; values times ``scale`` (to ms). None
    when the summary has none of them."""
    out = {}
    for ours, theirs in keys.items():
        v = number(summary.get(theirs))
        if v is not None:
            out[ours] = v * scale
    if "median" in out and "p50" not in out:
        out["p50"] = out["median"]
    return out or None


def flatten_summary(dists: dict[str, dict[str, float] | None], scalars: dict[str, float | None]) -> dict[str, float]:
    """``tool_summary`` entries: ``ttft_ms.p99`` etc. from distributions, plus scalar metrics."""
    out: dict[str, float] = {}
    for metric, dist in dists.items():
        for stat, v in (dist or {}).items():
            out[f"{metric}.{stat}"] = v
    out.update({k: v for k, v in scalars.items() if v is not None})
    return out


# ------------------------------------------------------------------------------------------
# copied and unavailable metrics


def copy_scalars(parsed: ParsedImport, scalars: dict[str, float | None], copied: dict[str, str],
                 keys: tuple[str, ...]) -> None:
    """Put the tool's value of each metric in ``keys`` in place of ours, marked with ``copied``'s text
    (a metric the tool did not report is marked unavailable)."""
    for k in keys:
        if scalars.get(k) is not None:
            parsed.copied[k] = scalars[k]
            parsed.definitions[k] = copied.get(k, f"copied: {parsed.label}'s {k}")
        else:
            unavailable(parsed, (k,), f"{parsed.label} did not report it")


def copy_summary(parsed: ParsedImport, dists: dict[str, dict[str, float] | None], scalars: dict[str, float | None],
                 copied: dict[str, str]) -> None:
    """A summary-only file: every metric is the tool's own (distributions and rates), counts too."""
    for metric, dist in dists.items():
        if dist:
            parsed.copied[metric] = dist
            parsed.definitions[metric] = copied.get(metric, f"copied: {parsed.label}'s {metric}")
        else:
            unavailable(parsed, (metric,), f"{parsed.label} did not report it")
    copy_scalars(parsed, scalars, copied, ("output_throughput", "request_throughput", "input_throughput", "duration_s",
                                           "peak_output_throughput"))
    for k in ("requests_completed", "requests_failed", "total_output_tokens", "total_input_tokens"):
        if scalars.get(k) is not None:
            parsed.copied[k] = int(scalars[k])  # type: ignore[arg-type]
    parsed.copied["requests_sent"] = int(scalars.get("requests_completed") or 0) + int(scalars.get("requests_failed") or 0)
    unavailable(parsed, ("ttft_from_scheduled_ms", "e2el_from_scheduled_ms"), "no per-request data in the file")


def unavailable(parsed: ParsedImport, metrics: tuple[str, ...], why: str) -> None:
    """Leave ``metrics`` empty, saying why."""
    for m in metrics:
        parsed.blank.append(m)
        parsed.definitions[m] = f"unavailable: {why}"
