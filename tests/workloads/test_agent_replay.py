"""Replaying an agent trace (workloads/agent_replay.py) on the default model's tokenizer: what
each turn sends, when it is due, sub-agents, hash blocks and the run's option path."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.app.core.model import resolve_model
from workloads.base import Reply
from workloads.errors import WorkloadError
from workloads.registry import build_workload
from workloads.salt import salt_text, task_tag
from workloads.stats import simulate

pytestmark = pytest.mark.slow  # needs the prepared default model folder (tokenizer only)
FIX = Path(__file__).resolve().parents[1] / "fixtures" / "agent_traces"


@pytest.fixture(scope="module")
def tok():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(resolve_model(None)))


def _timed(w):
    return [(round(t, 6), r) for t, r in simulate(w.sessions)]


def test_an_otel_export_replays_its_agent_tree_on_the_trace_clock(tok):
    w = build_workload("agentic", tok, trace=str(FIX / "otel.jsonl"), request_rate=float("inf"))
    got = [(t, r.request_id, r.branch_id, r.turn_id, r.max_tokens) for t, r in _timed(w)]
    # planner calls: tool gaps 3.0 and 2.5 s after each reply; the researcher starts 0.5 s after call 0
    assert got == [(0.0, "agentic-s000-t0", 0, 0, 20), (0.5, "agentic-s000-a1-t0", 1, 0, 10),
                   (1.0, "agentic-s000-a1-t1", 1, 1, 12), (3.0, "agentic-s000-t1", 0, 1, 16),
                   (5.5, "agentic-s000-t2", 0, 2, 8)]
    assert w.sessions[0].planned_turns == 5 and w.stats["branching_sessions"] == 1


def test_time_scale_divides_tool_time_and_scale_shrinks_lengths(tok):
    w = build_workload("agentic", tok, trace=str(FIX / "otel.jsonl"), request_rate=float("inf"), time_scale=2.0, scale=0.5)
    got = [(t, r.max_tokens) for t, r in _timed(w)]
    assert got == [(0.0, 10), (0.25, 5), (0.5, 6), (1.5, 8), (2.75, 4)]


def test_each_turn_extends_the_previous_with_the_actual_reply(tok):
    w = build_workload("agentic", tok, trace=str(FIX / "chat_log.jsonl"), request_rate=float("inf"))
    s = w.sessions[0]
    first = s.first_request()
    # the task starts with its session's tag (fresh_tasks: no measurement is served another's task); the system prompt is shared
    assert [m["content"] for m in first.messages] == ["You are a helpful agent.", "[task 0.0]\nList the files in the repository."]
    follow = s.on_complete(first, Reply("<think>hmm</think>I ran ls."))
    nxt = follow[0].request
    assert nxt.messages[:2] == first.messages
    assert nxt.messages[2:] == [{"role": "assistant", "content": "I ran ls."}, {"role": "user", "content": "README.md setup.py src/"}]
    assert follow[0].delay_s == pytest.approx(2.0)
    # c2 is a sub-agent of c1 that started after c1's second call: spawned with it
    sub = s.on_complete(nxt, Reply("ok"))
    assert [f.request.branch_id for f in sub] == [0, 1]
    assert sub[1].request.messages == [{"role": "user", "content": "[task 0.0/1]\nSummarise README.md."}]  # its own tag


def test_a_failed_turn_ends_its_agent_and_the_sub_agents_it_had_not_started(tok):
    w = build_workload("agentic", tok, trace=str(FIX / "otel.jsonl"), request_rate=float("inf"))
    s = w.sessions[0]
    assert s.on_complete(s.first_request(), Reply("", success=False)) == []
    assert s.aborted_turns == 4  # two more planner calls and the researcher's two


def test_hash_ids_become_identical_blocks_so_the_prefix_structure_is_the_traces(tok):
    w = build_workload("agentic", tok, trace=str(FIX / "mooncake.jsonl"), scale=0.25, request_rate=float("inf"))
    by_session: dict[str, list] = {}
    for _, r in simulate(w.sessions):
        assert len(r.messages) == 1  # a hash-id turn is sent whole, as its blocks
        by_session.setdefault(r.session_id, []).append(tok(r.messages[0]["content"], add_special_tokens=False)["input_ids"])
    # every prompt starts with the measurement's tag (fresh_tasks: shared within the measurement, so the
    # sharing the hash ids describe is kept; no other measurement's prompts share it), then the blocks
    tag = tok(salt_text(task_tag(0)), add_special_tokens=False)["input_ids"]
    assert all(c[: len(tag)] == tag for v in by_session.values() for c in v)
    chain = [c[len(tag):] for c in next(v for v in by_session.values() if len(v) == 3)]
    b = 128  # 512 x 0.25
    # [0,1,2] 1100 -> [0,1,4] 1500 -> [0,1,4,5] 2000: blocks 0 and 1 are the same tokens, block 4 too;
    # the last block is the scaled remainder (1100 - 1024) x 0.25 = 19, (1500 - 1024) x 0.25 = 119, ...
    assert [len(c) for c in chain] == [2 * b + 19, 2 * b + 119, 3 * b + 116]
    assert chain[0][: 2 * b] == chain[1][: 2 * b] == chain[2][: 2 * b]
    assert chain[1][2 * b:] == chain[2][2 * b: 2 * b + 119]
    assert chain[0][2 * b:] != chain[1][2 * b: 2 * b + 19]


def test_num_requests_cuts_the_last_session_and_cycles_are_salted_apart(tok):
    w = build_workload("agentic", tok, trace=str(FIX / "otel.jsonl"), num_requests=12, request_rate=float("inf"))
    assert sum(s.planned_turns for s in w.sessions) == 12 and len(w.sessions) == 3
    firsts = [s.first_request().messages[0]["content"] for s in w.sessions]
    assert not firsts[0].startswith("[") and firsts[1].startswith("[c1]\n") and firsts[2].startswith("[c2]\n")


def test_a_bad_trace_line_fails_the_build_with_its_file_and_line(tok, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"session_id": "a", "turns": [{"output_tokens": 3}]}\n{"session_id": 5}\n')
    with pytest.raises(WorkloadError, match=rf"^{bad}:2: "):
        build_workload("agentic", tok, trace=str(bad))
