"""The agentic workload: multi-turn tool-using sessions replayed from real SWE-agent trajectories.

Each shipped trajectory (``data/swe_agent_trajectories``, 22 sessions) is a sequence of LLM
calls: ``system prompt [+ demonstration] + task``, then per step the model's reply (an
action) and the tool's observation. A session here replays one trajectory:

- turn 0's prompt = the (scaled) system prompt, demonstration and task;
- turn k's prompt = turn k-1's prompt + the model's **actual** answer to turn k-1 (received
  in :meth:`AgenticSession.on_complete` as a :class:`~workloads.base.Reply`; its reasoning is
  left out and a ``<think>…</think>`` block stripped, as reasoning models' chat templates do;
  whitespace-stripped) + the trace's next tool
  observation (scaled). So every turn's prompt token ids extend the previous turn's exactly
  and the shared prefix grows turn by turn (SWE-agent's history, ``tool`` messages sent as
  ``user`` so every chat template accepts them);
- the next turn is due ``delay_s`` after the previous completed: the tool execution time
  recorded for that step (``trajectory[k].execution_time``), or one drawn from all recorded
  times when the file has none, × ``think_time_scale``;
- sessions replaying trajectories of the same configuration share the identical system
  prompt (and, for the test-data runs, the same demonstration), so they share a prefix;
- a ``branch_fraction`` of sessions fork after ``branch_after`` turns into ``branch_factor``
  continuations (parallel sub-agents exploring from one state): each branch receives the
  same stem conversation, including the stem's last actual reply, then its own observation
  (branch j continues with the trace's observations starting j steps later);
- a failed turn ends its path: the turns it would have led to are never sent and are
  counted in :attr:`AgenticSession.aborted_turns` (at a failure before the branch point,
  every branch's turns too).

Scale (``AgenticSpec.scale``): every trace message is cut to ``ceil(tokens × scale)`` tokens
(at least ``min_message_tokens``), keeping the prefix structure and the length ratios
between messages; replies are capped at ``max_tokens`` = recorded reply tokens ×
``output_scale`` clipped to [min_output_tokens, max_output_tokens].
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from workloads.arrivals import schedule_offsets
from workloads.base import FollowUp, Reply, RequestSpec, as_reply, strip_reasoning
from workloads.errors import WorkloadError
from workloads.loaders import Trajectory, list_trajectory_files, load_trajectory
from workloads.salt import salt_initial, tag_task, task_tag
from workloads.spec import AgenticSpec
from workloads.tokens import TokenKit


@dataclass(frozen=True)
class AgentTurn:
    """One scripted turn: the observation appended before it (None for turn 0), the trace's
    recorded reply (cut to ``max_tokens``; used only offline), ``max_tokens``, and
    ``delay_s`` (think/tool time before it is sent, seconds; 0 for turn 0)."""

    trace_index: int
    observation: str | None
    recorded_reply: str
    max_tokens: int
    delay_s: float


@dataclass(frozen=True)
class AgenticScript:
    """Everything one session replays; immutable, so a session can be cloned for stats."""

    session_id: str
    source: str
    start_offset_s: float
    initial: tuple[tuple[str, str], ...]  # (role, content) of the system/demo/task messages
    stem: tuple[AgentTurn, ...]
    branches: tuple[tuple[AgentTurn, ...], ...]
    api: str
    ignore_eos: bool
    temperature: float

    @property
    def num_turns(self) -> int:
        """Requests this session sends when every turn succeeds (stem + all branches)."""
        return len(self.stem) + sum(len(b) for b in self.branches)


class AgenticSession:
    """A live agentic session (implements :class:`workloads.base.Session`).

    Branch ids: 0 for the stem (and for the whole of a linear session), ``j`` (1-based) for
    the j-th branch; ``turn_id`` is the turn's position along its path (stem then branch).
    A failed turn ends its path (an agent cannot continue without its reply); the turns
    never sent because of it are counted in ``aborted_turns`` (reset when the first turn is
    taken again, so the count is the latest replay's). ``planned_turns``: requests sent when
    every turn succeeds.
    """

    def __init__(self, script: AgenticScript, kit: TokenKit) -> None:
        self.script = script
        self.kit = kit
        self.session_id = script.session_id
        self.start_offset_s = script.start_offset_s
        self._conv: dict[int, list[dict[str, Any]]] = {}
        self._pos: dict[int, int] = {}
        self._pending: dict[str, tuple[int, int]] = {}  # request_id -> (branch, position)
        self._recorded: dict[str, str] = {}
        self.aborted_turns = 0

    @property
    def planned_turns(self) -> int:
        """Requests this session sends when every turn succeeds (stem + all branches)."""
        return self.script.num_turns

    def clone(self) -> AgenticSession:
        """A fresh, unstarted copy (same script and tokenizer)."""
        return AgenticSession(self.script, self.kit)

    def _path(self, branch: int) -> tuple[AgentTurn, ...]:
        return self.script.stem if branch == 0 else self.script.stem + self.script.branches[branch - 1]

    def _request(self, branch: int, pos: int, conv: list[dict[str, Any]]) -> RequestSpec:
        turn = self._path(branch)[pos]
        prompt, messages, ids = self.kit.conversation_payload(conv, self.script.api)
        rid = f"{self.session_id}-t{pos}" if branch == 0 else f"{self.session_id}-b{branch}-t{pos}"
        self._conv[branch] = conv
        self._pos[branch] = pos
        self._pending[rid] = (branch, pos)
        self._recorded[rid] = turn.recorded_reply
        return RequestSpec(
            request_id=rid,
            max_tokens=turn.max_tokens,
            prompt=prompt,
            messages=messages,
            prompt_token_ids=ids,
            input_tokens_expected=len(ids),
            ignore_eos=self.script.ignore_eos,
            temperature=self.script.temperature,
            session_id=self.session_id,
            turn_id=pos,
            branch_id=branch,
            keep_output_text=True,
        )

    def first_request(self) -> RequestSpec:
        """Turn 0: system prompt, demonstration, task."""
        self.aborted_turns = 0  # a new replay of this session
        conv = [{"role": r, "content": c} for r, c in self.script.initial]
        first = self.script.stem[0]
        if first.observation is not None:
            conv.append({"role": "user", "content": first.observation})
        return self._request(0, 0, conv)

    def recorded_reply(self, request: RequestSpec) -> str:
        """The trace's reply for ``request`` (cut to its max_tokens): for offline statistics."""
        return self._recorded.get(request.request_id, "")

    def on_complete(self, request: RequestSpec, reply: Reply | str, success: bool | None = None) -> list[FollowUp]:
        """Next turn(s) after ``request`` completed: the conversation so far + the actual
        answer (its reasoning left out, a ``<think>`` block stripped, whitespace-stripped) +
        the next observation; several follow-ups at the branch point. After a failed turn:
        none, and the turns it would have led to are added to ``aborted_turns``.

        ``reply``: a :class:`~workloads.base.Reply`, or the reply text with ``success``
        (:func:`~workloads.base.as_reply`). Raises ``ValueError`` for a request this session
        did not issue or already completed, ``TypeError`` for a text without ``success``.
        """
        got = as_reply(reply, success)
        key = self._pending.pop(request.request_id, None)
        if key is None:
            raise ValueError(
                f"session {self.session_id} got on_complete for unknown or already completed request {request.request_id!r}"
            )
        branch, pos = key
        if not got.success:
            self.aborted_turns += self._after(branch, pos)
            return []
        answer = strip_reasoning(got.answer or "").strip()
        conv = self._conv[branch] + [{"role": "assistant", "content": answer}]
        stem, branches = self.script.stem, self.script.branches
        if branch == 0 and pos == len(stem) - 1 and branches:
            out = []
            for j, path in enumerate(branches, start=1):
                nxt = path[0]
                req = self._request(j, pos + 1, conv + [{"role": "user", "content": nxt.observation or ""}])
                out.append(FollowUp(delay_s=nxt.delay_s, request=req))
            return out
        path = self._path(branch)
        if pos + 1 >= len(path):
            return []
        nxt = path[pos + 1]
        return [FollowUp(nxt.delay_s, self._request(branch, pos + 1, conv + [{"role": "user", "content": nxt.observation or ""}]))]

    def _after(self, branch: int, pos: int) -> int:
        """Turns that follow turn ``pos`` of ``branch``'s path: the rest of the stem and every
        branch for the stem, the rest of the branch for a branch."""
        if branch == 0:
            return len(self.script.stem) - 1 - pos + sum(len(b) for b in self.script.branches)
        return len(self._path(branch)) - 1 - pos


# --- building scripts from trajectories ------------------------------------------------------------
@dataclass(frozen=True)
class _Parsed:
    name: str
    initial: tuple[tuple[str, str], ...]
    replies: tuple[str, ...]
    observations: tuple[str, ...]  # observations[k] follows replies[k] ("" when the trace ends)
    exec_times: tuple[float | None, ...]


def _parse(traj: Trajectory) -> _Parsed:
    msgs = list(traj.messages)
    first_assistant = next((i for i, m in enumerate(msgs) if m.role == "assistant" and not m.is_demo), None)
    if first_assistant is None:
        raise WorkloadError(f"trajectory {traj.name} has no assistant message: it cannot be replayed")
    initial = tuple(("user" if m.role == "tool" else m.role, m.content) for m in msgs[:first_assistant])
    replies: list[str] = []
    observations: list[str] = []
    i = first_assistant
    while i < len(msgs):
        replies.append(msgs[i].content)
        i += 1
        obs = []
        while i < len(msgs) and msgs[i].role != "assistant":
            obs.append(msgs[i].content)
            i += 1
        observations.append("\n".join(obs))
    return _Parsed(traj.name, initial, tuple(replies), tuple(observations), traj.execution_times_s)


class _Scaler:
    """Cuts texts to ``ceil(tokens × scale)`` tokens (memoised: equal texts → equal cuts)."""

    def __init__(self, kit: TokenKit, scale: float, minimum: int) -> None:
        self.kit, self.scale, self.minimum = kit, scale, minimum
        self._memo: dict[str, str] = {}
        self._ntok: dict[str, int] = {}

    def tokens(self, text: str) -> int:
        if text not in self._ntok:
            self._ntok[text] = len(self.kit.encode(text))
        return self._ntok[text]

    def cut(self, text: str) -> str:
        if text not in self._memo:
            n = self.tokens(text)
            keep = max(self.minimum, math.ceil(n * self.scale))
            self._memo[text] = text if keep >= n else self.kit.truncate(text, keep)
        return self._memo[text]


def load_parsed_trajectories(spec: AgenticSpec) -> list[_Parsed]:
    """The shipped trajectories (filtered by ``spec.trajectories`` substrings), parsed, in path order."""
    files = list_trajectory_files()
    if spec.trajectories:
        files = [f for f in files if any(s in f.name for s in spec.trajectories)]
        if not files:
            raise WorkloadError(
                f"no trajectory name contains any of {spec.trajectories}: see workloads/data/swe_agent_trajectories/FILES.tsv"
            )
    return [_parse(load_trajectory(f)) for f in files]


def build_agentic_sessions(spec: AgenticSpec, kit: TokenKit) -> list[AgenticSession]:
    """Sessions for ``spec`` (deterministic in ``spec.seed``); see the module docstring.

    Session count: ``spec.num_sessions``, or — when ``spec.num_requests`` is set — as many
    sessions as it takes for the planned turns (branches included) to total exactly
    ``num_requests`` (the last session is shortened, linear). Trajectories are taken in a
    seeded random order, cycling when more sessions than trajectories are asked for.
    """
    parsed = load_parsed_trajectories(spec)
    rng = np.random.default_rng([spec.seed, 0xA6E])
    order = rng.permutation(len(parsed))
    pool = [t for p in parsed for t in p.exec_times if t is not None and t >= 0]
    if not pool:
        pool = [0.0]
    scaler = _Scaler(kit, spec.scale, spec.min_message_tokens)

    def turn(p: _Parsed, idx: int, first: bool) -> AgentTurn:
        # turn 0 replays the trace's first call; later turns cycle through calls 1..n-1
        n = len(p.replies)
        if first or n == 1:
            i = 0
        else:
            i = 1 + (idx - 1) % (n - 1)
        obs = None if first else scaler.cut(p.observations[(i - 1) % n])
        rec_tokens = scaler.tokens(p.replies[i])
        max_tokens = int(np.clip(round(rec_tokens * spec.output_scale), spec.min_output_tokens, spec.max_output_tokens))
        if first:
            delay = 0.0
        else:
            t = p.exec_times[i - 1] if 0 <= i - 1 < len(p.exec_times) else None
            delay = (t if t is not None else float(rng.choice(pool))) * spec.think_time_scale
        return AgentTurn(i, obs, kit.truncate(p.replies[i], max_tokens), max_tokens, float(delay))

    budget = spec.num_requests
    plans: list[tuple[_Parsed, tuple[AgentTurn, ...], tuple[tuple[AgentTurn, ...], ...]]] = []
    k = 0
    while (budget is None and k < spec.num_sessions) or (budget is not None and budget > 0):
        p = parsed[order[k % len(order)]]
        branching = math.floor((k + 1) * spec.branch_fraction) > math.floor(k * spec.branch_fraction)
        b, f, L = spec.branch_after, spec.branch_factor, spec.max_turns - spec.branch_after
        if branching and (budget is None or b + f * L <= budget):
            stem = tuple(turn(p, i, i == 0) for i in range(b))
            branches = tuple(tuple(turn(p, b + j + m, False) for m in range(L)) for j in range(f))
        else:
            n = min(spec.max_turns, len(p.replies))
            if budget is not None:
                n = min(n, budget)
            stem, branches = tuple(turn(p, i, i == 0) for i in range(n)), ()
        plans.append((p, stem, branches))
        if budget is not None:
            budget -= len(stem) + sum(len(x) for x in branches)
        k += 1

    # session starts: drawn, then rescaled to offer exactly request_rate sessions/s (a ramp: vLLM's ramped gaps)
    offsets = schedule_offsets(
        len(plans), rate=spec.request_rate, burstiness=spec.burstiness, seed=spec.seed, process=spec.arrival,
        ramp=spec.ramp,
    )
    sessions = []
    for idx, ((p, stem, branches), off) in enumerate(zip(plans, offsets)):
        # the run's salt (None: none) at the very start of the shared system prompt, after the cut
        initial = salt_initial(tuple((role, scaler.cut(text)) for role, text in p.initial), spec.prompt_salt)
        initial = tag_task(initial, task_tag(spec.seed, idx) if spec.fresh_tasks else None)  # no task twice
        script = AgenticScript(
            session_id=f"agentic-s{idx:03d}",
            source=p.name,
            start_offset_s=float(off),
            initial=initial,
            stem=stem,
            branches=branches,
            api=spec.api,
            ignore_eos=spec.ignore_eos,
            temperature=spec.temperature,
        )
        sessions.append(AgenticSession(script, kit))
    return sessions
