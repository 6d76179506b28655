"""The open agent-trace format and its importers (workloads/agent_trace.py, workloads/trace_import.py):
each importer fed a small fixture (tests/fixtures/agent_traces/) gives the sessions, turns,
sub-agents and tool times the file says; a malformed line of each format is one error naming
file:line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from workloads.agent_trace import load_agent_trace, spawn_turn, tool_times
from workloads.errors import WorkloadError
from workloads.trace_import import detect_format, import_trace, new_messages

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "agent_traces"


def _shape(trace):
    return [(s.session_id, s.parent_id, len(s.turns)) for s in trace.sessions]


def test_the_open_format_reads_session_lines_and_request_lines():
    t = import_trace(str(FIX / "agent.jsonl"))
    assert _shape(t) == [("fix-bug", None, 3), ("fix-bug/search", "fix-bug", 2), ("lengths", None, 3)]
    assert t.block_tokens == 512 and t.content == "mixed"
    fix, search, lengths = t.sessions
    assert tool_times(fix.turns) == [0.0, 1.5, 4.0]
    # request lines: turn 1's tool time is its timestamp - turn 0's end; turn 2 says tool_s
    assert tool_times(lengths.turns) == [0.0, 3.0, 2.0]
    assert lengths.start_s == 10.0 and spawn_turn(fix, search) == 0
    assert [m.role for m in fix.turns[0].messages] == ["system", "user"]


def test_mooncake_rows_are_chained_into_sessions_by_their_hash_prefixes():
    t = import_trace(str(FIX / "mooncake.jsonl"))
    # rows 0, 2, 4 extend each other's full blocks ([0,1,...]); rows 1 and 3 share block 0 only
    assert [[tt.input_tokens for tt in s.turns] for s in t.sessions] == [[1100, 1500, 2000], [700], [900]]
    a = t.sessions[0]
    assert [tt.hash_ids for tt in a.turns] == [[0, 1, 2], [0, 1, 4], [0, 1, 4, 5]]
    assert tool_times(a.turns) == [0.0, 3.0, 4.0]  # timestamp gaps (ms -> s)
    assert t.content == "synthetic"


def test_otel_genai_spans_give_agents_sub_agents_and_tool_gaps():
    t = import_trace(str(FIX / "otel.jsonl"))
    assert _shape(t) == [("a1", None, 3), ("a2", "a1", 2)]
    planner, researcher = t.sessions
    assert [tt.output_tokens for tt in planner.turns] == [20, 16, 8]
    assert [tt.input_tokens for tt in researcher.turns] == [30, 50]
    # tool time = this call's start - the previous call's end
    assert tool_times(planner.turns) == pytest.approx([0.0, 3.0, 2.5])
    assert tool_times(researcher.turns) == pytest.approx([0.0, 0.5])
    assert spawn_turn(planner, researcher) == 0  # it started at 2.5 s, after call 0 (sent at 0 s), before call 1
    assert [m.content for m in planner.turns[0].messages][1] == "Add a --verbose flag to the CLI."
    assert planner.turns[0].reply == "I will ask a researcher where the CLI is parsed."


def test_a_chat_completions_log_gives_one_session_per_conversation():
    t = import_trace(str(FIX / "chat_log.jsonl"))
    assert _shape(t) == [("c1", None, 3), ("c2", "c1", 1)]
    c1 = t.sessions[0]
    # each request appends what follows its last assistant message
    assert [[m.content for m in tt.messages] for tt in c1.turns] == [
        ["You are a helpful agent.", "List the files in the repository."], ["README.md setup.py src/"],
        ["Now open README.md."]]
    assert tool_times(c1.turns) == pytest.approx([0.0, 2.0, 6.2])  # 103 - 101, 110 - 103.8
    assert [tt.output_tokens for tt in c1.turns] == [6, 6, 5]


def test_swe_agent_trajectories_keep_their_execution_times():
    t = import_trace("swe-agent")
    assert len(t.sessions) == 22 and t.content == "real"
    s = t.sessions[0]
    assert s.turns[0].messages and s.turns[0].reply
    assert all(tt.tool_s is None or tt.tool_s >= 0 for tt in s.turns)
    assert any(tt.tool_s for ss in t.sessions for tt in ss.turns[1:])


def test_formats_are_detected_from_the_first_line():
    assert [detect_format(FIX / f) for f in ("agent.jsonl", "mooncake.jsonl", "otel.jsonl", "chat_log.jsonl")] == [
        "agent", "mooncake", "otel", "chat-log"]


def test_new_messages_are_those_after_the_last_reply():
    msgs = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "tool", "content": "c"}]
    assert new_messages(msgs) == [{"role": "tool", "content": "c"}]
    assert new_messages(msgs[:1]) == msgs[:1]


def _break(src: Path, dst: Path, line: int, text: str) -> Path:
    lines = src.read_text().splitlines()
    lines[line - 1] = text
    dst.write_text("\n".join(lines) + "\n")
    return dst


OTEL_NO_USAGE = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [{
    "traceId": "t", "spanId": "s9", "startTimeUnixNano": "1", "endTimeUnixNano": "2",
    "attributes": [{"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}}]}]}]}]})

BAD = {  # format: (fixture, line broken, text, what the message says)
    "agent": ("agent.jsonl", 3, '{"session_id": "x", "turns": [{"tool_s": 1}]}', "needs output_tokens or reply"),
    "agent-json": ("agent.jsonl", 4, '{"session_id": "lengths", "turn": 0,', "not valid JSON"),
    "mooncake": ("mooncake.jsonl", 2, '{"timestamp": 500, "input_length": 700, "output_length": 50, "hash_ids": [0]}',
                 "hash_ids has 1 entries"),
    "otel": ("otel.jsonl", 2, OTEL_NO_USAGE, "LLM span 's9'"),
    "chat-log": ("chat_log.jsonl", 3, '{"conversation_id": "c2", "timestamp": 1}', "not a chat-completions log line"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_malformed_line_is_one_error_naming_file_and_line(case, tmp_path):
    name, line, text, says = BAD[case]
    bad = _break(FIX / name, tmp_path / name, line, text)
    with pytest.raises(WorkloadError) as err:
        import_trace(str(bad))
    msg = str(err.value)
    assert msg.startswith(f"{bad}:{line}: ") and says in msg and "\n" not in msg


def test_a_malformed_trajectory_names_its_line(tmp_path):
    bad = tmp_path / "broken.traj"
    bad.write_text('{"history": [\n  {"role": "user", "content": "x"},\n  oops\n]}\n')
    with pytest.raises(WorkloadError, match=rf"^{bad}:3: not valid JSON"):
        import_trace(str(bad))


def test_the_open_format_refuses_unknown_parents_and_duplicate_ids(tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_text('{"session_id": "a", "turns": [{"output_tokens": 3}]}\n'
                 '{"session_id": "b", "parent_id": "zz", "turns": [{"output_tokens": 3}]}\n')
    with pytest.raises(WorkloadError, match=r"t.jsonl:2: parent_id 'zz' is not a session"):
        load_agent_trace(f)
    f.write_text('{"session_id": "a", "turns": [{"output_tokens": 3}]}\n{"session_id": "a", "turns": [{"output_tokens": 3}]}\n')
    with pytest.raises(WorkloadError, match=r"t.jsonl:2: session_id 'a' appears twice"):
        load_agent_trace(f)
