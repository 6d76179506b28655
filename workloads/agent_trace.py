"""The open agent-trace format: one JSONL file of agent sessions a run replays.

``bench run --workload agentic --trace FILE`` replays it (``--trace-format`` names an importer
when the file is in another format, :mod:`workloads.trace_import`). Each line is one JSON
object, either a **session** (it has ``turns``) or a **request** (one turn with its
``session_id``; the turns of a session are ordered by ``turn``, else by line). An optional
first line ``{"format": "agent-trace", "version": 1, "block_tokens": 512}`` is the header
(``block_tokens``: tokens per ``hash_ids`` block; 512, Mooncake's, without one).

Session fields: ``session_id`` (text, unique), ``parent_id`` (the session that spawned this one:
a sub-agent, or one branch of a fan-out; null for a top-level agent), ``parent_turn`` (the
parent's turn after whose reply it starts; default: the last parent turn sent at or before its
``start_s``, else 0), ``start_s`` (optional arrival, seconds since the trace's start), ``turns``.

Turn fields (every one optional except that a turn needs a reply length: ``output_tokens`` or
``reply``):

- ``messages``: ``[{"role", "content"}]`` appended to the conversation before this turn (turn 0:
  the system prompt and task; later turns: the tool results / user message after the previous
  reply). Real content is replayed as it is (cut to ``scale``);
- ``new_tokens``: the length of that appended text when the trace has no content (synthetic
  words of that many tokens are sent); ``input_tokens``: the turn's whole prompt as recorded
  (without ``messages``/``new_tokens``: the appended length is ``input_tokens`` − the previous
  turn's input − its output);
- ``reply`` (the recorded reply text) and ``output_tokens`` (its length; the replay asks for
  that many, × ``scale``);
- ``tool_s``: seconds of tool (or user) time between the previous reply and this turn;
  without it, ``timestamp_s − end_s`` of the previous turn when both are known, else the gap
  between the two ``timestamp_s`` (which then includes the recorded model time);
- ``timestamp_s`` / ``end_s``: when the turn was sent / its reply finished (seconds);
- ``hash_ids``: Mooncake-style ids of the prompt's ``block_tokens``-token prefix blocks (the
  same id = the same block, in any session): a turn with them is replayed as its blocks
  (identical synthetic blocks for identical ids, the prompt rebuilt whole each turn), so the
  replay has the trace's prefix-sharing structure exactly.

Replay semantics are in :mod:`workloads.agent_replay`. :func:`load_agent_trace` raises
:class:`~workloads.errors.WorkloadError` naming ``file:line`` for the first bad line.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from workloads.errors import WorkloadError
from workloads.loaders import MOONCAKE_BLOCK_SIZE, _open_text

FORMAT_NAME = "agent-trace"


class TraceMessage(BaseModel):
    """One chat message of a trace: ``role`` and text ``content``."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str


class TraceTurn(BaseModel):
    """One LLM call of an agent (fields: module docstring). Lengths in tokens, times in s."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    messages: list[TraceMessage] | None = None
    new_tokens: int | None = Field(None, ge=0)
    input_tokens: int | None = Field(None, ge=1)
    reply: str | None = None
    output_tokens: int | None = Field(None, ge=1)
    tool_s: float | None = Field(None, ge=0, allow_inf_nan=False)
    timestamp_s: float | None = Field(None, allow_inf_nan=False)
    end_s: float | None = Field(None, allow_inf_nan=False)
    hash_ids: list[int] | None = None

    @model_validator(mode="after")
    def _check(self) -> TraceTurn:
        if self.output_tokens is None and self.reply is None:
            raise ValueError("a turn needs output_tokens or reply (the length of the reply to ask for)")
        if self.hash_ids is not None and (not self.hash_ids or self.input_tokens is None):
            raise ValueError("hash_ids needs a non-empty list and input_tokens (the prompt's length)")
        if self.timestamp_s is not None and self.end_s is not None and self.end_s < self.timestamp_s:
            raise ValueError(f"end_s {self.end_s} is before timestamp_s {self.timestamp_s}")
        return self


class TraceSession(BaseModel):
    """One agent's session: its turns in order, and for a sub-agent its parent and spawn turn."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    session_id: str = Field(min_length=1)
    parent_id: str | None = None
    parent_turn: int | None = Field(None, ge=0)
    start_s: float | None = Field(None, allow_inf_nan=False)
    turns: list[TraceTurn] = Field(min_length=1)


