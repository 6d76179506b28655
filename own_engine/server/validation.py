"""From a parsed OpenAI request to engine input: checks against the served model, prompt token
ids, ``max_tokens`` and sampling parameters.

One implementation for the reference engine's server and the shims (``adapters/shims``), which
differ only in their limits (:class:`RequestValidator`'s arguments). Every problem raises
:class:`~own_engine.server.protocol.APIError` (HTTP 400 unless noted) with a one-line message
naming the field, before anything reaches an engine.

Imports only the standard library, pydantic (through :mod:`~own_engine.server.protocol`) and
:mod:`own_engine.sampling_params` (no torch): the shims import it inside other engines' venvs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from own_engine.sampling_params import SamplingParams
from own_engine.server.protocol import APIError, ChatCompletionRequest, CompletionRequest, chat_messages

COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions
SEED_MIN, SEED_MAX = -(2**63), 2**63 - 1  # a 64-bit seed, vLLM's range (torch.Generator.manual_seed)
# Request body limit: the most JSON bytes one character can take is 12 (an escaped surrogate
# pair, "\ud83d\ude00"), and a token id takes at most 12 ("1234567890, "); the fields around
# the prompt (messages' framing, sampling options, harmless extras) get 1 MiB.
JSON_BYTES_PER_CHAR = 12
BODY_OVERHEAD_BYTES = 1 << 20
FALLBACK_TOKEN_CHARS = 128  # for the body limit when a tokenizer's longest token is not bounded


def max_token_chars(tokenizer: Any) -> int | None:
    """``L``, the most characters of (normalized) text one token of ``tokenizer`` can stand for;
    None when no such bound exists.

    From the vocabulary: the longest token string of ``get_vocab()`` (added tokens included). In
    byte-level BPE (GPT-2, Llama 3, Qwen, SmolLM) a vocabulary string has one character per byte
    of text, so it is at least as long as the text it covers; in SentencePiece-style BPE (Llama 2,
    Mistral) "▁" is one space and byte-fallback tokens ("<0x0A>") are longer than their byte. A
    model that maps a whole run of unknown text to one token (WordPiece, Unigram, BPE with
    ``fuse_unk`` and no byte fallback) has no bound: None. A tokenizer without ``get_vocab``
    (test fakes) is measured by decoding every id on its own (None if it cannot be).
    """
    model = getattr(getattr(tokenizer, "backend_tokenizer", None), "model", None)
    if model is not None:
        if type(model).__name__ != "BPE":
            return None
        if getattr(model, "unk_token", None) and getattr(model, "fuse_unk", False) and not getattr(
            model, "byte_fallback", False
        ):
            return None
    get_vocab = getattr(tokenizer, "get_vocab", None)
    if callable(get_vocab):
        vocab = get_vocab()
        return max(map(len, vocab), default=0) or None
    try:
        return max((len(tokenizer.decode([i])) for i in range(len(tokenizer))), default=0) or None
    except Exception:  # no len() or an id that does not decode: no bound known
        return None


def default_max_body_bytes(max_model_len: int | None, token_chars: int | None) -> int | None:
    """The default request body limit in bytes: ``12 * L * max_model_len + 1 MiB``, the largest
    JSON body whose prompt can still fit the context (each of at most ``L * max_model_len``
    characters taking at most 12 bytes, see :data:`JSON_BYTES_PER_CHAR`); ``L`` is
    :func:`max_token_chars` (128 when it is unbounded). None (no limit) without ``max_model_len``.
    For SmolLM2 (L = 81) and 4,096 tokens: 3,981,312 + 1,048,576 = 5,029,888 bytes.
    """
    if max_model_len is None:
        return None
    return JSON_BYTES_PER_CHAR * (token_chars or FALLBACK_TOKEN_CHARS) * max_model_len + BODY_OVERHEAD_BYTES


@dataclass(frozen=True)
class EngineInput:
    """A validated request: ``prompt_token_ids`` ``[prompt_len]``, ``max_tokens`` (output
    tokens) and the engine's ``sampling_params`` (``max_tokens`` included)."""

    prompt_token_ids: list[int]
    max_tokens: int
    sampling_params: Any


