"""Token ids → streamed text for the OpenAI servers (the reference engine's and the shims'):
incremental detokenization and stop strings.

The engine emits token ids only; this module turns them into text deltas the way vLLM's
output processor does (``vllm/v1/engine/detokenizer.py``):

- **Incremental detokenization** with a sliding window (``prefix_offset`` / ``read_offset``,
  the convention of vLLM's ``detokenize_incrementally`` and HF TGI): a delta is only released
  once its text no longer ends in U+FFFD, so a multi-byte UTF-8 character split over several
  byte-level BPE tokens is never emitted half-done.
- **Stop strings** that may span token boundaries: after every token the new text is searched
  for each stop string (starting early enough to catch a match that began in earlier tokens);
  on a match the text is truncated *before* the stop string (OpenAI semantics: the stop string
  is not returned) and generation must be aborted. While streaming, the longest suffix of the
  text that is a prefix of some stop string is held back, so text that later turns out to be
  part of a stop string is never sent (vLLM holds back ``max(len(stop)) - 1`` characters
  always; holding back only a real partial match gives the same output with less delay).
- **Stop tokens**: when the engine finishes with ``finish_reason == "stop"`` on EOS or a
  ``stop_token_ids`` entry, that token is counted but its text is not emitted (vLLM convention).

Nothing here is thread-safe or async: one :class:`OutputTextProcessor` belongs to one request
and is driven by that request's handler.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

# How many prompt tokens seed the detokenizer window: some tokenizers (SentencePiece) decode
# a token differently at the start of a string (leading-space handling); vLLM uses 5 + 1.
_INITIAL_WINDOW = 6
_REPLACEMENT_CHAR = "\ufffd"


class Tokenizer(Protocol):
    """The part of a Hugging Face tokenizer this module uses."""

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = ...) -> str: ...


class IncrementalDetokenizer:
    """Turn a growing list of generated token ids into text deltas without partial characters.

    ``prompt_token_ids``: the request's prompt (its last few tokens give the decoding context).
    Algorithm: vLLM ``detokenize_incrementally`` (prefix/read offsets); each :meth:`add_token`
    decodes the window ``ids[prefix_offset:]`` and ``ids[prefix_offset:read_offset]`` and returns
    the difference once it no longer ends in the U+FFFD replacement character.
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        prompt_token_ids: Sequence[int],
        skip_special_tokens: bool = True,
    ) -> None:
        self._tokenizer = tokenizer
        self._skip_special = skip_special_tokens
        self._ids: list[int] = list(prompt_token_ids[-_INITIAL_WINDOW:])
        self._prefix_offset = 0
        self._read_offset = len(self._ids)

    def _decode(self, ids: Sequence[int]) -> str:
        return self._tokenizer.decode(ids, skip_special_tokens=self._skip_special)

    def add_token(self, token_id: int) -> str:
        """Append one generated token; return the text it completes ("" while held back)."""
        self._ids.append(token_id)
        prefix_text = self._decode(self._ids[self._prefix_offset : self._read_offset])
        new_text = self._decode(self._ids[self._prefix_offset :])
        if len(new_text) > len(prefix_text) and not new_text.endswith(_REPLACEMENT_CHAR):
            delta = new_text[len(prefix_text) :]
            self._prefix_offset = self._read_offset
            self._read_offset = len(self._ids)
            return delta
        return ""

    def flush(self) -> str:
        """At the end of the stream: the held-back text (e.g. an incomplete character as U+FFFD)."""
        prefix_text = self._decode(self._ids[self._prefix_offset : self._read_offset])
        new_text = self._decode(self._ids[self._prefix_offset :])
        self._prefix_offset = self._read_offset = len(self._ids)
        if len(new_text) > len(prefix_text):
            return new_text[len(prefix_text) :]
        return ""


