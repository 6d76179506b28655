"""Timing-exact Server-Sent Events parsing for OpenAI-compatible streams.

Two layers, both ours because they are part of what we measure:

1. :class:`SSEParser` turns raw bytes, fed read by read, into :class:`SSEEvent` objects, each
   stamped with the ``perf_counter_ns`` of the read that *completed* it. It follows the WHATWG
   SSE event-stream rules that matter here: lines end in CRLF, LF or CR (a CR at the end of a
   read may be followed by the LF in the next); ``:`` lines are comments (keep-alives);
   ``data:`` may or may not be followed by one space; several ``data`` lines of one event are
   joined with ``\\n``; a blank line dispatches the event; an event still pending at EOF is
   dispatched by :meth:`SSEParser.close`. Bytes are decoded per complete line, so a
   multi-byte UTF-8 character split across reads is never corrupted (LF/CR never occur inside
   a UTF-8 sequence). Invalid UTF-8 is not silently replaced: the first decoding error is kept
   in :attr:`SSEParser.decode_error` (the client fails the request with it; the line itself is
   still parsed with U+FFFD so the rest of the stream keeps its timing). Lines have no length
   limit (a 1 MiB line is fine) and scanning is linear.

2. :func:`interpret` reads one event's ``data`` as an OpenAI chunk (``/v1/completions`` or
   ``/v1/chat/completions``) and says what it carries: generated text (content, reasoning
   content, tool-call deltas), finish reason, usage, an in-stream error, or ``[DONE]``; it
   tells answer text (content, completions text, tool calls) from reasoning text
   (``reasoning_content`` / ``reasoning``), for the time to first answer token.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class SSEEvent:
    """One dispatched SSE event. ``t_ns``: ``perf_counter_ns`` of the read that completed it."""

    data: str
    t_ns: int
    event: str | None = None


class SSEParser:
    """Incremental SSE parser. Feed every read with its arrival time; collect events.

    Example::

        p = SSEParser()
        events = p.feed(b"data: {...}\\n\\n", t_ns)
        events += p.close(t_eof_ns)
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self._scan = 0  # bytes of _buf already known to hold no line terminator
        self._skip_lf = False  # previous read ended in CR: a leading LF belongs to it
        self._data: list[str] = []
        self._event: str | None = None
        self._has_field = False
        self._lines = 0  # complete lines decoded so far (named in a decoding error)
        self.decode_error: str | None = None
        """The first invalid-UTF-8 line's error, e.g. ``"invalid UTF-8 in stream line 3:
        'utf-8' codec can't decode byte 0xff in position 17: invalid start byte"``; None if
        every line decoded."""

    def _decode(self, raw: bytes) -> str:
        self._lines += 1
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            if self.decode_error is None:
                self.decode_error = f"invalid UTF-8 in stream line {self._lines}: {exc}"
            return raw.decode("utf-8", errors="replace")

    def feed(self, chunk: bytes, t_ns: int) -> list[SSEEvent]:
        """Add one read's bytes; return the events it completed, all stamped ``t_ns``."""
        if not chunk:
            return []
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        self._buf += chunk
        out: list[SSEEvent] = []
        buf = self._buf
        start = 0
        i = self._scan
        n = len(buf)
        while True:
            # next CR or LF at or after i
            cr = buf.find(b"\r", i)
            lf = buf.find(b"\n", i)
            if cr == -1 and lf == -1:
                break
            if cr == -1 or (lf != -1 and lf < cr):
                end, nxt = lf, lf + 1
            else:
                end = cr
                if cr + 1 < n:
                    nxt = cr + 2 if buf[cr + 1] == 0x0A else cr + 1
                else:  # CR is the last byte of this read: swallow a following LF later
                    nxt = cr + 1
                    self._skip_lf = True
            line = self._decode(bytes(buf[start:end]))
            ev = self._line(line, t_ns)
            if ev is not None:
                out.append(ev)
            start = i = nxt
        if start:
            del buf[:start]
        self._scan = len(buf)
        return out

    def close(self, t_ns: int) -> list[SSEEvent]:
        """End of stream: an unterminated last line and a pending event are dispatched."""
        out: list[SSEEvent] = []
        if self._buf:
            ev = self._line(self._decode(bytes(self._buf)), t_ns)
            self._buf.clear()
            self._scan = 0
            if ev is not None:
                out.append(ev)
        ev = self._dispatch(t_ns)
        if ev is not None:
            out.append(ev)
        return out

    def _line(self, line: str, t_ns: int) -> SSEEvent | None:
        if line == "":
            return self._dispatch(t_ns)
        if line.startswith(":"):
            return None  # comment / keep-alive
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
            self._has_field = True
        elif name == "event":
            self._event = value
            self._has_field = True
        # id / retry / unknown fields do not matter for timing
        return None

    def _dispatch(self, t_ns: int) -> SSEEvent | None:
        if not self._has_field or not self._data:
            self._data, self._event, self._has_field = [], None, False
            return None
        ev = SSEEvent("\n".join(self._data), t_ns, self._event)
        self._data, self._event, self._has_field = [], None, False
        return ev


