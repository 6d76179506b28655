"""Token-exact prompts: the input length a workload asks for is the length the server sees.

How an OpenAI-compatible server tokenizes (vLLM's convention, followed by SGLang and the
reference engine):

- ``/v1/completions``: ``tokenizer(prompt)`` with the tokenizer's default
  ``add_special_tokens`` (SmolLM2 adds no BOS, so this equals the plain encoding).
- ``/v1/chat/completions``: ``apply_chat_template(messages, add_generation_prompt=True)``
  rendered to text, then encoded with ``add_special_tokens=False`` (the template already
  holds every special token).

Synthetic text is built from *word tokens*: vocabulary entries that decode to a space
followed by ASCII letters and encode back to themselves alone. The byte-level
pre-tokenizer splits text before each space, so any sequence of word tokens decodes to a
text that re-encodes to exactly the same ids (no merges across the boundaries). The
decode → re-encode → repair loop in :meth:`TokenKit.fit` is still run on every prompt, so a
tokenizer without that property (or real text) converges too, or fails loudly.
"""

from __future__ import annotations

import re
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from workloads.errors import WorkloadError

_WORD_RE = re.compile(r"^ [A-Za-z]{2,}$")
_MAX_FIT_ROUNDS = 32


class _WordIdsMemo:
    """A bounded memo of :attr:`TokenKit.word_ids` by the tokenizer's content (its class, vocabulary
    and special ids) and the exclusions: a pure function of those, about a second to compute on a
    49k vocabulary, that a run used to compute once per kit (the workload's, then each engine's
    ladder) and a process once per run. Like :func:`functools.lru_cache`, but keyed by content
    rather than by the tokenizer object (each run loads its own)."""

    def __init__(self, size: int = 4) -> None:
        self.size, self.lock, self.items = size, threading.Lock(), OrderedDict()

    def get(self, key: tuple, compute: Callable[[], np.ndarray]) -> np.ndarray:
        with self.lock:
            if key in self.items:
                self.items.move_to_end(key)
                return self.items[key]
        value = compute()
        with self.lock:
            self.items[key] = value
            while len(self.items) > self.size:
                self.items.popitem(last=False)
        return value


_WORD_IDS = _WordIdsMemo()


def _fingerprint(tok: Any, special: frozenset[int]) -> tuple | None:
    """What :attr:`TokenKit.word_ids` depends on: the tokenizer's class, its vocabulary (piece →
    id, added tokens included) and the ids left out; None for a tokenizer that cannot list its
    vocabulary (then nothing is memoised)."""
    if not callable(getattr(tok, "get_vocab", None)):
        return None
    return type(tok).__name__, len(tok), _vocab_hash(tok), special


_VOCAB_HASHES: "weakref.WeakKeyDictionary[Any, tuple[int, int]]" = weakref.WeakKeyDictionary()


def _vocab_hash(tok: Any) -> int:
    """The hash of ``tok``'s vocabulary (piece → id), computed once per tokenizer object and size:
    a run builds a workload per measurement from its one tokenizer, and hashing 49k pieces each
    time cost tens of ms (adding tokens changes the size, so it is hashed again)."""
    size = len(tok)
    try:
        seen = _VOCAB_HASHES.get(tok)
    except TypeError:  # not weakly referenceable: hashed each time
        seen = None
    if seen is None or seen[0] != size:
        seen = (size, hash(frozenset(tok.get_vocab().items())))
        try:
            _VOCAB_HASHES[tok] = seen
        except TypeError:
            pass
    return seen[1]


