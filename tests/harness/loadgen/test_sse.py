"""SSE parser and OpenAI chunk interpretation: every case the client must survive."""

from __future__ import annotations

import json

from harness.loadgen.sse import SSEParser, interpret


def feed_all(pieces: list[bytes]) -> list[tuple[str, int]]:
    p = SSEParser()
    out = []
    for t, piece in enumerate(pieces, start=1):
        out += [(e.data, e.t_ns) for e in p.feed(piece, t)]
    out += [(e.data, e.t_ns) for e in p.close(len(pieces) + 1)]
    return out


def test_data_with_and_without_space():
    assert feed_all([b"data: a\n\ndata:b\n\n"]) == [("a", 1), ("b", 1)]


def test_comments_and_keepalives_are_ignored():
    assert feed_all([b": keep-alive\n\n", b":ping\ndata: x\n\n"]) == [("x", 2)]


def test_event_split_across_reads_is_stamped_with_completing_read():
    assert feed_all([b"da", b"ta: hel", b"lo\n", b"\n"]) == [("hello", 4)]


def test_several_events_in_one_read():
    assert feed_all([b"data: 1\n\ndata: 2\n\ndata: 3\n\n"]) == [("1", 1), ("2", 1), ("3", 1)]


def test_multibyte_utf8_split_across_reads():
    raw = "data: héllo 世界\n\n".encode()
    cut = raw.index("世".encode()) + 1  # inside the 3-byte character
    assert feed_all([raw[:cut], raw[cut:]]) == [("héllo 世界", 2)]


def test_line_over_one_mebibyte():
    big = "y" * (1 << 20) + "z" * 10
    raw = f"data: {big}\n\n".encode()
    pieces = [raw[i : i + 65536] for i in range(0, len(raw), 65536)]
    out = feed_all(pieces)
    assert len(out) == 1 and out[0][0] == big and out[0][1] == len(pieces)


def test_crlf_and_cr_line_endings():
    assert feed_all([b"data: a\r\n\r\ndata: b\r\rdata: c\n\n"]) == [("a", 1), ("b", 1), ("c", 1)]


def test_crlf_split_between_reads_is_one_line_end():
    # "\r" ends read 1, "\n" starts read 2: that is ONE line terminator, then "\r\n" dispatches
    assert feed_all([b"data: a\r", b"\n\r\n"]) == [("a", 2)]


def test_multiline_data_joined_with_newline():
    assert feed_all([b"data: a\ndata: b\n\n"]) == [("a\nb", 1)]


def test_missing_final_blank_line_dispatched_at_eof():
    assert feed_all([b"data: a\n\ndata: last"]) == [("a", 1), ("last", 2)]


def chunk(delta=None, text=None, finish=None, usage=None, choices=True):
    obj: dict = {"id": "x", "choices": []}
    if choices:
        c: dict = {"index": 0, "finish_reason": finish}
        if delta is not None:
            c["delta"] = delta
        if text is not None:
            c["text"] = text
        obj["choices"] = [c]
    if usage is not None:
        obj["usage"] = usage
    return json.dumps(obj)


def test_role_only_and_empty_chunks_are_not_token_bearing():
    assert not interpret(chunk(delta={"role": "assistant"})).token_bearing
    assert not interpret(chunk(delta={"content": ""})).token_bearing
    assert not interpret(chunk(text="")).token_bearing


def test_usage_only_chunk():
    info = interpret(chunk(usage={"prompt_tokens": 5, "completion_tokens": 7}, choices=False))
    assert not info.token_bearing and info.usage == {"prompt_tokens": 5, "completion_tokens": 7}


def test_reasoning_and_tool_call_deltas_carry_text():
    assert interpret(chunk(delta={"reasoning_content": "think"})).text == "think"
    assert interpret(chunk(delta={"reasoning": "hmm"})).text == "hmm"
    tool = {"tool_calls": [{"index": 0, "function": {"name": "ls", "arguments": '{"a":1}'}}]}
    info = interpret(chunk(delta=tool))
    assert info.token_bearing and info.text == 'ls{"a":1}'


def test_error_event_and_done():
    assert interpret('{"error": {"message": "boom", "code": 500}}').error == "boom"
    assert interpret("[DONE]").done
    assert interpret("not json").error.startswith("malformed stream chunk")


def test_finish_reason_is_read_from_completion_and_chat_chunks():
    assert interpret(chunk(text="", finish="length")).finish_reason == "length"
    assert interpret(chunk(delta={}, finish="stop")).finish_reason == "stop"


def test_invalid_utf8_is_kept_as_a_decode_error_not_silently_replaced():
    p = SSEParser()
    out = p.feed(b"data: ok\n\ndata: a\xffb\n\n", 1) + p.close(2)
    assert [e.data for e in out] == ["ok", "a\ufffdb"]  # timing of the rest is kept
    assert p.decode_error == ("invalid UTF-8 in stream line 3: 'utf-8' codec can't decode byte 0xff "
                              "in position 7: invalid start byte")
    clean = SSEParser()
    clean.feed("data: héllo\n\n".encode(), 1)
    assert clean.decode_error is None


def test_answer_text_is_told_apart_from_reasoning():
    r = interpret(chunk(delta={"reasoning_content": "think"}))
    assert r.token_bearing and not r.answer_bearing and r.reasoning == "think"
    a = interpret(chunk(delta={"content": "Paris"}))
    assert a.answer_bearing and a.reasoning == "" and a.text == "Paris"
    both = interpret(chunk(delta={"reasoning": "hm", "content": "ok"}))
    assert both.answer_bearing and both.reasoning == "hm" and both.answer == "ok" and both.text == "hmok"
    tool = interpret(chunk(delta={"tool_calls": [{"index": 0, "function": {"name": "ls"}}]}))
    assert tool.answer_bearing and tool.text == "ls"
    assert interpret(chunk(text="x")).answer_bearing and not interpret(chunk(text="")).answer_bearing