class TraceRequest(TraceTurn):
    """One line of the request-per-line form: a turn with its session's fields."""

    session_id: str = Field(min_length=1)
    turn: int | None = Field(None, ge=0)
    parent_id: str | None = None
    parent_turn: int | None = Field(None, ge=0)
    start_s: float | None = Field(None, allow_inf_nan=False)


class AgentTrace(BaseModel):
    """A whole trace: ``sessions`` (top-level agents and sub-agents, in file order),
    ``block_tokens`` (tokens per ``hash_ids`` block), ``source`` (the file, and the importer
    that read it) and ``content``: ``"real"`` (every turn has message text), ``"synthetic"``
    (lengths only) or ``"mixed"``."""

    sessions: list[TraceSession]
    block_tokens: int = MOONCAKE_BLOCK_SIZE
    source: str = ""

    @property
    def content(self) -> str:
        """``real``, ``synthetic`` or ``mixed`` (see the class docstring)."""
        kinds = {t.messages is not None for s in self.sessions for t in s.turns}
        return "mixed" if len(kinds) == 2 else ("real" if kinds == {True} else "synthetic")

    def roots(self) -> list[TraceSession]:
        """Top-level sessions (no parent), in file order."""
        return [s for s in self.sessions if s.parent_id is None]

    def children(self) -> dict[str, list[TraceSession]]:
        """Sub-agents by parent session id, in file order."""
        out: dict[str, list[TraceSession]] = {}
        for s in self.sessions:
            if s.parent_id is not None:
                out.setdefault(s.parent_id, []).append(s)
        return out


def tool_times(turns: list[TraceTurn]) -> list[float | None]:
    """Tool time before each turn (s; turn 0: 0): ``tool_s``, else ``timestamp_s`` − the
    previous ``end_s``, else the gap between the two ``timestamp_s`` (never below 0); None
    where the trace says nothing."""
    out: list[float | None] = [0.0]
    for prev, turn in zip(turns, turns[1:]):
        if turn.tool_s is not None:
            out.append(turn.tool_s)
        elif turn.timestamp_s is not None and prev.end_s is not None:
            out.append(max(0.0, turn.timestamp_s - prev.end_s))
        elif turn.timestamp_s is not None and prev.timestamp_s is not None:
            out.append(max(0.0, turn.timestamp_s - prev.timestamp_s))
        else:
            out.append(None)
    return out


def _one_line(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(x) for x in err.get("loc", ())) or "line"
    return f"{loc}: {err.get('msg', 'invalid')}"