class TokenKit:
    """A tokenizer plus the helpers workloads need to build token-exact requests.

    ``tokenizer``: a Hugging Face tokenizer (``AutoTokenizer.from_pretrained(model_dir)``).
    ``exclude_token_ids``: ids never drawn for synthetic text (e.g. ids an engine treats
    specially). The word vocabulary is computed lazily, once per tokenizer content (about a
    second; :class:`_WordIdsMemo`).
    """

    def __init__(self, tokenizer: Any, exclude_token_ids: Iterable[int] = ()) -> None:
        if not hasattr(tokenizer, "encode") or not hasattr(tokenizer, "decode"):
            raise WorkloadError(
                f"expected a Hugging Face tokenizer, got {type(tokenizer).__name__}: "
                "pass transformers.AutoTokenizer.from_pretrained(model_dir)"
            )
        self.tokenizer = tokenizer
        self.exclude_token_ids = frozenset(int(i) for i in exclude_token_ids)
        self._word_ids: np.ndarray | None = None

    # --- encoding as the server does it -------------------------------------------------
    def encode(self, text: str) -> list[int]:
        """Plain ids of ``text`` (``add_special_tokens=False``)."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` (special tokens kept, no whitespace clean-up)."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def completion_ids(self, prompt: str) -> list[int]:
        """Ids ``/v1/completions`` sees for ``prompt`` (tokenizer's default special tokens)."""
        return list(self.tokenizer(prompt)["input_ids"])

    def chat_text(self, messages: Sequence[dict[str, Any]]) -> str:
        """The chat template applied to ``messages`` with the generation prompt, as text.

        Raises :class:`WorkloadError` when the tokenizer has no chat template.
        """
        if not getattr(self.tokenizer, "chat_template", None):
            raise WorkloadError(
                "this tokenizer has no chat template: use --api completions or a model with a chat template"
            )
        return self.tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)

    def chat_ids(self, messages: Sequence[dict[str, Any]]) -> list[int]:
        """Ids ``/v1/chat/completions`` sees for ``messages`` (template, then no extra specials)."""
        return self.encode(self.chat_text(messages))

    def chat_overhead(self) -> int:
        """Tokens the chat template adds around one empty user message."""
        return len(self.chat_ids([{"role": "user", "content": ""}]))

    def truncate(self, text: str, n_tokens: int) -> str:
        """``text`` cut to its first ``n_tokens`` plain tokens (the whole text when shorter)."""
        ids = self.encode(text)
        if len(ids) <= n_tokens:
            return text
        return self.decode(ids[: max(0, n_tokens)])

    # --- synthetic text ------------------------------------------------------------------
    @property
    def word_ids(self) -> np.ndarray:
        """Ids of the word tokens (space + >= 2 ASCII letters, round-trip stable), ascending."""
        if self._word_ids is None:
            tok = self.tokenizer
            special = set(getattr(tok, "all_special_ids", []) or [])
            special |= set(getattr(tok, "added_tokens_decoder", {}) or {})
            special |= self.exclude_token_ids
            key = _fingerprint(tok, frozenset(special))
            compute = lambda: _word_ids(tok, frozenset(special))  # noqa: E731
            self._word_ids = compute() if key is None else _WORD_IDS.get(key, compute)
        return self._word_ids

    def random_words(self, rng: np.random.Generator, n: int) -> list[int]:
        """``n`` word-token ids drawn uniformly (with replacement) with ``rng``."""
        if n <= 0:
            return []
        return self.word_ids[rng.integers(0, len(self.word_ids), size=n)].tolist()

    # --- exact fitting -------------------------------------------------------------------
    def fit(
        self,
        content_ids: Sequence[int],
        target_total: int,
        render: Callable[[str], list[int]],
        rng: np.random.Generator,
        what: str = "prompt",
    ) -> tuple[str, list[int]]:
        """Text whose rendering is exactly ``target_total`` tokens.

        ``content_ids``: the content to start from (kept as a prefix as far as possible);
        ``render(text)``: the ids the server sees for that content (e.g. chat template around
        it); extra tokens are random words from ``rng``. Loop: decode → render; too long →
        cut the re-encoded content; too short → append words; until stable.
        Returns ``(content_text, rendered_ids)``. Raises :class:`WorkloadError` when the
        target is below the fixed overhead of ``render`` or the loop does not converge.
        """
        overhead = len(render(""))
        if target_total < overhead:
            raise WorkloadError(
                f"{what} length {target_total} tokens is below the {overhead}-token overhead of the "
                "chat template: ask for a longer input or use --api completions"
            )
        ids = list(content_ids)
        for _ in range(_MAX_FIT_ROUNDS):
            text = self.decode(ids)
            total = render(text)
            diff = target_total - len(total)
            if diff == 0:
                return text, total
            cur = self.encode(text)
            ids = cur[: max(0, len(cur) + diff)] if diff < 0 else cur + self.random_words(rng, diff)
        raise WorkloadError(
            f"could not build a {what} of exactly {target_total} tokens after {_MAX_FIT_ROUNDS} rounds: "
            "this tokenizer does not round-trip; report it with the model name"
        )

    def build_payload(
        self,
        content_ids: Sequence[int],
        target_total: int,
        api: str,
        rng: np.random.Generator,
        what: str = "prompt",
    ) -> tuple[str | None, list[dict[str, Any]] | None, list[int]]:
        """A single-turn request of exactly ``target_total`` server-side tokens.

        ``api="completions"``: the content is the prompt; ``api="chat"``: the content is one
        user message inside the chat template (template tokens count toward the target).
        Returns ``(prompt, messages, prompt_token_ids)`` with exactly one of prompt/messages set.
        """
        if api == "chat":
            text, ids = self.fit(
                content_ids, target_total, lambda t: self.chat_ids([{"role": "user", "content": t}]), rng, what
            )
            return None, [{"role": "user", "content": text}], ids
        if api == "completions":
            text, ids = self.fit(content_ids, target_total, self.completion_ids, rng, what)
            return text, None, ids
        raise WorkloadError(f"unknown api {api!r}: use 'chat' or 'completions'")

    def conversation_payload(
        self, messages: Sequence[dict[str, Any]], api: str
    ) -> tuple[str | None, list[dict[str, Any]] | None, list[int]]:
        """A multi-turn conversation as a request: chat messages, or the templated text as a
        completions prompt. Returns ``(prompt, messages, prompt_token_ids)``."""
        if api == "chat":
            msgs = [dict(m) for m in messages]
            return None, msgs, self.chat_ids(msgs)
        if api == "completions":
            prompt = self.chat_text(messages)
            return prompt, None, self.completion_ids(prompt)
        raise WorkloadError(f"unknown api {api!r}: use 'chat' or 'completions'")