@dataclass
class ChunkInfo:
    """What one OpenAI stream chunk carries.

    ``text``: generated text in this chunk (content + reasoning + tool-call name/arguments);
    ``token_bearing``: True iff ``text`` is non-empty (role-only, empty, usage-only chunks and
    comments never count, DESIGN.md); ``reasoning``: the part of ``text`` that is reasoning
    (``reasoning_content`` / ``reasoning``, the vLLM/SGLang/DeepSeek field names);
    ``answer``: the rest of ``text`` (content, completions ``text``, tool-call text);
    ``answer_bearing``: True iff ``answer`` is non-empty, the time to first answer token's event; ``usage``: the ``usage``
    object when present; ``error``: the error message of an in-stream ``{"error": ...}`` event.
    """

    text: str = ""
    reasoning: str = ""
    answer: str = ""
    answer_bearing: bool = False
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    error: str | None = None
    done: bool = False
    token_bearing: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def _delta_text(delta: dict[str, Any]) -> tuple[str, str]:
    """(answer text, reasoning text) of one chat delta."""
    answer: list[str] = []
    reasoning: list[str] = []
    if isinstance(delta.get("content"), str):
        answer.append(delta["content"])
    for key in ("reasoning_content", "reasoning"):
        v = delta.get(key)
        if isinstance(v, str):
            reasoning.append(v)
    for call in delta.get("tool_calls") or []:
        fn = call.get("function") if isinstance(call, dict) else None
        for key in ("name", "arguments"):
            v = fn.get(key) if isinstance(fn, dict) else None
            if isinstance(v, str):
                answer.append(v)
    return "".join(answer), "".join(reasoning)


def interpret(data: str) -> ChunkInfo:
    """Interpret one SSE ``data`` payload of an OpenAI-compatible stream.

    ``[DONE]`` → ``done``. ``{"error": ...}`` (or a non-JSON payload) → ``error``. Otherwise
    text is gathered from every choice: ``text`` (completions), or ``delta.content``,
    ``delta.reasoning_content`` / ``delta.reasoning`` and ``delta.tool_calls[].function``
    (chat). Never raises.
    """
    s = data.strip()
    if s == "[DONE]":
        return ChunkInfo(done=True)
    try:
        obj = json.loads(s)
    except json.JSONDecodeError:
        return ChunkInfo(error=f"malformed stream chunk: {s[:120]!r}")
    if not isinstance(obj, dict):
        return ChunkInfo(error=f"unexpected stream chunk: {s[:120]!r}")
    info = ChunkInfo()
    if obj.get("error") is not None:
        err = obj["error"]
        info.error = err.get("message", json.dumps(err)) if isinstance(err, dict) else str(err)
        return info
    if obj.get("object") == "error":  # vLLM-style error object
        info.error = str(obj.get("message", s[:200]))
        return info
    texts: list[str] = []
    reasoning: list[str] = []
    answer: list[str] = []
    for choice in obj.get("choices") or []:
        if not isinstance(choice, dict):
            continue
        if isinstance(choice.get("text"), str):
            texts.append(choice["text"])
            answer.append(choice["text"])
        delta = choice.get("delta")
        if isinstance(delta, dict):
            a, r = _delta_text(delta)
            texts.append(r + a)  # reasoning precedes the answer within a delta
            reasoning.append(r)
            answer.append(a)
        if choice.get("finish_reason"):
            info.finish_reason = str(choice["finish_reason"])
    if isinstance(obj.get("usage"), dict):
        info.usage = obj["usage"]
    info.text = "".join(texts)
    info.reasoning = "".join(reasoning)
    info.answer = "".join(answer)
    info.token_bearing = bool(info.text)
    info.answer_bearing = bool(info.answer)
    return info
