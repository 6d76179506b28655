"""Per-request sampling settings (names and meaning follow vLLM's ``SamplingParams``)."""

from __future__ import annotations

import math

from dataclasses import dataclass

_EPS = 1e-5

MAX_LOGPROBS = 20
"""The most top logprobs a request may ask for (vLLM's default ``max_logprobs``; OpenAI's limit)."""


@dataclass
class SamplingParams:
    """How to pick tokens for one request.

    ``temperature``: 0 → greedy (argmax); otherwise logits are divided by it. ``top_p``: nucleus
    mass in (0, 1]. ``top_k``: keep the k most likely tokens (-1 = all). ``seed``: per-request
    ``torch.Generator`` seed (sample ``i`` of ``n`` uses ``seed + i``). ``max_tokens``: output
    tokens to generate at most. ``stop``: stop strings (matched by the server after detokenizing;
    the engine ignores them). ``stop_token_ids``: token ids that end generation (the token is
    emitted). ``ignore_eos``: keep going past EOS. ``n``: independent samples of one prompt
    (forked sequences share the prompt's KV blocks, copy-on-write). ``logprobs``: None = none;
    ``k`` in ``[0, MAX_LOGPROBS]`` = each generated token's log-probability plus the ``k`` most
    likely tokens' of its position (:class:`~own_engine.outputs.TokenLogprobs`: raw log_softmax
    of the model's logits, before temperature / top-k / top-p, vLLM's default).

    Raises ``ValueError`` with a one-line message naming the bad field.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    seed: int | None = None
    max_tokens: int = 16
    stop: list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    n: int = 1
    logprobs: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        # NaN compares False with everything: reject non-finite values explicitly, or one bad
        # request would poison the batched sampler for every request stepped with it
        if not isinstance(self.temperature, (int, float)) or not math.isfinite(self.temperature) or self.temperature < 0:
            raise ValueError(f"temperature must be a finite number >= 0 (0 = greedy), got {self.temperature!r}")
        if not isinstance(self.top_p, (int, float)) or not math.isfinite(self.top_p) or not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not isinstance(self.top_k, int) or isinstance(self.top_k, bool) or (self.top_k < 1 and self.top_k != -1):
            raise ValueError(f"top_k must be -1 (disabled) or a positive integer, got {self.top_k!r}")
        if not isinstance(self.max_tokens, int) or isinstance(self.max_tokens, bool) or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be a positive integer, got {self.max_tokens!r}")
        if not isinstance(self.n, int) or isinstance(self.n, bool) or self.n < 1:
            raise ValueError(f"n must be a positive integer, got {self.n!r}")
        if self.seed is not None and (not isinstance(self.seed, int) or isinstance(self.seed, bool)):
            raise ValueError(f"seed must be an integer or None, got {self.seed!r}")
        if self.stop_token_ids is not None and not all(
            isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in self.stop_token_ids
        ):
            raise ValueError(f"stop_token_ids must be non-negative integers, got {self.stop_token_ids!r}")
        if self.logprobs is not None and (not isinstance(self.logprobs, int) or isinstance(self.logprobs, bool)
                                          or not 0 <= self.logprobs <= MAX_LOGPROBS):
            raise ValueError(f"logprobs must be None or an integer in [0, {MAX_LOGPROBS}], got {self.logprobs!r}")
        if self.stop is not None and not all(isinstance(s, str) and s for s in self.stop):
            raise ValueError(f"stop must be a list of non-empty strings, got {self.stop!r}")

    @property
    def greedy(self) -> bool:
        """True when sampling is argmax (temperature below 1e-5)."""
        return self.temperature < _EPS