def _word_ids(tok: Any, special: frozenset[int]) -> np.ndarray:
    """:attr:`TokenKit.word_ids` computed (every piece of the vocabulary decoded and re-encoded).
    Raises :class:`WorkloadError` below 256 stable word tokens."""
    pieces = tok.batch_decode([[i] for i in range(len(tok))], clean_up_tokenization_spaces=False)
    cand = [i for i, p in enumerate(pieces) if i not in special and _WORD_RE.match(p)]
    enc = tok([pieces[i] for i in cand], add_special_tokens=False)["input_ids"] if cand else []
    ids = [i for i, e in zip(cand, enc) if list(e) == [i]]
    if len(ids) < 256:
        raise WorkloadError(
            f"the tokenizer has only {len(ids)} stable word tokens (need >= 256): "
            "use a byte-level BPE tokenizer (GPT-2/Llama-3/SmolLM style)"
        )
    array = np.asarray(ids, dtype=np.int64)
    array.flags.writeable = False  # shared by every kit of an equal tokenizer
    return array


def as_kit(tokenizer: Any, exclude_token_ids: Iterable[int] | None = None) -> TokenKit:
    """``tokenizer`` as a :class:`TokenKit` (a kit passes through when no exclusions change)."""
    if isinstance(tokenizer, TokenKit):
        if exclude_token_ids and frozenset(exclude_token_ids) != tokenizer.exclude_token_ids:
            return TokenKit(tokenizer.tokenizer, exclude_token_ids)
        return tokenizer
    return TokenKit(tokenizer, exclude_token_ids or ())
