"""The replay-fidelity certificate: what an agentic run sent against the trace it replays.

Per statistic, the trace's value (``workloads.replay_stats.offered_statistics`` over every
session of the trace once, at the run's scale: ``trace``) against the value over the engine's
measured records (``sent``):

- input tokens (the server's prompt tokens, else ours) and output tokens of the successful
  requests: p50, p90, p99 (numpy ``linear``);
- turns per session and sub-agents per session (distinct ``branch_id`` − 1) of every session
  sent (a session is ``(probe, repeat, worker, session_id)``: a ladder point's session is its own);
- tool time (s): per follow-up turn, its ``scheduled_ns`` − the ``end_ns`` of the turn before it
  on its path (the same branch, else the stem: a branch's first turn follows the stem's last);
- the theoretical prefix-cache hit rate (:mod:`workloads.prefix_cache`), infinite and LRU of N
  blocks: the trace's against the prompts the run built (its own sessions, offline);
- the measured hit rate (``cached_tokens`` / prompt tokens, where the engine reports cached
  tokens), shown beside them, not judged (an engine's cache is not the theoretical one).

``deviation`` = sent / trace − 1 (hit rates: sent − trace in points of 1); a statistic is
within when ``|deviation| <= tolerance`` (±5 %), else flagged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from results.schema import CertificateRow, EngineReplay, RequestRecord
from results.schema.replay import REPLAY_TOLERANCE

PERCENTILES = (50, 90, 99)
DISTRIBUTIONS = (("input_tokens", "tokens"), ("output_tokens", "tokens"), ("turns_per_session", "turns"),
                 ("tool_s", "s"), ("sub_agents_per_session", "sub-agents"))


def sent_statistics(records: Sequence[RequestRecord]) -> dict[str, Any]:
    """The certificate's statistics over measured ``records`` (module docstring): lists
    ``input_tokens``, ``output_tokens``, ``turns_per_session``, ``sub_agents_per_session``,
    ``tool_s``; ``measured_hit_rate`` (None when no record reports cached tokens), ``requests``
    and ``sessions``."""
    ok = [r for r in records if r.success]
    groups: dict[tuple, list[RequestRecord]] = {}
    for r in records:
        groups.setdefault((r.probe, r.repeat, r.worker, r.session_id or r.request_id), []).append(r)
    tools = []
    for recs in groups.values():
        at = {(r.branch_id or 0, r.turn_id or 0): r for r in recs}
        for r in recs:
            turn = r.turn_id or 0
            if turn == 0:
                continue
            prev = at.get((r.branch_id or 0, turn - 1)) or at.get((0, turn - 1))
            if prev is not None and prev.end_ns is not None:
                tools.append((r.scheduled_ns - prev.end_ns) / 1e9)
    cached = [(r.cached_tokens_server, r.input_tokens) for r in ok if r.cached_tokens_server is not None and r.input_tokens]
    return {
        "input_tokens": [r.input_tokens for r in ok if r.input_tokens is not None],
        "output_tokens": [r.output_tokens for r in ok if r.output_tokens is not None],
        "turns_per_session": [len(v) for v in groups.values()],
        "sub_agents_per_session": [len({r.branch_id or 0 for r in v}) - 1 for v in groups.values()],
        "tool_s": tools,
        "measured_hit_rate": sum(c for c, _ in cached) / sum(n for _, n in cached) if cached else None,
        "requests": len(records), "sessions": len(groups),
    }


def _row(statistic: str, unit: str, trace: float | None, sent: float | None, tolerance: float,
         absolute: bool = False, judged: bool = True) -> CertificateRow:
    if trace is None or sent is None:
        return CertificateRow(statistic=statistic, unit=unit, trace=trace, sent=sent)
    if absolute:
        dev: float | None = sent - trace
    else:
        dev = (sent / trace - 1.0) if trace else (0.0 if sent == 0 else None)
    within = (dev is not None and abs(dev) <= tolerance + 1e-12) if judged else None
    return CertificateRow(statistic=statistic, unit=unit, trace=trace, sent=sent, deviation=dev, within=within)


def _pct(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if len(values) else None


def certificate_rows(trace: dict[str, Any], built: dict[str, Any], sent: dict[str, Any],
                     tolerance: float = REPLAY_TOLERANCE) -> EngineReplay:
    """One engine's certificate: ``trace`` and ``built`` from
    :func:`workloads.replay_stats.offered_statistics` (the whole trace; the run's own
    sessions), ``sent`` from :func:`sent_statistics`."""
    rows = [_row(f"{name} p{q}", unit, _pct(trace[name], q), _pct(sent[name], q), tolerance)
            for name, unit in DISTRIBUTIONS for q in PERCENTILES]
    rows.append(_row("prefix hit rate, infinite cache", "share", trace["hit_rate_infinite"], built["hit_rate_infinite"],
                     tolerance, absolute=True))
    rows.append(_row("prefix hit rate, LRU cache", "share", trace["hit_rate_lru"], built["hit_rate_lru"], tolerance,
                     absolute=True))
    rows.append(_row("measured hit rate (engine's cached tokens)", "share", built["hit_rate_lru"],
                     sent["measured_hit_rate"], tolerance, absolute=True, judged=False))
    return EngineReplay(requests=sent["requests"], sessions=sent["sessions"], rows=rows,
                        flagged=[r.statistic for r in rows if r.within is False])