def _lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` of each non-blank line; a line that is not a JSON object
    raises :class:`WorkloadError` naming ``file:line``."""
    with _open_text(path) as f:
        for line, text in enumerate(f, start=1):
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as exc:
                raise WorkloadError(f"{path}:{line}: not valid JSON ({exc.msg} at column {exc.colno}): fix or delete the line") from None
            if not isinstance(obj, dict):
                raise WorkloadError(f"{path}:{line}: expected a JSON object (a session or a request): fix the line")
            yield line, obj


def load_agent_trace(path: Path | str) -> AgentTrace:
    """Read an agent-trace JSONL file (module docstring). Raises :class:`WorkloadError` with
    ``file:line`` for a line that is not JSON, fails the schema, repeats a session id, or names
    a parent that is not in the file; and for a file with no session."""
    path = Path(path)
    sessions: dict[str, TraceSession] = {}
    requests: dict[str, list[tuple[int, int, TraceRequest]]] = {}
    where: dict[str, int] = {}
    block = MOONCAKE_BLOCK_SIZE
    for line, obj in _lines(path):
        try:
            if "format" in obj:
                if obj.get("format") != FORMAT_NAME or line != min(where.values(), default=line):
                    raise WorkloadError(f"{path}:{line}: a header line must come first and say \"format\": \"{FORMAT_NAME}\"")
                block = int(obj.get("block_tokens", MOONCAKE_BLOCK_SIZE))
                where["\0header"] = line
                continue
            if "turns" in obj:
                s = TraceSession.model_validate(obj)
                if s.session_id in sessions or s.session_id in requests:
                    raise WorkloadError(f"{path}:{line}: session_id {s.session_id!r} appears twice: session ids must be unique")
                sessions[s.session_id], where[s.session_id] = s, line
            else:
                r = TraceRequest.model_validate(obj)
                if r.session_id in sessions:
                    raise WorkloadError(f"{path}:{line}: session_id {r.session_id!r} is already a whole session line")
                requests.setdefault(r.session_id, []).append((r.turn if r.turn is not None else line, line, r))
                where.setdefault(r.session_id, line)
        except ValidationError as exc:
            raise WorkloadError(f"{path}:{line}: {_one_line(exc)}: not an agent-trace line (see workloads/agent_trace.py)") from None
    for sid, rows in requests.items():
        sessions[sid] = _session_of(path, sid, sorted(rows, key=lambda x: (x[0], x[1])))
    return _checked(path, [sessions[k] for k in sorted(sessions, key=lambda k: where[k])], block, where)


def _session_of(path: Path, sid: str, rows: list[tuple[int, int, TraceRequest]]) -> TraceSession:
    turn_fields = set(TraceTurn.model_fields)
    first = rows[0][2]
    for _, line, r in rows[1:]:
        if (r.parent_id, r.parent_turn) != (first.parent_id, first.parent_turn) and r.parent_id is not None:
            raise WorkloadError(f"{path}:{line}: session {sid!r} names another parent than its first request")
    turns = [TraceTurn(**{k: getattr(r, k) for k in turn_fields}) for _, _, r in rows]
    return TraceSession(session_id=sid, parent_id=first.parent_id, parent_turn=first.parent_turn,
                        start_s=first.start_s if first.start_s is not None else first.timestamp_s, turns=turns)


def _checked(path: Path, sessions: list[TraceSession], block: int, where: dict[str, int]) -> AgentTrace:
    if not sessions:
        raise WorkloadError(f"{path}: the trace has no sessions: pass a non-empty agent trace")
    ids = {s.session_id for s in sessions}
    for s in sessions:
        if s.parent_id is not None and s.parent_id not in ids:
            raise WorkloadError(f"{path}:{where.get(s.session_id, 1)}: parent_id {s.parent_id!r} is not a session of this file")
        if s.parent_id == s.session_id:
            raise WorkloadError(f"{path}:{where.get(s.session_id, 1)}: session {s.session_id!r} is its own parent")
    return AgentTrace(sessions=sessions, block_tokens=block, source=str(path))


def write_agent_trace(trace: AgentTrace, path: Path | str) -> None:
    """Write ``trace`` as agent-trace JSONL (a header, then one session per line)."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps({"format": FORMAT_NAME, "version": 1, "block_tokens": trace.block_tokens}) + "\n")
        for s in trace.sessions:
            f.write(s.model_dump_json(exclude_none=True) + "\n")


def session_tree(trace: AgentTrace, root: TraceSession) -> list[TraceSession]:
    """``root`` and every sub-agent below it, parents before children (depth first)."""
    kids = trace.children()
    out: list[TraceSession] = []
    stack: list[TraceSession] = [root]
    while stack:
        s = stack.pop()
        out.append(s)
        stack.extend(reversed(kids.get(s.session_id, [])))
    return out


def spawn_turn(parent: TraceSession, child: TraceSession) -> int:
    """The parent turn after whose reply ``child`` starts: ``parent_turn``, else the last parent
    turn sent at or before the child's ``start_s`` (or its first turn's ``timestamp_s``), else 0."""
    if child.parent_turn is not None:
        return min(child.parent_turn, len(parent.turns) - 1)
    start = child.start_s if child.start_s is not None else child.turns[0].timestamp_s
    if start is None:
        return 0
    sent = [i for i, t in enumerate(parent.turns) if t.timestamp_s is not None and t.timestamp_s <= start]
    return sent[-1] if sent else 0


def iter_turns(sessions: Iterable[TraceSession]) -> Iterator[tuple[TraceSession, int, TraceTurn]]:
    """``(session, index, turn)`` of every turn of ``sessions``."""
    for s in sessions:
        for i, t in enumerate(s.turns):
            yield s, i, t
