"""What one engine step hands between its stages, as plain dataclasses (vLLM's ``outputs.py`` shape).

- :class:`SampledTokens`: what the model runner + sampler produced for a step (vLLM's
  ``ModelRunnerOutput``), keyed by ``Sequence.seq_id``; the scheduler applies it in
  :meth:`~own_engine.scheduler.Scheduler.update_from_output`.
- :class:`RequestOutput`: what the step reports per sequence to the caller (the server, ``generate``).
- :class:`TokenLogprobs`: one generated token's log-probabilities, for requests that asked for
  them (``SamplingParams.logprobs``), carried in :class:`SampledTokens` → :class:`RequestOutput`.
- :class:`GenerateOutput`: one finished (request, sample index) of :meth:`LLMEngine.generate`.

No torch import here: the generators are carried as opaque objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TokenLogprobs:
    """Log-probabilities (natural log) of one generated token and of its position's most likely tokens.

    Values are vLLM's default "raw logprobs": ``log_softmax`` of the model's fp32 logits row that
    scored this position, BEFORE temperature, top-k and top-p (so a sampled request reports the
    model's distribution, not the processed one it was drawn from). Speculative decoding: an
    accepted draft token and the bonus/resampled token get the target model's verify row of
    their position (never the draft model's). ``token_id``/``logprob``: the generated token;
    ``top_token_ids``/``top_logprobs``: the ``k = SamplingParams.logprobs`` most likely tokens of
    that row, by logprob descending (empty for ``k = 0``; the generated token appears there only
    if it is among them).
    """

    token_id: int
    logprob: float
    top_token_ids: tuple[int, ...] = ()
    top_logprobs: tuple[float, ...] = ()


@dataclass
class RequestOutput:
    """What one step produced for one sequence (``index``: sample index when ``n > 1``).

    ``new_token_ids``: tokens appended in this step (empty only when none were sampled);
    ``finish_reason``: ``"stop"`` (EOS / a stop token id), ``"length"`` (max_tokens or
    max_model_len) or None while running; token counts are totals so far. ``new_logprobs``: one
    :class:`TokenLogprobs` per ``new_token_ids`` entry when the request asked for logprobs
    (``SamplingParams.logprobs`` not None), else None.
    """

    request_id: str
    new_token_ids: list[int]
    finished: bool
    finish_reason: str | None
    num_prompt_tokens: int
    num_cached_tokens: int
    num_output_tokens: int
    index: int = 0
    new_logprobs: list[TokenLogprobs] | None = None


@dataclass
class GenerateOutput:
    """Result of :meth:`LLMEngine.generate` for one (request, sample index). ``logprobs``: one
    :class:`TokenLogprobs` per output token when the request asked for them, else None."""

    request_id: str
    prompt_token_ids: list[int]
    output_token_ids: list[int]
    text: str
    finish_reason: str | None
    num_cached_tokens: int = 0
    index: int = 0
    logprobs: list[TokenLogprobs] | None = None


@dataclass(frozen=True)
class Fork:
    """``n > 1``: one extra sample drawn from a parent's first-token logits row, for a new child
    sequence. ``seq_id``: the child's id (given by the engine); ``generator``: the child's
    ``torch.Generator`` (None for greedy requests); ``logprobs``: the sample's
    :class:`TokenLogprobs` when the request asked for them."""

    token_id: int
    generator: Any
    seq_id: int
    logprobs: TokenLogprobs | None = None


@dataclass
class SampledTokens:
    """A step's sampling result, keyed by ``seq_id`` of the scheduled sequences that sampled.

    ``token_ids[seq_id]``: tokens to append (one for a plain sample; accepted drafts plus the
    bonus/resampled token after speculative verification). ``num_accepted[seq_id]``: accepted
    draft tokens, whose K/V the verifying forward already wrote (absent = 0). ``forks[seq_id]``:
    children to fork off the parent (``n > 1``), in sample-index order. ``logprobs[seq_id]``: one
    :class:`TokenLogprobs` per ``token_ids[seq_id]`` entry, only for sequences whose request
    asked for logprobs.
    """

    token_ids: dict[int, list[int]] = field(default_factory=dict)
    num_accepted: dict[int, int] = field(default_factory=dict)
    forks: dict[int, list[Fork]] = field(default_factory=dict)
    logprobs: dict[int, list[TokenLogprobs]] = field(default_factory=dict)