class RequestValidator:
    """Checks requests for one served model.

    ``tokenizer``: a Hugging Face tokenizer (``encode``, ``apply_chat_template``);
    ``model_name``: the only ``model`` accepted (a different one: HTTP ``unknown_model_status``);
    ``max_model_len``: prompt + output limit in tokens (None: not checked);
    ``max_n``: most choices per request (``n``), ``max_n_why`` says where the limit comes from;
    ``vocab_size``: token ids must lie in ``[0, vocab_size)`` (None: not checked);
    ``chat_default_max_tokens``: for a chat request without ``max_tokens`` (None: the rest of the
    context, vLLM's default; needs ``max_model_len``); ``sampling_params_cls``: builds the
    sampling parameters and raises ``ValueError`` on bad values; ``token_chars``: the longest
    token in characters (None: :func:`max_token_chars` of ``tokenizer``; 0: no length check
    before tokenizing); ``max_logprobs``: the most top logprobs a request may ask for (None: the
    engine returns no logprobs, so ``logprobs`` / ``top_logprobs`` are rejected, as the shims
    do; the reference server passes 20). Raises ``ValueError`` for
    ``chat_default_max_tokens=None`` without ``max_model_len``.

    Logprobs (vLLM's OpenAI server rules): completions take ``logprobs`` = k in
    ``[0, max_logprobs]`` (0: only the sampled token's); chat takes ``logprobs: true`` with
    ``top_logprobs`` = k in ``[0, max_logprobs]`` (default 0), and ``top_logprobs`` > 0 without
    ``logprobs: true`` is a 400. ``echo`` (prompt logprobs) stays unsupported.

    A prompt text is checked twice against ``max_model_len``: by its length before it is
    tokenized (:meth:`_check_chars`: a text of ``C`` characters has at least ``C / L`` tokens),
    so an oversized body costs a ``len()`` instead of a tokenizer pass, then exactly by its
    token count.
    """

    def __init__(
        self,
        tokenizer: Any,
        model_name: str,
        max_model_len: int | None,
        *,
        max_n: int = 1,
        max_n_why: str = "",
        vocab_size: int | None = None,
        chat_default_max_tokens: int | None = None,
        unknown_model_status: int = 400,
        sampling_params_cls: Callable[..., Any] = SamplingParams,
        token_chars: int | None = None,
        max_logprobs: int | None = None,
    ) -> None:
        if chat_default_max_tokens is None and max_model_len is None:
            raise ValueError("chat_default_max_tokens=None (the rest of the context) needs max_model_len")
        self.tokenizer = tokenizer
        self.model_name = model_name
        self.max_model_len = max_model_len
        self.max_n = max_n
        self.max_n_why = max_n_why
        self.vocab_size = vocab_size
        self.chat_default_max_tokens = chat_default_max_tokens
        self.unknown_model_status = unknown_model_status
        self.sampling_params_cls = sampling_params_cls
        self.token_chars = max_token_chars(tokenizer) if token_chars is None else (token_chars or None)
        self.max_logprobs = max_logprobs
        normalizer = getattr(getattr(tokenizer, "backend_tokenizer", None), "normalizer", None)
        self._normalize: Callable[[str], str] | None = getattr(normalizer, "normalize_str", None)

    # ------------------------------------------------------------------ the two endpoints
    def completion(self, req: CompletionRequest) -> EngineInput:
        """``POST /v1/completions``: ``max_tokens`` defaults to 16 (OpenAI)."""
        self._check_common(req)
        if req.echo:
            raise APIError("echo is not supported; omit it or send false", param="echo")
        if req.suffix:
            raise APIError("suffix is not supported; omit it", param="suffix")
        if req.logprobs is not None:  # logprobs=0 asks for the sampled tokens' logprobs (OpenAI)
            self._check_logprobs(req.logprobs, "logprobs")
        self._check_requested(req.max_tokens, "max_tokens")
        ids = self._completion_prompt_ids(req, req.max_tokens or COMPLETIONS_DEFAULT_MAX_TOKENS)
        max_tokens = self._max_tokens(req.max_tokens, COMPLETIONS_DEFAULT_MAX_TOKENS, len(ids), "max_tokens")
        return EngineInput(ids, max_tokens, self._sampling_params(req, max_tokens, req.logprobs))

    def chat(self, req: ChatCompletionRequest) -> EngineInput:
        """``POST /v1/chat/completions``: ``max_completion_tokens`` wins over ``max_tokens``."""
        self._check_common(req)
        num_logprobs = self._chat_logprobs(req)
        if req.max_completion_tokens is not None:
            requested, what = req.max_completion_tokens, "max_completion_tokens"
        else:
            requested, what = req.max_tokens, "max_tokens"
        self._check_requested(requested, what)
        ids = self._chat_prompt_ids(req, requested or self.chat_default_max_tokens or 1)
        max_tokens = self._max_tokens(requested, self.chat_default_max_tokens, len(ids), what)
        return EngineInput(ids, max_tokens, self._sampling_params(req, max_tokens, num_logprobs))

    @staticmethod
    def stop_token_ids(req: Any, eos_token_ids: Iterable[int]) -> list[int]:
        """Ids whose text is never shown when a choice finishes on them: the request's
        ``stop_token_ids`` plus the engine's EOS ids."""
        return [*(req.stop_token_ids or ()), *eos_token_ids]

    # ------------------------------------------------------------------ checks
    def _check_common(self, req: Any) -> None:
        if req.model is not None and req.model != self.model_name:
            raise APIError(
                f"the model '{req.model}' is not served here; use '{self.model_name}' (see GET /v1/models)",
                status=self.unknown_model_status,
                err_type="NotFoundError" if self.unknown_model_status == 404 else "BadRequestError",
                param="model",
            )
        if not 1 <= req.n <= self.max_n:
            raise APIError(f"n must be between 1 and {self.max_n}{self.max_n_why}, got {req.n}", param="n")
        if req.best_of not in (None, req.n):
            raise APIError("best_of is not supported; omit it or send best_of equal to n", param="best_of")
        for name in ("presence_penalty", "frequency_penalty"):
            if getattr(req, name) not in (None, 0, 0.0):
                raise APIError(f"{name} is not supported; omit it or send 0", param=name)
        if req.repetition_penalty not in (None, 1, 1.0):
            raise APIError("repetition_penalty is not supported; omit it or send 1", param="repetition_penalty")
        if req.seed is not None and not SEED_MIN <= req.seed <= SEED_MAX:
            raise APIError(f"seed must be a 64-bit integer (from -2**63 to 2**63-1), got {req.seed}", param="seed")
        if req.stop_token_ids:
            self._check_token_ids(req.stop_token_ids, "stop_token_ids")

    def _check_logprobs(self, value: int, what: str) -> None:
        if self.max_logprobs is None:
            raise APIError(f"logprobs are not supported; omit '{what}'", param=what)
        if not 0 <= value <= self.max_logprobs:
            raise APIError(f"{what} must be between 0 and {self.max_logprobs}, got {value}", param=what)

    def _chat_logprobs(self, req: ChatCompletionRequest) -> int | None:
        """The number of top logprobs a chat request asks for (None: no logprobs)."""
        if self.max_logprobs is None:
            if req.logprobs or req.top_logprobs:
                raise APIError("logprobs are not supported; omit 'logprobs'", param="logprobs")
            return None
        if req.top_logprobs is not None:
            self._check_logprobs(req.top_logprobs, "top_logprobs")
            if req.top_logprobs > 0 and not req.logprobs:
                raise APIError("top_logprobs needs logprobs: send \"logprobs\": true with \"top_logprobs\"",
                               param="top_logprobs")
        return (req.top_logprobs or 0) if req.logprobs else None

    def _check_token_ids(self, ids: list[int], what: str) -> None:
        if self.vocab_size is None:
            return
        bad = [t for t in ids if not 0 <= t < self.vocab_size]
        if bad:
            raise APIError(f"{what} has token id {bad[0]} outside the vocabulary [0, {self.vocab_size})", param=what)

    def _check_chars(self, text: str, min_output: int, what: str) -> None:
        """Reject ``text`` when its length alone proves it cannot fit the context, before it is
        tokenized.

        Bound: every token stands for at most ``L`` = :attr:`token_chars` characters of the
        normalized text (:func:`max_token_chars`), so ``C`` characters need at least
        ``ceil(C / L)`` tokens; with ``min_output`` completion tokens (at least 1) the request
        cannot fit when ``ceil(C / L) + min_output > max_model_len``. The bound never rejects a
        prompt that fits; it is loose for ordinary text (about 4 characters per token, while L
        is 81 for SmolLM2), which the exact token count after tokenizing catches.
        """
        if self.max_model_len is None or self.token_chars is None:
            return
        min_output = max(min_output, 1)
        num_chars = len(text)
        if -(-num_chars // self.token_chars) + min_output <= self.max_model_len:
            return
        if self._normalize is not None:  # the tokenizer sees the normalized text (one full pass)
            num_chars = len(self._normalize(text))
        least = -(-num_chars // self.token_chars)
        if least + min_output > self.max_model_len:
            raise APIError(
                f"This model's maximum context length is {self.max_model_len} tokens. However, the prompt has "
                f"{num_chars} characters, so at least {least} tokens (no token of this model stands for more than "
                f"{self.token_chars} characters), plus {min_output} in the completion. "
                f"Please reduce the length of the prompt.",
                param=what,
            )

    def _completion_prompt_ids(self, req: CompletionRequest, min_output: int) -> list[int]:
        prompt = req.prompt
        if prompt is None:
            raise APIError("missing required field 'prompt' (a string or a list of token ids)", param="prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]  # a batch of one
        if isinstance(prompt, str):
            self._check_chars(prompt, min_output, "prompt")
            ids = list(self.tokenizer.encode(prompt, add_special_tokens=True))
        elif isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            ids = list(prompt)
            self._check_token_ids(ids, "prompt")
        elif isinstance(prompt, list) and prompt and all(isinstance(p, (str, list)) for p in prompt):
            raise APIError(
                f"batched prompts ({len(prompt)}) are not supported; send one prompt per request", param="prompt"
            )
        else:
            raise APIError("'prompt' must be a string or a list of token ids", param="prompt")
        if not ids:
            raise APIError("the prompt is empty; send at least one token", param="prompt")
        return ids

    def _chat_prompt_ids(self, req: ChatCompletionRequest, min_output: int) -> list[int]:
        messages = chat_messages(req)
        if req.tools:
            raise APIError("tools are not supported by this server; omit 'tools'", param="tools")
        if getattr(self.tokenizer, "chat_template", "present") is None:
            raise APIError("this model has no chat template; use /v1/completions", param="messages")
        try:
            text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        except Exception as exc:  # a Jinja error in the template (e.g. bad role order)
            raise APIError(f"the chat template rejected the messages: {exc}", param="messages") from None
        self._check_chars(text, min_output, "messages")  # the rendered text: what is tokenized
        ids = list(self.tokenizer.encode(text, add_special_tokens=False))
        if not ids:
            raise APIError("the chat prompt is empty", param="messages")
        return ids

    @staticmethod
    def _check_requested(requested: int | None, what: str) -> None:
        if requested is not None and requested < 1:
            raise APIError(f"{what} must be at least 1, got {requested}", param=what)

    def _max_tokens(self, requested: int | None, default: int | None, num_prompt: int, what: str) -> int:
        self._check_requested(requested, what)
        if requested is None and default is None:  # chat: the rest of the context (vLLM)
            room = self.max_model_len - num_prompt
            if room < 1:
                raise APIError(
                    f"This model's maximum context length is {self.max_model_len} tokens, and the prompt has "
                    f"{num_prompt} tokens, leaving no room for a completion. Please shorten the prompt.",
                    param="messages",
                )
            return room
        max_tokens = requested if requested is not None else default
        if self.max_model_len is not None and num_prompt + max_tokens > self.max_model_len:
            raise APIError(
                f"This model's maximum context length is {self.max_model_len} tokens. However, you requested "
                f"{num_prompt + max_tokens} tokens ({num_prompt} in the prompt, {max_tokens} in the completion). "
                f"Please reduce the length of the prompt or {what}.",
                param=what,
            )
        return max_tokens

    def _sampling_params(self, req: Any, max_tokens: int, num_logprobs: int | None = None) -> Any:
        kwargs: dict[str, Any] = {
            "temperature": 1.0 if req.temperature is None else req.temperature,
            "top_p": 1.0 if req.top_p is None else req.top_p,
            # 0 and k >= the vocabulary keep every token: -1 (a huge k would overflow the sampler's tensor)
            "top_k": -1 if req.top_k in (None, 0) or req.top_k >= (self.vocab_size or 2**31) else req.top_k,
            "seed": req.seed,
            "max_tokens": max_tokens,
            "stop": req.stop_list() or None,
            "stop_token_ids": req.stop_token_ids or None,
            "ignore_eos": req.ignore_eos,
            "n": req.n,
        }
        if num_logprobs is not None:  # only then: a shim's sampling_params_cls need not know the field
            kwargs["logprobs"] = num_logprobs
        try:
            return self.sampling_params_cls(**kwargs)
        except (ValueError, TypeError) as exc:
            raise APIError(f"invalid sampling parameters: {exc}") from None
