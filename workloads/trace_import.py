"""Importers: the agent traces people have, read into the open format (:mod:`workloads.agent_trace`).

``--trace FILE --trace-format F`` (``auto``: :func:`detect_format`):

- ``agent``: the open format itself;
- ``swe-agent``: SWE-agent ``.traj`` trajectories (a file, a folder of them, or ``swe-agent``:
  the 22 shipped ones): the history before the first model action is turn 0's messages, each
  later turn appends the tool observation, ``tool_s`` = ``trajectory[k].execution_time``;
- ``mooncake``: Mooncake FAST'25 JSONL (``timestamp`` ms, ``input_length``, ``output_length``,
  ``hash_ids``): every row is one turn; rows are chained into sessions where a row's
  ``hash_ids`` extend all the full blocks of an earlier row's (its last block may be partial)
  (at least two of them: a first block alone is often a system prompt every session shares)
  and its input holds that row's input and output (``input_length >= prev input + prev
  output``): the longest such earlier row, once. Tool time = the gap between the two rows'
  timestamps (it includes the recorded model time: the trace has no completion times);
- ``otel``: an OpenTelemetry OTLP JSON export (one ``{"resourceSpans": ...}`` per line, as
  the collector's file exporter writes), GenAI semantic conventions: spans whose
  ``gen_ai.operation.name`` is ``chat``, ``text_completion`` or ``generate_content`` are
  turns (``gen_ai.usage.input_tokens`` / ``output_tokens``; ``gen_ai.input.messages`` /
  ``gen_ai.output.messages`` when recorded), grouped into one agent per nearest
  ``invoke_agent`` ancestor span (else per ``gen_ai.conversation.id``, else per trace); an
  ``invoke_agent`` span under another agent's span is a sub-agent of it; tool time is the
  gap between an agent's LLM spans (``start`` − the previous ``end``);
- ``chat-log``: a chat-completions request log, one request per line:
  ``{"conversation_id", "timestamp" (s), "duration_s"?, "parent_conversation_id"?,
  "request": {"messages": [...]}, "response": {"choices": [{"message": {"content"}}],
  "usage": {"prompt_tokens", "completion_tokens"}}}``.

Each request's messages after its last assistant message are what the turn appends (an agent
loop sends history + its last reply + the tool results). Every importer raises
:class:`~workloads.errors.WorkloadError` naming ``file:line`` for the first bad line.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from workloads.agent_trace import AgentTrace, TraceMessage, TraceSession, TraceTurn, _lines, load_agent_trace
from workloads.errors import WorkloadError
from workloads.loaders import list_trajectory_files, load_mooncake_trace, load_trajectory

FORMATS = ("auto", "agent", "swe-agent", "mooncake", "otel", "chat-log")
SHIPPED_SWE_AGENT = "swe-agent"
LLM_OPERATIONS = ("chat", "text_completion", "generate_content")


def detect_format(path: Path) -> str:
    """The importer for ``path``: a ``.traj`` file or a folder → ``swe-agent``; else by the
    first non-blank line's keys (``resourceSpans`` → otel, ``hash_ids`` + ``input_length`` →
    mooncake, ``conversation_id`` → chat-log, else agent)."""
    if path.is_dir() or path.name.endswith((".traj", ".traj.gz")):
        return "swe-agent"
    for _, obj in _lines(path):
        if "resourceSpans" in obj:
            return "otel"
        if "hash_ids" in obj and "input_length" in obj:
            return "mooncake"
        if "conversation_id" in obj:
            return "chat-log"
        return "agent"
    raise WorkloadError(f"{path}: the trace is empty: pass a non-empty trace file")


def import_trace(trace: str, fmt: str = "auto") -> AgentTrace:
    """``trace`` (a file, a folder of ``.traj`` files, or ``swe-agent``: the shipped set) read
    by the importer ``fmt`` (``auto``: detected). Raises :class:`WorkloadError` (one line)."""
    if fmt not in FORMATS:
        raise WorkloadError(f"unknown --trace-format {fmt!r}: choose from {', '.join(FORMATS)}")
    if trace == SHIPPED_SWE_AGENT:
        return import_swe_agent(None)
    path = Path(trace).expanduser()
    if not path.exists():
        raise WorkloadError(f"trace file {path} does not exist: check the path")
    return _import(path.resolve(), fmt, path.stat().st_mtime_ns)


@functools.lru_cache(maxsize=4)
def _import(path: Path, fmt: str, mtime_ns: int) -> AgentTrace:
    """One import per file version (a ladder builds its workload at every point)."""
    fmt = detect_format(path) if fmt == "auto" else fmt
    reader = {"agent": load_agent_trace, "swe-agent": import_swe_agent, "mooncake": import_mooncake,
              "otel": import_otel, "chat-log": import_chat_log}[fmt]
    out = reader(path)
    return out.model_copy(update={"source": f"{path} ({fmt})"})


def new_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What a request appends to its conversation: the messages after its last assistant
    message (all of them when there is none)."""
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
    return messages[last + 1:]


