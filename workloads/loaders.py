"""Readers for the real data files in ``workloads/data/`` (each folder has a SOURCE.md).

Every reader validates as it goes and raises :class:`WorkloadError` naming the file, the
line number (1-based, as an editor shows it) and the fix for the first malformed entry.
Readers return plain immutable rows; they never tokenize, scale or sample (the generators do).
``.gz`` files are decompressed transparently.
"""

from __future__ import annotations

import ast
import csv
import gzip
import io
import json
import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from workloads.errors import WorkloadError

DATA_DIR = Path(__file__).resolve().parent / "data"
MOONCAKE_BLOCK_SIZE = 512  # tokens per hash block in the Mooncake FAST'25 traces (their README)


def data_path(*parts: str) -> Path:
    """Path of a shipped data file (``workloads/data/<parts...>``)."""
    return DATA_DIR.joinpath(*parts)


def _open_text(path: Path) -> io.TextIOBase:
    path = Path(path)
    if not path.is_file():
        raise WorkloadError(f"data file {path} does not exist: check the path (shipped data lives in {DATA_DIR})")
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return open(path, encoding="utf-8", newline="")


def _bad(path: Path, line: int, what: str) -> WorkloadError:
    return WorkloadError(f"{path}:{line}: {what}")


def _int_field(path: Path, line: int, name: str, value: Any, minimum: int = 0, strict: bool = False) -> int:
    """``value`` as an int >= minimum (CSV text allowed unless ``strict``: JSON needs a number)."""
    if isinstance(value, bool) or (strict and not isinstance(value, (int, float))):
        raise _bad(path, line, f"{name} must be an integer >= {minimum}, got {value!r}: fix or delete the line")
    try:
        v = int(value)
        if isinstance(value, float) and v != value:
            raise ValueError
        if isinstance(value, str) and value.strip() != str(v):
            raise ValueError
    except (TypeError, ValueError):
        raise _bad(path, line, f"{name} must be an integer >= {minimum}, got {value!r}: fix or delete the line") from None
    if v < minimum:
        raise _bad(path, line, f"{name} must be an integer >= {minimum}, got {v}: fix or delete the line")
    return v


# --- Azure LLM inference trace 2023 ----------------------------------------------------------
@dataclass(frozen=True)
class TraceRow:
    """One recorded request: arrival (seconds since the trace's first request), token counts."""

    timestamp_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()


AZURE_HEADER = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]


def _parse_azure_time(text: str) -> datetime:
    # 7 fractional digits: Python parses at most 6, so cut the 7th (100 ns resolution).
    t = text.strip()
    if "." in t:
        head, frac = t.split(".", 1)
        t = f"{head}.{frac[:6]}"
    return datetime.fromisoformat(t)


def load_azure_trace(path: Path, limit: int | None = None) -> list[TraceRow]:
    """Rows of an Azure 2023 trace CSV (``TIMESTAMP,ContextTokens,GeneratedTokens``).

    Timestamps become seconds since the first row. ``limit``: stop after that many rows.
    Raises :class:`WorkloadError` naming the line for a wrong header, a wrong column count,
    an unparsable timestamp, a non-integer or negative count, or time going backwards.
    """
    path = Path(path)
    rows: list[TraceRow] = []
    with _open_text(path) as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None or [h.strip() for h in header] != AZURE_HEADER:
            raise _bad(path, 1, f"expected the header {','.join(AZURE_HEADER)}, got {header!r}: not an Azure LLM trace CSV")
        t0: datetime | None = None
        prev = -math.inf
        for rec in reader:
            line = reader.line_num
            if not rec or all(not c.strip() for c in rec):
                continue
            if len(rec) != 3:
                raise _bad(path, line, f"expected 3 comma-separated columns, got {len(rec)}: fix or delete the line")
            try:
                ts = _parse_azure_time(rec[0])
            except ValueError:
                raise _bad(path, line, f"TIMESTAMP {rec[0]!r} is not 'YYYY-MM-DD HH:MM:SS.fffffff': fix the line") from None
            if t0 is None:
                t0 = ts
            rel = (ts - t0).total_seconds()
            if rel < prev:
                raise _bad(path, line, f"TIMESTAMP {rec[0]} is earlier than the previous row: sort the trace by time")
            prev = rel
            rows.append(
                TraceRow(
                    rel,
                    _int_field(path, line, "ContextTokens", rec[1], 1),
                    _int_field(path, line, "GeneratedTokens", rec[2], 1),
                )
            )
            if limit is not None and len(rows) >= limit:
                break
    if not rows:
        raise WorkloadError(f"{path}: the trace has no requests: pass a non-empty trace file")
    return rows


