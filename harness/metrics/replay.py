"""The replay-fidelity certificate: what an agentic run sent against the sessions it built.

Per statistic, three values: the *trace*'s (``workloads.replay_stats.offered_statistics`` over
every session of the trace once, at the run's scale), the sessions *built* for the measurements
(the same function over each measurement's own sessions: its draw, scaling and truncation, pooled
over the measurements) and what was *sent* (the measured records of those same measurements,
pooled). The judge is sent against built, so the only differences it can show are the
replayer's own (turns dropped, outputs cut short, tool pauses not honoured, tokens lost); built
against trace is the *coverage* (how representative the drawn sessions are of the whole trace: a
ladder's points draw differently weighted samples of it), shown and never judged. Pooling: each
measurement's sessions once on the built side and its records once on the sent side, so both
sides weigh the measurements alike (a session drawn by three points counts three times on both).

- input tokens (the server's prompt tokens, else ours) and output tokens of the successful
  requests: p50, p90, p99 (numpy ``linear``);
- turns per session and sub-agents per session (distinct ``branch_id`` − 1) of every session
  sent (a session is ``(probe, repeat, worker, session_id)``: a ladder point's session is its own);
- tool time (s): per follow-up turn, its ``scheduled_ns`` − the ``end_ns`` of the turn before it
  on its path (the same branch, else the stem: a branch's first turn follows the stem's last);
- the theoretical prefix-cache hit rate (:mod:`workloads.prefix_cache`), infinite and LRU of N
  blocks, of the trace and of the prompts as built (coverage, not judged: the prompts sent are
  not stored, and the input tokens already judge what reached the engine);
- the measured hit rate (``cached_tokens`` / prompt tokens, where the engine reports cached
  tokens), shown beside the built one, not judged (an engine's cache is not the theoretical one).

A measurement stopped early (its SLO had already failed: the records cut in flight have phase
``stopped``) answers only for the sessions it started and did not cut, and a session with a
request the engine failed is on neither side (the failure is the engine's): :func:`fair_sides`.

``deviation`` = sent / built − 1 and ``coverage`` = built / trace − 1 (hit rates: differences, in
points of 1); a statistic is within when ``|deviation| <= tolerance`` (±5 %), else flagged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from results.schema import CertificateRow, EngineReplay, RequestRecord
from results.schema.records import STOPPED_PHASE
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


def fair_sides(records: Sequence[RequestRecord], sessions: Sequence[Any]) -> tuple[list[RequestRecord], list[Any], int, int]:
    """One measurement's two sides from every record it stored (``records``: measured and
    stopped phases) and the ``sessions`` built for it: the measured records and the built
    sessions the replayer answers for, how many sessions an early stop cut in flight, and how
    many sessions had a request the engine failed. A measurement that was not stopped answers
    for every session built (one it never started is the replayer's fault); a stopped one for the
    sessions it started, less those it cut. A session with a failed request (the engine refused
    a prompt longer than its context, or dropped the connection) is on neither side: its later
    turns cannot be sent without the failed one's reply, and the failure is the engine's, which
    the reliability gate judges, not the replay's; such a measurement, whose SLO watch may have
    stopped it on those errors before every session started, answers for the sessions it
    started, as a stopped one does."""
    cut = {r.session_id for r in records if r.phase == STOPPED_PHASE}
    failed = {r.session_id for r in records if r.phase == "measured" and not r.success and r.session_id not in cut}
    gone = cut | failed
    sent = [r for r in records if r.phase == "measured" and r.session_id not in gone]
    if gone:  # stopped, or its SLO failed on errors: its watch may have stopped it with sessions never started
        started = {r.session_id for r in sent}
        sessions = [s for s in sessions if s.session_id in started]
    return sent, list(sessions), len(cut), len(failed)


def _row(statistic: str, unit: str, trace: float | None, built: float | None, sent: float | None,
         tolerance: float, absolute: bool = False, judged: bool = True) -> CertificateRow:
    def diff(a: float | None, b: float | None) -> float | None:
        if a is None or b is None:
            return None
        return a - b if absolute else ((a / b - 1.0) if b else (0.0 if a == 0 else None))

    dev = diff(sent, built)
    within = (dev is not None and abs(dev) <= tolerance + 1e-12) if judged and sent is not None and built is not None else None
    return CertificateRow(statistic=statistic, unit=unit, trace=trace, built=built, sent=sent, deviation=dev,
                          within=within, coverage=diff(built, trace))


def _pct(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if len(values) else None


def certificate_rows(trace: dict[str, Any], built: dict[str, Any], sent: dict[str, Any], measurements: int = 1,
                     left_out: int = 0, tolerance: float = REPLAY_TOLERANCE, failed: int = 0) -> EngineReplay:
    """One engine's certificate: ``trace`` and ``built`` from
    :func:`workloads.replay_stats.offered_statistics` (the whole trace; the measurements' own
    sessions, pooled), ``sent`` from :func:`sent_statistics` over the same ``measurements``;
    ``left_out``: sessions cut in flight by an early stop, ``failed``: sessions with a request
    the engine failed, both on neither side (:func:`fair_sides`)."""
    rows = [_row(f"{name} p{q}", unit, _pct(trace[name], q), _pct(built[name], q), _pct(sent[name], q), tolerance)
            for name, unit in DISTRIBUTIONS for q in PERCENTILES]
    for label, key in (("infinite", "hit_rate_infinite"), ("LRU", "hit_rate_lru")):
        rows.append(_row(f"prefix hit rate, {label} cache", "share", trace[key], built[key], None, tolerance,
                         absolute=True, judged=False))
    rows.append(_row("measured hit rate (engine's cached tokens)", "share", None, built["hit_rate_lru"],
                     sent["measured_hit_rate"], tolerance, absolute=True, judged=False))
    return EngineReplay(requests=sent["requests"], sessions=sent["sessions"], measurements=measurements,
                        left_out_sessions=left_out, failed_sessions=failed, rows=rows, flagged=[r.statistic for r in rows if r.within is False])