@dataclass(frozen=True)
class TextDelta:
    """What one engine step produced for one request, ready to stream.

    ``text``: new characters safe to send (may be ""); ``num_tokens``: generated tokens this
    delta accounts for (tokens after a stop-string match are not counted); ``stopped``: a stop
    string matched, so the request is finished with ``finish_reason == "stop"`` and the engine
    must abort it. ``offsets``: per consumed token, the characters of the choice's text before
    that token's text (OpenAI's ``text_offset``; a token whose text is held back, half a UTF-8
    character, points where its character starts; at a stop-string match, clamped to the cut text).
    """

    text: str
    num_tokens: int
    stopped: bool
    offsets: tuple[int, ...] = ()


class OutputTextProcessor:
    """Per-request text state: detokenizer + stop strings + hold-back of partial stop matches.

    ``stop``: stop strings (empty strings are ignored); ``stop_token_ids``: ids whose text is
    dropped when the engine finishes on them (EOS is added automatically from
    ``tokenizer.eos_token_id``). After a stop-string match further calls return nothing.
    """

    def __init__(
        self,
        tokenizer: Any,
        prompt_token_ids: Sequence[int],
        stop: Iterable[str] | None = None,
        stop_token_ids: Iterable[int] | None = None,
    ) -> None:
        self._detok = IncrementalDetokenizer(tokenizer, prompt_token_ids)
        self._stops = [s for s in (stop or []) if s]
        self._stop_token_ids = set(stop_token_ids or [])
        eos = getattr(tokenizer, "eos_token_id", None)
        if isinstance(eos, int):
            self._stop_token_ids.add(eos)
        self.text = ""  # all text so far (truncated at a stop string once matched)
        self._emitted = 0  # characters of ``text`` already returned
        self.num_tokens = 0  # generated tokens consumed (the request's completion_tokens)
        self.stopped = False

    def _find_stop(self, prev_len: int) -> int | None:
        """Earliest index where a stop string starts that ends after ``prev_len`` characters."""
        best: int | None = None
        for s in self._stops:
            idx = self.text.find(s, max(0, prev_len - len(s) + 1))
            if idx != -1 and (best is None or idx < best):
                best = idx
        return best

    def _append(self, piece: str) -> None:
        if not piece:
            return
        prev_len = len(self.text)
        self.text += piece
        if self._stops:
            idx = self._find_stop(prev_len)
            if idx is not None:
                self.text = self.text[:idx]
                self.stopped = True

    def _held_back(self) -> int:
        """Length of the longest text suffix that is a proper prefix of some stop string."""
        hold = 0
        for s in self._stops:
            for k in range(min(len(s) - 1, len(self.text)), hold, -1):
                if self.text.endswith(s[:k]):
                    hold = k
                    break
        return hold

    def process(
        self, token_ids: Sequence[int], finished: bool, finish_reason: str | None = None
    ) -> TextDelta:
        """Consume one step's new tokens; ``finished``/``finish_reason`` as the engine reported.

        Returns the text that may be sent now. When ``finished`` (or a stop string matched)
        everything still held back is released.
        """
        if self.stopped:
            return TextDelta("", 0, True)
        consumed = 0
        offsets: list[int] = []
        last = len(token_ids) - 1
        for i, tid in enumerate(token_ids):
            consumed += 1
            offsets.append(len(self.text))
            if i == last and finished and finish_reason == "stop" and tid in self._stop_token_ids:
                continue  # the stop token is counted but never shown
            self._append(self._detok.add_token(tid))
            if self.stopped:
                break
        self.num_tokens += consumed
        done = finished or self.stopped
        if done and not self.stopped:
            self._append(self._detok.flush())
        end = len(self.text) if done else len(self.text) - self._held_back()
        end = max(end, self._emitted)
        delta = self.text[self._emitted : end]
        self._emitted = end
        if self.stopped:
            offsets = [min(o, len(self.text)) for o in offsets]
        return TextDelta(delta, consumed, self.stopped, tuple(offsets))