# --- Mooncake FAST'25 --------------------------------------------------------------------------
def load_mooncake_trace(path: Path, limit: int | None = None, block_size: int = MOONCAKE_BLOCK_SIZE) -> list[TraceRow]:
    """Rows of a Mooncake JSONL trace (``timestamp`` ms, ``input_length``, ``output_length``, ``hash_ids``).

    Checks per line: valid JSON object, the four fields with the right types, timestamps
    non-decreasing, and ``len(hash_ids) == ceil(input_length / block_size)`` (the trace's
    invariant; one hash per 512-token prefix block). Raises :class:`WorkloadError` naming the line.
    """
    path = Path(path)
    rows: list[TraceRow] = []
    prev = -math.inf
    with _open_text(path) as f:
        for line, text in enumerate(f, start=1):
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as exc:
                raise _bad(path, line, f"not valid JSON ({exc.msg} at column {exc.colno}): fix or delete the line") from None
            if not isinstance(obj, dict):
                raise _bad(path, line, "expected a JSON object per line: not a Mooncake trace")
            missing = [k for k in ("timestamp", "input_length", "output_length", "hash_ids") if k not in obj]
            if missing:
                raise _bad(path, line, f"missing field(s) {', '.join(missing)}: each line needs timestamp, input_length, output_length, hash_ids")
            ts = obj["timestamp"]
            if isinstance(ts, bool) or not isinstance(ts, (int, float)) or ts < 0:
                raise _bad(path, line, f"timestamp must be a number of milliseconds >= 0, got {ts!r}")
            if ts < prev:
                raise _bad(path, line, f"timestamp {ts} is earlier than the previous line's {prev}: sort the trace by time")
            prev = ts
            n_in = _int_field(path, line, "input_length", obj["input_length"], 1, strict=True)
            n_out = _int_field(path, line, "output_length", obj["output_length"], 1, strict=True)
            hashes = obj["hash_ids"]
            if not isinstance(hashes, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in hashes):
                raise _bad(path, line, "hash_ids must be a list of integers")
            want = math.ceil(n_in / block_size)
            if len(hashes) != want:
                raise _bad(
                    path, line,
                    f"hash_ids has {len(hashes)} entries but input_length {n_in} needs ceil({n_in}/{block_size}) = {want}: "
                    "fix the line (or pass the trace's block size)",
                )
            rows.append(TraceRow(ts / 1000.0, n_in, n_out, tuple(hashes)))
            if limit is not None and len(rows) >= limit:
                break
    if not rows:
        raise WorkloadError(f"{path}: the trace has no requests: pass a non-empty trace file")
    t0 = rows[0].timestamp_s
    return [TraceRow(r.timestamp_s - t0, r.input_tokens, r.output_tokens, r.hash_ids) for r in rows]


# --- ServeGen ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RateWindow:
    """One ServeGen window: start (s), mean rate (requests/s), CV of inter-arrival gaps, fitted law."""

    start_s: float
    rate_rps: float
    cv: float
    pattern: str


def load_servegen_windows(path: Path) -> list[RateWindow]:
    """Rows of a ServeGen ``chunk-*-trace.csv`` (no header: start, rate, cv, pattern, shape, scale).

    Raises :class:`WorkloadError` naming the line for a wrong column count, non-numeric or
    negative rate/CV, or an unknown pattern (``Gamma``, ``Weibull`` or empty when idle).
    """
    path = Path(path)
    out: list[RateWindow] = []
    with _open_text(path) as f:
        reader = csv.reader(f)
        for rec in reader:
            line = reader.line_num
            if not rec:
                continue
            if len(rec) != 6:
                raise _bad(path, line, f"expected 6 columns (window_start_s,rate_rps,cv,pattern,shape,scale), got {len(rec)}")
            try:
                start, rate = float(rec[0]), float(rec[1] or 0)
                cv = float(rec[2] or 0)
            except ValueError:
                raise _bad(path, line, f"window_start_s, rate_rps and cv must be numbers, got {rec[:3]!r}") from None
            if rate < 0 or cv < 0 or not math.isfinite(rate) or not math.isfinite(cv):
                raise _bad(path, line, f"rate_rps and cv must be finite and >= 0, got rate={rate}, cv={cv}")
            if rec[3] not in ("Gamma", "Weibull", ""):
                raise _bad(path, line, f"pattern must be Gamma, Weibull or empty, got {rec[3]!r}")
            out.append(RateWindow(start, rate, cv, rec[3]))
    if not out:
        raise WorkloadError(f"{path}: no rate windows: pass a ServeGen chunk-*-trace.csv")
    return out