def _message(m: Any) -> TraceMessage:
    """A chat message as a :class:`TraceMessage` (content: text, OpenAI content parts, or the
    GenAI conventions' ``parts``); a tool result is kept as role ``tool``."""
    if not isinstance(m, dict):
        raise ValueError(f"a message must be an object, got {m!r}")
    content = m.get("content")
    if content is None and isinstance(m.get("parts"), list):
        content = m["parts"]
    if isinstance(content, list):
        content = "".join(str(p.get("content", p.get("text", p.get("response", "")))) for p in content if isinstance(p, dict))
    return TraceMessage(role=m.get("role", "user"), content=content if isinstance(content, str) else json.dumps(content))


# --- SWE-agent ---------------------------------------------------------------------------------
def import_swe_agent(path: Path | None) -> AgentTrace:
    """SWE-agent trajectories: ``path`` a ``.traj`` file or a folder of them (None: the shipped set)."""
    from workloads.agentic import _parse

    files = [path] if path is not None and path.is_file() else list_trajectory_files(path)
    sessions = []
    for f in files:
        p = _parse(load_trajectory(f))
        turns = [TraceTurn(messages=[TraceMessage(role="user" if r == "tool" else r, content=c) for r, c in p.initial],
                           reply=p.replies[0])]
        for k in range(1, len(p.replies)):
            t = p.exec_times[k - 1] if k - 1 < len(p.exec_times) else None
            turns.append(TraceTurn(messages=[TraceMessage(role="user", content=p.observations[k - 1])],
                                   reply=p.replies[k], tool_s=None if t is None or t < 0 else t))
        sessions.append(TraceSession(session_id=p.name, turns=turns))
    return AgentTrace(sessions=sessions, source=str(path or "swe-agent (shipped)"))


# --- Mooncake ----------------------------------------------------------------------------------
def import_mooncake(path: Path) -> AgentTrace:
    """Mooncake rows chained into sessions (module docstring)."""
    rows = load_mooncake_trace(path)
    sessions: list[list[Any]] = []
    tails: dict[tuple[int, ...], int] = {}  # full blocks of a session's last row -> session
    for r in rows:
        h, found = r.hash_ids, None
        for n in range(len(h) - 1, 1, -1):  # at least 2 full blocks: block 0 alone is a shared system prompt
            k = tails.get(tuple(h[:n]))
            if k is not None and r.input_tokens >= sessions[k][-1].input_tokens + sessions[k][-1].output_tokens:
                found = k
                break
        if found is None:
            found = len(sessions)
            sessions.append([])
        else:
            tails.pop(tuple(sessions[found][-1].hash_ids[:-1]), None)
        sessions[found].append(r)
        if len(h) >= 2:
            tails[tuple(h[:-1])] = found
    out = [TraceSession(session_id=f"mooncake-{i:05d}", start_s=rs[0].timestamp_s,
                        turns=[TraceTurn(input_tokens=r.input_tokens, output_tokens=r.output_tokens, hash_ids=list(r.hash_ids),
                                         timestamp_s=r.timestamp_s) for r in rs])
           for i, rs in enumerate(sessions)]
    return AgentTrace(sessions=out, source=str(path))


# --- OpenTelemetry GenAI -----------------------------------------------------------------------
def _attr_value(v: dict[str, Any]) -> Any:
    for key in ("stringValue", "boolValue", "doubleValue"):
        if key in v:
            return v[key]
    if "intValue" in v:
        return int(v["intValue"])
    if "arrayValue" in v:
        return [_attr_value(x) for x in v["arrayValue"].get("values", [])]
    return None


def _span(path: Path, line: int, s: Any) -> dict[str, Any]:
    """One OTLP span as ``{id, parent, trace, op, attrs, start, end, line}`` (times in s)."""
    if not isinstance(s, dict) or not s.get("spanId") or "startTimeUnixNano" not in s:
        raise WorkloadError(f"{path}:{line}: a span without spanId or startTimeUnixNano: not an OTLP JSON trace export")
    try:
        attrs = {a["key"]: _attr_value(a.get("value", {})) for a in s.get("attributes", [])}
        start = int(s["startTimeUnixNano"]) / 1e9
        end = int(s.get("endTimeUnixNano", s["startTimeUnixNano"])) / 1e9
    except (KeyError, TypeError, ValueError, AttributeError):
        raise WorkloadError(f"{path}:{line}: span {s.get('spanId')!r}: bad attributes or times (OTLP JSON: "
                            "attributes [{key, value: {stringValue|intValue}}], times in ns as strings)") from None
    return {"id": s["spanId"], "parent": s.get("parentSpanId") or None, "trace": s.get("traceId", ""),
            "op": attrs.get("gen_ai.operation.name"), "attrs": attrs, "start": start, "end": end, "line": line}


def _otel_spans(path: Path) -> list[dict[str, Any]]:
    spans = []
    for line, obj in _lines(path):
        if not isinstance(obj.get("resourceSpans"), list):
            raise WorkloadError(f"{path}:{line}: no resourceSpans list: not an OTLP JSON trace export")
        for rs in obj["resourceSpans"]:
            for ss in (rs.get("scopeSpans") or []) if isinstance(rs, dict) else []:
                spans.extend(_span(path, line, s) for s in (ss.get("spans") or []))
    return spans


