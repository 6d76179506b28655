"""Agent sessions on a scripted engine whose truth is known: jobs, tool time and a prefix cache.

An :class:`AgentScript` is the job every session does: ``turns`` requests, turn ``t``'s prompt
``first_prompt + t × growth`` tokens (the previous prompt, the reply and the tool's result: each
prompt extends the one before it), ``output_tokens`` each, ``tool_ms`` of tool time before each
follow-up turn; ``shared_prefix`` leading tokens are the same in every session (a system prompt),
the rest are the session's own (token ids unique to it).

:func:`simulate_sessions` replays ``sessions`` of them from ``concurrency`` closed-loop agents
(an agent starts its next session when its last one ends; a follow-up turn is sent ``tool_ms``
after its previous turn ended) on a :class:`~harness.loadgen.simulated.SimEngine`: FIFO in its
``slots``, ``prefill_ms`` plus ``prefill_ms_per_token`` per prompt token not found in its
prefix cache to the first token, then ``tpot_at(concurrency)`` ms per further token. Its prefix
cache, when it has one (``cache_blocks``), is an LRU of that many blocks of ``block_tokens``
tokens, looked up as vLLM's automatic prefix caching does (a prompt's leading full blocks found,
each keyed by the whole prefix up to its end; then every full block of the prompt touched, the
least recently used evicted), in the order the engine starts prompts, and reported per request
as vLLM reports it (``usage.prompt_tokens_details.cached_tokens``: the record's
``cached_tokens_server``). Only prompts are cached (a reply's own blocks are not), as
:mod:`workloads.prefix_cache` assumes: this engine is the cache that theory describes, written
apart from it so the accounting from records can be checked against it.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from results.schema import RequestRecord

from .simulated import NS_PER_MS, SimEngine

SESSION_TOKENS = 1_000_000  # token ids of session i's own text start at (i + 1) × this; the shared prefix's are below


@dataclass(frozen=True)
class AgentScript:
    """The job each session does (module docstring); tokens and ms."""

    turns: int = 4
    first_prompt: int = 64
    growth: int = 64
    output_tokens: int = 16
    tool_ms: float = 500.0
    shared_prefix: int = 0

    def prompt(self, session: int, turn: int) -> list[int]:
        """Turn ``turn``'s prompt token ids in session ``session`` (the shared prefix, then its own)."""
        n = self.first_prompt + turn * self.growth
        shared = min(self.shared_prefix, n)
        return list(range(shared)) + [(session + 1) * SESSION_TOKENS + k for k in range(n - shared)]


class PrefixLRU:
    """A prefix cache of ``blocks`` blocks of ``block_tokens`` tokens, least recently used first
    out (module docstring). :meth:`serve` returns a prompt's cached tokens."""

    def __init__(self, blocks: int, block_tokens: int) -> None:
        if blocks < 1 or block_tokens < 1:
            raise ValueError(f"blocks and block_tokens must be >= 1, got {blocks}, {block_tokens}")
        self.blocks, self.block_tokens = blocks, block_tokens
        self.lru: OrderedDict[tuple[int, ...], None] = OrderedDict()

    def serve(self, prompt: list[int]) -> int:
        keys = [tuple(prompt[:(k + 1) * self.block_tokens]) for k in range(len(prompt) // self.block_tokens)]
        found = 0
        while found < len(keys) and keys[found] in self.lru:
            found += 1
        for key in keys:
            self.lru[key] = None
            self.lru.move_to_end(key)
        while len(self.lru) > self.blocks:
            self.lru.popitem(last=False)
        return found * self.block_tokens


def simulate_sessions(engine: SimEngine, script: AgentScript, concurrency: int, sessions: int, seed: int = 0,
                      name: str = "sim") -> tuple[list[RequestRecord], float, list[list[int]]]:
    """``sessions`` sessions of ``script`` from ``concurrency`` closed-loop agents on ``engine``
    (module docstring): ``(records, duration in s, the prompts in the order the engine started
    them)``; records carry ``session_id`` (``s<i>``), ``turn_id``, and the prompt and cached token
    counts the engine reported (cached None without a cache). Raises ValueError for
    ``concurrency < 1``."""
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    rng = np.random.default_rng(seed)
    cache = PrefixLRU(engine.cache_blocks, engine.block_tokens) if engine.cache_blocks is not None else None
    free = [0.0] * engine.slots
    sends: list[tuple[float, int, int, int]] = []  # (send ms, tick, session, turn)
    started = min(concurrency, sessions)
    for i in range(started):
        heapq.heappush(sends, (0.0, i, i, 0))
    tick, next_session, tpot = started, started, engine.tpot_at(concurrency)  # heap order; the next job to start
    records: list[RequestRecord] = []
    prompts: list[list[int]] = []
    while sends:
        send, _, session, turn = heapq.heappop(sends)
        prompt = script.prompt(session, turn)
        start = max(send, heapq.heappop(free))
        cached = cache.serve(prompt) if cache is not None else None
        prompts.append(prompt)
        factor = float(rng.lognormal(0.0, engine.jitter)) if engine.jitter else 1.0
        first = start + (engine.prefill_ms + engine.prefill_ms_per_token * (len(prompt) - (cached or 0))) * factor
        chunks = [first + k * tpot * factor for k in range(script.output_tokens)]
        heapq.heappush(free, chunks[-1])
        records.append(RequestRecord(
            request_id=f"{name}-{session}-{turn}", engine=engine.name, workload="agentic", session_id=f"s{session}",
            turn_id=turn, scheduled_ns=int(send * NS_PER_MS), send_ns=int(send * NS_PER_MS),
            first_token_ns=int(first * NS_PER_MS), last_token_ns=int(chunks[-1] * NS_PER_MS),
            end_ns=int(chunks[-1] * NS_PER_MS), chunk_times_ns=[int(c * NS_PER_MS) for c in chunks],
            output_tokens_server=script.output_tokens, input_tokens_server=len(prompt), cached_tokens_server=cached,
            max_tokens=script.output_tokens, success=True, finish_reason="length"))
        if turn + 1 < script.turns:
            heapq.heappush(sends, (chunks[-1] + script.tool_ms, tick, session, turn + 1))
        elif next_session < sessions:  # the agent starts its next job
            heapq.heappush(sends, (chunks[-1], tick, next_session, 0))
            next_session += 1
        tick += 1
    first_send = min(r.send_ns or 0 for r in records)
    last_end = max(r.end_ns or 0 for r in records)
    return records, (last_end - first_send) / 1e9, prompts