def load_servegen_pmf(path: Path, field: str, window: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """A length PMF from a ServeGen ``chunk-*-dataset.json``: ``(values, probabilities)``.

    ``window``: the 6-hour window key (default: the first). The PMF strings are Python dict
    literals, parsed with ``ast.literal_eval`` (never ``eval``). Probabilities are
    renormalised to sum to 1. Raises :class:`WorkloadError` for a missing window/field or a
    malformed PMF.
    """
    path = Path(path)
    with _open_text(path) as f:
        try:
            data = json.load(f)
        except json.JSONDecodeError as exc:
            raise _bad(path, exc.lineno, f"not valid JSON ({exc.msg}): not a ServeGen dataset file") from None
    if not isinstance(data, dict) or not data:
        raise WorkloadError(f"{path}: expected a JSON object of windows: not a ServeGen dataset file")
    key = window if window is not None else next(iter(data))
    if key not in data or field not in data[key]:
        raise WorkloadError(f"{path}: window {key!r} has no field {field!r}: available fields {sorted(data.get(key, {}))}")
    try:
        pmf = ast.literal_eval(data[key][field])
        values = np.array([int(v) for v in pmf.keys()], dtype=np.int64)
        probs = np.array([float(p) for p in pmf.values()], dtype=np.float64)
    except (ValueError, SyntaxError, AttributeError, TypeError):
        raise WorkloadError(f"{path}: window {key!r} field {field!r} is not a {{value: probability}} dict literal") from None
    if len(values) == 0 or (probs < 0).any() or probs.sum() <= 0:
        raise WorkloadError(f"{path}: window {key!r} field {field!r} has no positive probabilities")
    return values, probs / probs.sum()


# --- length statistics (ShareGPT/Sarathi, arXiv/Vidur) ------------------------------------------
def load_length_pairs(path: Path) -> np.ndarray:
    """``[n, 2]`` int array of (prefill tokens, decode tokens) from a Vidur/Sarathi stats CSV.

    Needs the columns ``num_prefill_tokens`` and ``num_decode_tokens``. Raises
    :class:`WorkloadError` naming the line for a missing column or a non-integer value.
    """
    path = Path(path)
    pairs: list[tuple[int, int]] = []
    with _open_text(path) as f:
        reader = csv.DictReader(f)
        cols = reader.fieldnames or []
        for need in ("num_prefill_tokens", "num_decode_tokens"):
            if need not in cols:
                raise _bad(path, 1, f"missing column {need!r} (have {cols}): not a Vidur/Sarathi length-stats CSV")
        for rec in reader:
            line = reader.line_num
            pairs.append(
                (
                    _int_field(path, line, "num_prefill_tokens", rec["num_prefill_tokens"], 1),
                    _int_field(path, line, "num_decode_tokens", rec["num_decode_tokens"], 1),
                )
            )
    if not pairs:
        raise WorkloadError(f"{path}: no rows: pass a non-empty length-stats CSV")
    return np.asarray(pairs, dtype=np.int64)


def load_sharegpt_prompts(path: Path) -> list[str]:
    """First-turn user prompts from a ShareGPT JSON array (``conversations[0].value``).

    Raises :class:`WorkloadError` (with the JSON line for a syntax error, the entry index
    otherwise) for anything that is not ``[{"conversations": [{"from": "human", "value": str}]}]``.
    """
    path = Path(path)
    with _open_text(path) as f:
        try:
            data = json.load(f)
        except json.JSONDecodeError as exc:
            raise _bad(path, exc.lineno, f"not valid JSON ({exc.msg}): fix the file") from None
    if not isinstance(data, list):
        raise WorkloadError(f"{path}: expected a JSON array of conversations: not a ShareGPT file")
    prompts = []
    for i, entry in enumerate(data):
        try:
            turn = entry["conversations"][0]
            text = turn["value"]
        except (KeyError, IndexError, TypeError):
            raise WorkloadError(f"{path}: entry {i} has no conversations[0].value: not a ShareGPT file") from None
        if not isinstance(text, str):
            raise WorkloadError(f"{path}: entry {i}: conversations[0].value must be a string")
        if text.strip():
            prompts.append(text)
    if not prompts:
        raise WorkloadError(f"{path}: no non-empty prompts")
    return prompts


def load_longbench_stats(path: Path | None = None) -> list[dict[str, Any]]:
    """Rows of ``longbench_v1_task_stats.csv`` (task, dataset_key, task_type, avg_len, avg_len_unit, max_new_tokens...)."""
    path = Path(path or data_path("longbench_v1_stats", "longbench_v1_task_stats.csv"))
    with _open_text(path) as f:
        reader = csv.DictReader(f)
        rows = []
        for rec in reader:
            line = reader.line_num
            rec["avg_len"] = _int_field(path, line, "avg_len", rec.get("avg_len"), 1)
            rec["max_new_tokens"] = _int_field(path, line, "max_new_tokens", rec.get("max_new_tokens"), 1)
            rows.append(rec)
    return rows


# --- SWE-agent trajectories ----------------------------------------------------------------------
@dataclass(frozen=True)
class TrajMessage:
    """One message of a trajectory's history: role (system/user/assistant/tool), text, demo flag."""

    role: str
    content: str
    is_demo: bool = False


@dataclass(frozen=True)
class Trajectory:
    """A SWE-agent session: history messages in order and per-step tool execution times (s).

    ``execution_times_s[k]`` is the recorded tool time after the k-th assistant action, or
    None when the file has none (demonstrations replayed without timing).
    """

    name: str
    messages: tuple[TrajMessage, ...]
    execution_times_s: tuple[float | None, ...]


def _message_text(m: dict[str, Any]) -> str:
    content = m.get("content", "")
    if isinstance(content, list):  # OpenAI content parts
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    if not isinstance(content, str):
        content = json.dumps(content)
    action = m.get("action")
    if m.get("role") == "assistant" and isinstance(action, str) and action.strip() and action.strip() not in content:
        content = f"{content}\n\n```\n{action.strip()}\n```"
    return content


def load_trajectory(path: Path) -> Trajectory:
    """A SWE-agent ``.traj`` (or ``.traj.gz``) file.

    Uses ``history`` (role, content, optional ``action`` appended to assistant text when the
    content lacks it, ``is_demo``) and ``trajectory[k].execution_time``. Raises
    :class:`WorkloadError` for invalid JSON (with its line) or a missing/empty history.
    """
    path = Path(path)
    with _open_text(path) as f:
        try:
            data = json.load(f)
        except json.JSONDecodeError as exc:
            raise _bad(path, exc.lineno, f"not valid JSON ({exc.msg}): not a SWE-agent trajectory") from None
    hist = data.get("history") if isinstance(data, dict) else None
    if not isinstance(hist, list) or not hist:
        raise WorkloadError(f"{path}: no 'history' list: not a SWE-agent trajectory")
    msgs = []
    for i, m in enumerate(hist):
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant", "tool"):
            raise WorkloadError(f"{path}: history[{i}] has no valid role (system/user/assistant/tool)")
        msgs.append(TrajMessage(m["role"], _message_text(m), bool(m.get("is_demo", False))))
    times: list[float | None] = []
    for step in data.get("trajectory", []) or []:
        t = step.get("execution_time") if isinstance(step, dict) else None
        try:
            times.append(float(t) if t is not None else None)
        except (TypeError, ValueError):
            times.append(None)
    name = path.name.removesuffix(".gz").removesuffix(".traj")
    return Trajectory(name, tuple(msgs), tuple(times))


def list_trajectory_files(folder: Path | None = None) -> list[Path]:
    """The shipped SWE-agent trajectory files, sorted by path (stable order for seeding)."""
    folder = Path(folder or data_path("swe_agent_trajectories"))
    files = sorted(p for p in folder.rglob("*") if p.name.endswith((".traj", ".traj.gz")))
    if not files:
        raise WorkloadError(f"no .traj files under {folder}: the shipped data is missing; reinstall the package")
    return files