def _otel_turn(path: Path, sp: dict[str, Any]) -> TraceTurn:
    a = sp["attrs"]
    try:
        msgs = json.loads(a["gen_ai.input.messages"]) if isinstance(a.get("gen_ai.input.messages"), str) else None
        outs = json.loads(a["gen_ai.output.messages"]) if isinstance(a.get("gen_ai.output.messages"), str) else None
        reply = "".join(_message(m).content for m in outs) if outs else None
        return TraceTurn(messages=[_message(m) for m in new_messages(msgs)] if msgs is not None else None,
                         input_tokens=a.get("gen_ai.usage.input_tokens"), output_tokens=a.get("gen_ai.usage.output_tokens"),
                         reply=reply, timestamp_s=sp["start"], end_s=sp["end"])
    except (ValueError, ValidationError, TypeError) as exc:
        why = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
        raise WorkloadError(f"{path}:{sp['line']}: LLM span {sp['id']!r}: {why} (needs gen_ai.usage.output_tokens "
                            "or gen_ai.output.messages)") from None


def import_otel(path: Path) -> AgentTrace:
    """OTLP JSON GenAI spans → agents and sub-agents (module docstring)."""
    spans = _otel_spans(path)
    by_id = {s["id"]: s for s in spans}

    def agent_of(sp: dict[str, Any]) -> str | None:  # nearest invoke_agent ancestor's span id
        seen, p = set(), sp["parent"]
        while p is not None and p in by_id and p not in seen:
            seen.add(p)
            if by_id[p]["op"] == "invoke_agent":
                return p
            p = by_id[p]["parent"]
        return None

    groups: dict[str, list[dict[str, Any]]] = {}
    for sp in spans:
        if sp["op"] in LLM_OPERATIONS:
            key = agent_of(sp) or str(sp["attrs"].get("gen_ai.conversation.id") or sp["trace"])
            groups.setdefault(key, []).append(sp)
    if not groups:
        raise WorkloadError(f"{path}: no GenAI LLM spans (gen_ai.operation.name chat, text_completion or generate_content)")
    t0 = min(s["start"] for s in spans)
    sessions = []
    for key, llm in groups.items():
        llm.sort(key=lambda s: s["start"])
        parent = agent_of(by_id[key]) if key in by_id else None
        turns = [_otel_turn(path, {**sp, "start": sp["start"] - t0, "end": sp["end"] - t0}) for sp in llm]
        sessions.append(TraceSession(session_id=key, parent_id=parent if parent in groups else None,
                                     start_s=turns[0].timestamp_s, turns=turns))
    sessions.sort(key=lambda s: s.start_s or 0.0)
    return AgentTrace(sessions=sessions, source=str(path))


# --- chat-completions request log --------------------------------------------------------------
def _log_turn(path: Path, line: int, obj: dict[str, Any]) -> tuple[str, str | None, float, TraceTurn]:
    try:
        cid = obj["conversation_id"]
        msgs = obj["request"]["messages"]
        if not isinstance(cid, str) or not cid or not isinstance(msgs, list) or not msgs:
            raise ValueError("conversation_id must be text and request.messages a non-empty list")
        resp = obj.get("response") or {}
        usage = resp.get("usage") or {}
        choice = (resp.get("choices") or [{}])[0]
        reply = (choice.get("message") or {}).get("content")
        ts = float(obj.get("timestamp", math.nan))
        dur = obj.get("duration_s")
        turn = TraceTurn(messages=[_message(m) for m in new_messages(msgs)], input_tokens=usage.get("prompt_tokens"),
                         output_tokens=usage.get("completion_tokens"), reply=reply if isinstance(reply, str) else None,
                         timestamp_s=None if math.isnan(ts) else ts,
                         end_s=None if math.isnan(ts) or dur is None else ts + float(dur))
        return cid, obj.get("parent_conversation_id"), ts, turn
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, ValidationError) as exc:
        why = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else f"{type(exc).__name__} {exc}"
        raise WorkloadError(f"{path}:{line}: not a chat-completions log line ({why}): each line needs conversation_id, "
                            "request.messages and response.usage.completion_tokens (or a reply)") from None


def import_chat_log(path: Path) -> AgentTrace:
    """A chat-completions request log → one session per conversation id (module docstring)."""
    convs: dict[str, list[tuple[float, int, TraceTurn]]] = {}
    parents: dict[str, str | None] = {}
    for line, obj in _lines(path):
        cid, parent, ts, turn = _log_turn(path, line, obj)
        convs.setdefault(cid, []).append((ts if not math.isnan(ts) else float(line), line, turn))
        parents.setdefault(cid, parent)
    sessions = []
    for cid, rows in convs.items():
        turns = [t for _, _, t in sorted(rows, key=lambda r: (r[0], r[1]))]
        parent = parents[cid] if parents[cid] in convs else None
        sessions.append(TraceSession(session_id=cid, parent_id=parent, start_s=turns[0].timestamp_s, turns=turns))
    return AgentTrace(sessions=sessions, source=str(path))
