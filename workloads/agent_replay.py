"""Replaying an agent trace (:mod:`workloads.agent_trace`) as agentic sessions.

A top-level trace session and its sub-agents are one :class:`TraceReplaySession` (a
:class:`workloads.base.Session`): agent 0 is the top-level agent, agents 1.. its sub-agents
(depth first); a request's ``branch_id`` is its agent, ``turn_id`` its turn in that agent.

- A turn with messages appends them (cut to ``ceil(tokens × scale)`` tokens, at least
  ``min_message_tokens``; after turn 0 joined into one ``user`` message, as tool results are
  sent to every chat template) to the conversation so far and the model's **actual** reply to
  the previous turn (reasoning stripped, :func:`workloads.base.strip_reasoning`). A turn with
  only lengths appends synthetic words: ``new_tokens``, else ``input_tokens`` − the previous
  turn's input − its output, × ``scale`` (at least 1). A turn with ``hash_ids`` is sent as its
  blocks, whole: each id is one block of ``round(block_tokens × scale)`` random word tokens,
  the same for the same id (seeded by the workload's seed), the last block cut to the scaled
  remainder, so the trace's prefix sharing is sent as it is (the actual reply is not
  inserted: the trace's blocks already hold the recorded one).
- A turn asks for ``max(1, ceil(output_tokens × scale))`` tokens (the recorded reply's length
  when the trace has only its text); ``min_output_tokens`` / ``max_output_tokens`` bound it
  only when the spec sets them.
- A turn is due its tool time (:func:`workloads.agent_trace.tool_times`) ÷ ``time_scale`` after
  the previous reply; a sub-agent's first turn is due after its parent's spawn turn
  (:func:`workloads.agent_trace.spawn_turn`) by its start − that turn's end (or start) ÷
  ``time_scale`` (0 when the trace has no times). A parent does not wait for its sub-agents
  (fan-out); a failed turn ends its agent and every sub-agent it had not yet started.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from workloads.agent_trace import AgentTrace, TraceSession, TraceTurn, session_tree, spawn_turn, tool_times
from workloads.base import FollowUp, Reply, RequestSpec, as_reply, strip_reasoning
from workloads.salt import salt_text, tag_task, task_tag
from workloads.tokens import TokenKit


@dataclass(frozen=True)
class ReplayTurn:
    """One planned turn: ``append`` (messages added before it) or ``blocks`` (the whole
    prompt's content ids, hash-id turns), ``max_tokens``, ``delay_s`` after the previous reply,
    the ``recorded_reply`` (offline statistics only) and its ``recorded_input`` tokens × scale
    (None when the trace has no count)."""

    append: tuple[tuple[str, str], ...] | None
    blocks: tuple[int, ...] | None
    max_tokens: int
    delay_s: float
    recorded_reply: str = ""


@dataclass(frozen=True)
class ReplayAgent:
    """One agent of a session tree: its turns, its ``parent`` agent (None: the top level),
    the parent turn it starts after (``spawn_after``) and its ``spawn_delay_s``."""

    name: str
    turns: tuple[ReplayTurn, ...]
    parent: int | None = None
    spawn_after: int = 0
    spawn_delay_s: float = 0.0


@dataclass(frozen=True)
class ReplayScript:
    """Everything one replayed session tree sends (immutable: clones share it)."""

    session_id: str
    source: str
    start_offset_s: float
    agents: tuple[ReplayAgent, ...]
    api: str
    ignore_eos: bool
    temperature: float
    salt: str | None = None  # workloads.salt: put before every agent's first message (a hash-id turn: its whole prompt)
    task: str | None = None  # fresh_tasks: put before each agent's first user message (workloads.salt.tag_task)
    measurement: str | None = None  # fresh_tasks: put after the salt of a hash-id turn (the measurement's tag)

    @property
    def num_turns(self) -> int:
        return sum(len(a.turns) for a in self.agents)


class TraceReplaySession:
    """A live replay of one session tree (module docstring; implements ``Session``)."""

    def __init__(self, script: ReplayScript, kit: TokenKit) -> None:
        self.script, self.kit = script, kit
        self.session_id, self.start_offset_s = script.session_id, script.start_offset_s
        self._conv: dict[int, list[dict[str, Any]]] = {}
        self._pending: dict[str, tuple[int, int]] = {}
        self._recorded: dict[str, str] = {}
        self.aborted_turns = 0

    @property
    def planned_turns(self) -> int:
        return self.script.num_turns

    def clone(self) -> TraceReplaySession:
        return TraceReplaySession(self.script, self.kit)

    def recorded_reply(self, request: RequestSpec) -> str:
        return self._recorded.get(request.request_id, "")

    def _request(self, agent: int, pos: int, answer: str | None) -> RequestSpec:
        turn = self.script.agents[agent].turns[pos]
        salt = salt_text(self.script.salt) if self.script.salt else ""
        if turn.blocks is not None:
            tag = salt_text(self.script.measurement) if self.script.measurement else ""
            conv = [{"role": "user", "content": salt + tag + self.kit.decode(turn.blocks)}]
        else:
            conv = list(self._conv.get(agent, [])) if pos else []
            if answer is not None:
                conv.append({"role": "assistant", "content": answer})
            appended = tuple(turn.append or ())
            if pos == 0 and self.script.task:
                appended = tag_task(appended, f"{self.script.task}" + (f"/{agent}" if agent else ""))
            conv.extend({"role": r, "content": c} for r, c in appended)
            if pos == 0 and salt and conv:
                conv[0] = {**conv[0], "content": salt + conv[0]["content"]}
        self._conv[agent] = conv
        prompt, messages, ids = self.kit.conversation_payload(conv, self.script.api)
        rid = f"{self.session_id}-t{pos}" if agent == 0 else f"{self.session_id}-a{agent}-t{pos}"
        self._pending[rid] = (agent, pos)
        self._recorded[rid] = turn.recorded_reply
        return RequestSpec(request_id=rid, max_tokens=turn.max_tokens, prompt=prompt, messages=messages,
                           prompt_token_ids=ids, input_tokens_expected=len(ids), ignore_eos=self.script.ignore_eos,
                           temperature=self.script.temperature, session_id=self.session_id, turn_id=pos, branch_id=agent,
                           keep_output_text=True)

    def first_request(self) -> RequestSpec:
        self.aborted_turns = 0
        return self._request(0, 0, None)

    def on_complete(self, request: RequestSpec, reply: Reply | str, success: bool | None = None) -> list[FollowUp]:
        """The agent's next turn and the sub-agents spawned after this turn (none after a
        failure, whose lost turns go to ``aborted_turns``). Raises ``ValueError`` for a request
        this session did not issue or already completed."""
        got = as_reply(reply, success)
        key = self._pending.pop(request.request_id, None)
        if key is None:
            raise ValueError(f"session {self.session_id} got on_complete for unknown or already completed "
                             f"request {request.request_id!r}")
        agent, pos = key
        if not got.success:
            self.aborted_turns += self._lost(agent, pos)
            return []
        answer = strip_reasoning(got.answer or "").strip()
        out = []
        turns = self.script.agents[agent].turns
        if pos + 1 < len(turns):
            out.append(FollowUp(turns[pos + 1].delay_s, self._request(agent, pos + 1, answer)))
        for j, child in enumerate(self.script.agents):
            if child.parent == agent and child.spawn_after == pos:
                out.append(FollowUp(child.spawn_delay_s, self._request(j, 0, None)))
        return out

    def _lost(self, agent: int, pos: int) -> int:
        """Turns never sent when turn ``pos`` of ``agent`` fails: its later turns and every
        sub-agent (with its own) spawned at or after ``pos``."""
        lost = len(self.script.agents[agent].turns) - 1 - pos
        for j, child in enumerate(self.script.agents):
            if child.parent == agent and child.spawn_after >= pos:
                lost += self._lost(j, -1)
        return lost


# --- building scripts ----------------------------------------------------------------------------
class _Cutter:
    """Cuts texts to ``ceil(tokens × scale)`` tokens, at least ``minimum`` (memoised)."""

    def __init__(self, kit: TokenKit, scale: float, minimum: int) -> None:
        self.kit, self.scale, self.minimum = kit, scale, minimum
        self._memo: dict[str, tuple[str, int]] = {}

    def cut(self, text: str) -> tuple[str, int]:
        """``(cut text, tokens of the uncut text)``."""
        if text not in self._memo:
            n = len(self.kit.encode(text))
            keep = max(self.minimum, math.ceil(n * self.scale))
            self._memo[text] = (text if keep >= n else self.kit.truncate(text, keep), n)
        return self._memo[text]


@dataclass
class ReplayBuilder:
    """Builds :class:`ReplayScript` s from one trace (its sessions' trees) for one spec."""

    trace: AgentTrace
    spec: Any  # workloads.spec.AgenticSpec
    kit: TokenKit

    def __post_init__(self) -> None:
        s = self.spec
        self.cutter = _Cutter(self.kit, s.scale, s.min_message_tokens)
        self.rng = np.random.default_rng([s.seed, 0x54524143])
        self.blocks: dict[int, list[int]] = {}
        self.block = max(1, round(self.trace.block_tokens * s.scale))
        given = s.model_fields_set
        self.out_min = s.min_output_tokens if "min_output_tokens" in given else 1
        self.out_max = s.max_output_tokens if "max_output_tokens" in given else None

    def _max_tokens(self, t: TraceTurn) -> int:
        n = t.output_tokens if t.output_tokens is not None else len(self.kit.encode(t.reply or ""))
        m = max(self.out_min, math.ceil(n * self.spec.scale))
        return min(m, self.out_max) if self.out_max is not None else m

    def _hash_blocks(self, t: TraceTurn) -> tuple[int, ...]:
        ids, n = t.hash_ids or [], len(t.hash_ids or [])
        last = (t.input_tokens or 1) - (n - 1) * self.trace.block_tokens
        last_scaled = min(self.block, max(1, round(last * self.block / self.trace.block_tokens)))
        out: list[int] = []
        for k, h in enumerate(ids):
            if h not in self.blocks:
                rng = np.random.default_rng([self.spec.seed, 0x4D4F4F4E, int(h) & 0xFFFFFFFF, (int(h) >> 32) & 0xFFFFFFFF])
                self.blocks[h] = self.kit.random_words(rng, self.block)
            out.extend(self.blocks[h] if k < n - 1 else self.blocks[h][:last_scaled])
        return tuple(out)

    def _append(self, turns: list[TraceTurn], i: int) -> tuple[tuple[str, str], ...]:
        t = turns[i]
        if t.messages is not None:
            msgs = [(m.role, self.cutter.cut(m.content)[0]) for m in t.messages]
            if i == 0:
                return tuple(("system" if r == "developer" else ("user" if r == "tool" else r), c) for r, c in msgs)
            return (("user", "\n".join(c for _, c in msgs)),)
        if t.new_tokens is not None:
            n = t.new_tokens
        elif t.input_tokens is not None:
            prev = turns[i - 1] if i else None
            n = t.input_tokens - ((prev.input_tokens or 0) + (prev.output_tokens or 0) if prev is not None else 0)
        else:
            n = 0
        words = self.kit.random_words(self.rng, max(1, math.ceil(max(n, 0) * self.spec.scale)))
        return (("user", self.kit.decode(words)),)

    def agent(self, s: TraceSession, parent: int | None, spawn_after: int, spawn_delay_s: float) -> ReplayAgent:
        tools = tool_times(s.turns)
        ts = self.spec.time_scale
        turns = []
        for i, t in enumerate(s.turns):
            # offline statistics feed this reply to the next turn: the trace's text, else words of its length
            cut_reply = (self.kit.truncate(t.reply, self._max_tokens(t)) if t.reply
                         else self.kit.decode(self.kit.random_words(self.rng, self._max_tokens(t))))
            turns.append(ReplayTurn(append=None if t.hash_ids else self._append(s.turns, i),
                                    blocks=self._hash_blocks(t) if t.hash_ids else None, max_tokens=self._max_tokens(t),
                                    delay_s=(tools[i] or 0.0) / ts, recorded_reply=cut_reply))
        return ReplayAgent(s.session_id, tuple(turns), parent, spawn_after, spawn_delay_s)

    def script(self, root: TraceSession, session_id: str, start: float) -> ReplayScript:
        tree = session_tree(self.trace, root)
        index = {s.session_id: i for i, s in enumerate(tree)}
        agents = []
        for s in tree:
            if s.parent_id is None or s.parent_id not in index:
                agents.append(self.agent(s, None, 0, 0.0))
                continue
            parent = tree[index[s.parent_id]]
            k = spawn_turn(parent, s)
            agents.append(self.agent(s, index[s.parent_id], k, _spawn_delay(parent.turns[k], s) / self.spec.time_scale))
        sp = self.spec
        return ReplayScript(session_id, root.session_id, start, tuple(agents), sp.api, sp.ignore_eos, sp.temperature)


def _spawn_delay(spawned_after: TraceTurn, child: TraceSession) -> float:
    start = child.start_s if child.start_s is not None else child.turns[0].timestamp_s
    ref = spawned_after.end_s if spawned_after.end_s is not None else spawned_after.timestamp_s
    return max(0.0, start - ref) if start is not None and ref is not None else 0.0


def truncate_script(script: ReplayScript, budget: int) -> ReplayScript:
    """``script`` cut to its first ``budget`` turns (agents in tree order; a sub-agent whose
    spawn turn was cut is dropped, and so are its own)."""
    kept: list[ReplayAgent] = []
    new_index: dict[int, int] = {}
    for j, a in enumerate(script.agents):
        if budget <= 0 or (a.parent is not None and (a.parent not in new_index
                                                      or a.spawn_after >= len(kept[new_index[a.parent]].turns))):
            continue
        new_index[j] = len(kept)
        turns = a.turns[:budget]
        budget -= len(turns)
        kept.append(ReplayAgent(a.name, turns, new_index.get(a.parent) if a.parent is not None else None,
                                a.spawn_after, a.spawn_delay_s))
    return ReplayScript(script.session_id, script.source, script.start_offset_s, tuple(kept), script.api,
                        script.ignore_eos, script.temperature)


def build_replay_sessions(spec: Any, kit: TokenKit) -> list[TraceReplaySession]:
    """Sessions replaying ``spec.trace`` (deterministic in ``spec.seed``): the trace's top-level
    sessions in a seeded random order, each once (``num_sessions`` when given: cycling through
    them; ``num_requests``: sessions until their turns total it, the last one cut), starting on
    the arrival schedule of ``request_rate`` sessions/s. A session drawn again in the same
    workload (a cycle past the trace's end) is salted apart (``~cN`` after the run's salt) so it
    is a fresh job, not a replay the cache already holds. Raises
    :class:`~workloads.errors.WorkloadError` for a bad trace (its file:line)."""
    from workloads.arrivals import schedule_offsets
    from workloads.trace_import import import_trace

    trace = import_trace(spec.trace, spec.trace_format)
    roots = trace.roots()
    builder = ReplayBuilder(trace, spec, kit)
    order = np.random.default_rng([spec.seed, 0xA6E]).permutation(len(roots))
    count = spec.num_sessions if "num_sessions" in spec.model_fields_set else len(roots)
    budget, scripts, memo = spec.num_requests, [], {}
    while (budget is None and len(scripts) < count) or (budget is not None and budget > 0):
        k = len(scripts)
        root = roots[order[k % len(roots)]]
        if root.session_id not in memo:
            memo[root.session_id] = builder.script(root, "", 0.0)
        script = memo[root.session_id]
        if budget is not None:
            script = truncate_script(script, budget)
            budget -= script.num_turns
        scripts.append((script, k // len(roots)))
    offsets = schedule_offsets(len(scripts), rate=spec.request_rate, burstiness=spec.burstiness, seed=spec.seed,
                               process=spec.arrival, ramp=spec.ramp)
    out = []
    for k, ((script, cycle), off) in enumerate(zip(scripts, offsets)):
        salt = "~".join(x for x in (spec.prompt_salt, f"c{cycle}" if cycle else None) if x) or None
        fresh = spec.fresh_tasks
        s = ReplayScript(f"agentic-s{k:03d}", script.source, float(off), script.agents, script.api, script.ignore_eos,
                         script.temperature, salt, task_tag(spec.seed, k) if fresh else None,
                         task_tag(spec.seed) if fresh else None)
        out.append(TraceReplaySession(s, kit))
    return out


def trace_note(spec: Any) -> str:
    """One line on what a trace replay sends: the trace, its sessions, and whether its text is
    the trace's own (``real``) or synthetic words of the trace's token counts."""
    from workloads.trace_import import import_trace

    trace = import_trace(spec.trace, spec.trace_format)
    what = {"real": "the trace's own message text",
            "synthetic": "synthetic text of the trace's token counts (the trace has lengths only)",
            "mixed": "the trace's own text where it has it, synthetic text of its token counts elsewhere"}[trace.content]
    subs = len(trace.sessions) - len(trace.roots())
    return (f"agent trace {trace.source}: {len(trace.roots())} sessions, {subs} sub-agents; sends {what}; "
            f"scale {spec.scale:g}, time_scale {spec.time_scale:g}")
