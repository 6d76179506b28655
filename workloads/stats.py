"""Offered-workload statistics (what the workload asks of an engine, before any engine runs).

Sessions are driven offline with zero service time: each session's first turn at its
``start_offset_s``, each follow-up ``delay_s`` after its parent. Replies are not known
offline: a session that has ``recorded_reply(request)`` (agentic) is fed the trace's
recorded reply, others get ``""``. Statistics:

- ``requests``, ``sessions``, ``turns`` (= requests), ``turns_per_session`` (mean/p50/max), ``branching_sessions``;
- ``input_tokens`` (``prompt_token_ids`` length) and ``output_tokens`` (``max_tokens``):
  mean/p50/p90/max (numpy linear percentiles);
- ``prefix_reuse_ratio``: prompt tokens that repeat a prefix of an earlier request (in
  offered-time order) / all prompt tokens, counted per token — the hit ratio of an
  unbounded, token-granular prefix cache;
- ``offered_rate``: session starts per second of the generated schedule,
  ``(n-1) / (last start - first start)`` (``inf`` when all start together; see
  :func:`schedule_rate`): the requested rate, to float error, for every drawn schedule
  (rescaled to it, :mod:`workloads.arrivals`), the trace's own rate for a trace;
  ``offered_request_rate``: requests / simulated duration.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from workloads.base import RequestSpec, Session


def distribution(values: Sequence[float]) -> dict[str, float]:
    """mean, p50, p90, max of ``values`` (numpy linear percentiles); zeros when empty."""
    if len(values) == 0:
        return {"mean": 0.0, "p50": 0.0, "p90": 0.0, "max": 0.0}
    a = np.asarray(values, dtype=np.float64)
    return {
        "mean": float(a.mean()),
        "p50": float(np.percentile(a, 50)),
        "p90": float(np.percentile(a, 90)),
        "max": float(a.max()),
    }


def simulate(sessions: Sequence[Session]) -> list[tuple[float, RequestSpec]]:
    """All requests of ``sessions`` in offered-time order, with their offered times (s).

    Drives each session with zero service time and recorded replies (see module doc).
    Sessions that have ``clone()`` are cloned first, so the given sessions stay unused.
    """
    heap: list[tuple[float, int, int, RequestSpec]] = []
    live = [s.clone() if hasattr(s, "clone") else s for s in sessions]
    seq = 0
    for i, s in enumerate(live):
        heapq.heappush(heap, (float(s.start_offset_s), seq, i, s.first_request()))
        seq += 1
    out: list[tuple[float, RequestSpec]] = []
    while heap:
        t, _, i, req = heapq.heappop(heap)
        out.append((t, req))
        s = live[i]
        reply = s.recorded_reply(req) if hasattr(s, "recorded_reply") else ""
        for fu in s.on_complete(req, reply, True):
            heapq.heappush(heap, (t + float(fu.delay_s), seq, i, fu.request))
            seq += 1
    return out


def schedule_rate(offsets: Sequence[float], nominal: float | None = None) -> float:
    """Rate (per s) of a start schedule: ``(n-1) / (last - first)``, the formula
    ``harness.metrics`` uses for the achieved rate, so achieved vs offered measures only how
    well the client kept the schedule. A drawn schedule is rescaled so that this equals the
    requested rate (:func:`workloads.arrivals.arrival_offsets`). ``inf`` when all start
    together; ``nominal`` (or inf) when there are fewer than 2 starts."""
    if len(offsets) < 2:
        return nominal if nominal is not None else math.inf
    span = max(offsets) - min(offsets)
    return (len(offsets) - 1) / span if span > 0 else math.inf


def prefix_reuse(prompts: Sequence[Sequence[int]]) -> tuple[int, int]:
    """(reused tokens, total tokens): token i of a prompt is reused when the prompt's first
    i+1 tokens equal the first i+1 tokens of some earlier prompt."""
    seen: set[int] = set()
    reused = total = 0
    for ids in prompts:
        h = 0
        hit = True
        for t in ids:
            h = hash((h, t))
            if hit and h in seen:
                reused += 1
            else:
                hit = False
                seen.add(h)
        total += len(ids)
    return reused, total


def workload_stats(sessions: Sequence[Session], tokenize=None) -> dict[str, Any]:
    """Statistics of the offered workload (keys listed in the module docstring).

    ``tokenize(request) -> list[int]`` is used for requests without ``prompt_token_ids``.
    """
    timed = simulate(sessions)
    reqs = [r for _, r in timed]
    ids = []
    for r in reqs:
        if r.prompt_token_ids is not None:
            ids.append(r.prompt_token_ids)
        elif tokenize is not None:
            ids.append(tokenize(r))
        else:
            ids.append([])
    per_session: dict[str, int] = {}
    branches: dict[str, set] = {}
    for r in reqs:
        key = r.session_id or r.request_id
        per_session[key] = per_session.get(key, 0) + 1
        branches.setdefault(key, set()).add(r.branch_id or 0)
    reused, total = prefix_reuse(ids)
    starts = sorted(float(s.start_offset_s) for s in sessions)
    duration = max((t for t, _ in timed), default=0.0)
    turns = list(per_session.values())
    return {
        "requests": len(reqs),
        "sessions": len(sessions),
        "turns": len(reqs),  # every request is one turn of its session
        "turns_per_session": {
            "mean": float(np.mean(turns)) if turns else 0.0,
            "p50": float(np.percentile(turns, 50)) if turns else 0.0,
            "max": int(max(turns, default=0)),
        },
        "branching_sessions": sum(1 for b in branches.values() if len(b) > 1),
        "input_tokens": distribution([len(i) for i in ids]),
        "output_tokens": distribution([r.max_tokens for r in reqs]),
        "total_input_tokens": total,
        "total_output_tokens": int(sum(r.max_tokens for r in reqs)),
        "prefix_reuse_ratio": (reused / total) if total else 0.0,
        "offered_rate": schedule_rate(starts),
        "offered_request_rate": (len(reqs) / duration) if duration > 0 else math.inf,
        "offered_duration_s": duration,
    }
