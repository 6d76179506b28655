"""Turns a failed turn stopped are counted as aborted, per repeat and pooled."""

from __future__ import annotations

from harness.metrics import compute_metrics
from harness.metrics.repeats import pooled_metrics
from results.schema import RequestRecord

S = 1_000_000_000


def turn(session: str, k: int, ok: bool, repeat: int = 0) -> RequestRecord:
    t = (10 + k) * S
    return RequestRecord(request_id=f"{session}-{k}-{repeat}", engine="e", workload="agentic", session_id=session,
                         turn_id=k, scheduled_ns=t, send_ns=t, first_token_ns=t + S // 10 if ok else None,
                         last_token_ns=t + S // 5 if ok else None, end_ns=t + S // 5,
                         chunk_times_ns=[t + S // 10, t + S // 5] if ok else [], output_tokens_server=2 if ok else None,
                         success=ok, repeat=repeat, error_class=None if ok else "http_500")


def test_a_session_stopped_by_a_failure_counts_its_unsent_turns() -> None:
    planned = {"a": 4, "b": 3}
    # a: turn 0 ok, turn 1 failed -> turns 2 and 3 never sent; b: all 3 turns ok
    records = [turn("a", 0, True), turn("a", 1, False), turn("b", 0, True), turn("b", 1, True), turn("b", 2, True)]
    m = compute_metrics(records, planned_turns=planned)
    assert m.sessions is not None
    assert (m.sessions.sessions, m.sessions.completed, m.sessions.aborted_turns) == (2, 1, 2)
    assert compute_metrics(records).sessions.aborted_turns is None  # planned turns unknown: not counted
    second = [turn("a", 0, False, repeat=1), *[turn("b", k, True, repeat=1) for k in range(3)]]
    repeats = [m, compute_metrics(second, planned_turns=planned)]
    assert repeats[1].sessions.aborted_turns == 3
    pooled = pooled_metrics(repeats, records + second)
    assert pooled.sessions.aborted_turns == 5  # per repeat, added up (session ids repeat across repeats)
