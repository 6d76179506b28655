"""What an agentic workload offers, per statistic, for the replay-fidelity certificate
(``harness.metrics.replay``): the same quantities the certificate reads from the records sent.

:func:`offered_statistics` drives the sessions offline (zero service time, the trace's recorded
replies, :func:`workloads.stats.simulate`'s rules) and returns per request the input tokens
(``prompt_token_ids``) and output tokens (``max_tokens``), per session its turns and
sub-agents (distinct ``branch_id`` − 1: a branch of the shipped set, a sub-agent of a trace),
per follow-up turn its tool time (``FollowUp.delay_s``, s; a sub-agent's first turn is not a
tool pause and is left out), and the theoretical prefix-cache hit rates of the prompts in
offered order (:mod:`workloads.prefix_cache`), infinite and LRU of ``cache_blocks`` blocks.
:func:`pooled_statistics` pools several measurements' (a ladder's points, one after another).

:func:`trace_sessions` are the sessions the certificate's *trace* column is (what its coverage
holds the sessions built against, never judged): every session of the trace (every shipped
trajectory) once, at the run's scale and time scale, unsalted.
"""

from __future__ import annotations

import heapq
from typing import Any

from workloads.base import Session
from workloads.prefix_cache import hit_rate
from workloads.tokens import TokenKit


def offered_statistics(sessions: list[Session], block_tokens: int, cache_blocks: int) -> dict[str, Any]:
    """Per-statistic values of ``sessions`` (module docstring): lists ``input_tokens``,
    ``output_tokens``, ``turns_per_session``, ``sub_agents_per_session``, ``tool_s``; floats
    ``hit_rate_infinite``, ``hit_rate_lru``; ``prompts`` (the token ids, in offered order)."""
    heap: list[tuple[float, int, int, Any]] = []
    live = [s.clone() if hasattr(s, "clone") else s for s in sessions]
    for i, s in enumerate(live):
        heapq.heappush(heap, (float(s.start_offset_s), i, i, s.first_request()))
    seq, prompts, out_tokens, tools = len(live), [], [], []
    turns: dict[str, int] = {}
    branches: dict[str, set[int]] = {}
    while heap:
        t, _, i, req = heapq.heappop(heap)
        prompts.append(req.prompt_token_ids or [])
        out_tokens.append(req.max_tokens)
        key = req.session_id or req.request_id
        turns[key] = turns.get(key, 0) + 1
        branches.setdefault(key, set()).add(req.branch_id or 0)
        s = live[i]
        reply = s.recorded_reply(req) if hasattr(s, "recorded_reply") else ""
        for fu in s.on_complete(req, reply, True):
            if (fu.request.turn_id or 0) > 0:
                tools.append(float(fu.delay_s))
            heapq.heappush(heap, (t + float(fu.delay_s), seq, i, fu.request))
            seq += 1
    return {"input_tokens": [len(p) for p in prompts], "output_tokens": out_tokens,
            "turns_per_session": list(turns.values()), "sub_agents_per_session": [len(b) - 1 for b in branches.values()],
            "tool_s": tools, "hit_rate_infinite": hit_rate(prompts, block_tokens),
            "hit_rate_lru": hit_rate(prompts, block_tokens, cache_blocks), "prompts": prompts}


def pooled_statistics(parts: list[dict[str, Any]], block_tokens: int, cache_blocks: int) -> dict[str, Any]:
    """Several :func:`offered_statistics` pooled: every list concatenated (each measurement's
    requests and sessions once), the hit rates those of every prompt in order, measurement after
    measurement (one cache across them, as the engine keeps its own across a ladder's points)."""
    keys = ("input_tokens", "output_tokens", "turns_per_session", "sub_agents_per_session", "tool_s", "prompts")
    out: dict[str, Any] = {k: [v for p in parts for v in p[k]] for k in keys}
    out["hit_rate_infinite"] = hit_rate(out["prompts"], block_tokens)
    out["hit_rate_lru"] = hit_rate(out["prompts"], block_tokens, cache_blocks)
    return out


def trace_sessions(spec: Any, kit: TokenKit) -> list[Session]:
    """Every session of ``spec``'s trace (or of the shipped trajectories) once, unsalted, all
    at once: the whole trace the certificate's coverage holds the measurements' sessions against."""
    from workloads.agentic import build_agentic_sessions, load_parsed_trajectories
    from workloads.agent_replay import build_replay_sessions
    from workloads.trace_import import import_trace

    update: dict[str, Any] = {"num_requests": None, "prompt_salt": None, "request_rate": float("inf")}
    if spec.trace is not None:
        update["num_sessions"] = len(import_trace(spec.trace, spec.trace_format).roots())
    else:
        update["num_sessions"] = len(load_parsed_trajectories(spec))
    full = spec.model_copy(update=update)
    full.__pydantic_fields_set__.add("num_sessions")
    return build_replay_sessions(full, kit) if spec.trace is not None else build_agentic_sessions(full, kit)
