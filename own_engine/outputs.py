"""What one engine step hands between its stages, as plain dataclasses (vLLM's ``outputs.py`` shape).

- :class:`SampledTokens`: what the model runner + sampler produced for a step (vLLM's
  ``ModelRunnerOutput``), keyed by ``Sequence.seq_id``; the scheduler applies it in
  :meth:`~own_engine.scheduler.Scheduler.update_from_output`.
- :class:`RequestOutput`: what the step reports per sequence to the caller (the server, ``generate``).
- :class:`GenerateOutput`: one finished (request, sample index) of :meth:`LLMEngine.generate`.

No torch import here: the generators are carried as opaque objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class RequestOutput:
    """What one step produced for one sequence (``index``: sample index when ``n > 1``).

    ``new_token_ids``: tokens appended in this step (empty only when none were sampled);
    ``finish_reason``: ``"stop"`` (EOS / a stop token id), ``"length"`` (max_tokens or
    max_model_len) or None while running; token counts are totals so far.
    """

    request_id: str
    new_token_ids: list[int]
    finished: bool
    finish_reason: str | None
    num_prompt_tokens: int
    num_cached_tokens: int
    num_output_tokens: int
    index: int = 0


@dataclass
class GenerateOutput:
    """Result of :meth:`LLMEngine.generate` for one (request, sample index)."""

    request_id: str
    prompt_token_ids: list[int]
    output_token_ids: list[int]
    text: str
    finish_reason: str | None
    num_cached_tokens: int = 0
    index: int = 0


@dataclass(frozen=True)
class Fork:
    """``n > 1``: one extra sample drawn from a parent's first-token logits row, for a new child
    sequence. ``seq_id``: the child's id (given by the engine); ``generator``: the child's
    ``torch.Generator`` (None for greedy requests)."""

    token_id: int
    generator: Any
    seq_id: int


@dataclass
class SampledTokens:
    """A step's sampling result, keyed by ``seq_id`` of the scheduled sequences that sampled.

    ``token_ids[seq_id]``: tokens to append (one for a plain sample; accepted drafts plus the
    bonus/resampled token after speculative verification). ``num_accepted[seq_id]``: accepted
    draft tokens, whose K/V the verifying forward already wrote (absent = 0). ``forks[seq_id]``:
    children to fork off the parent (``n > 1``), in sample-index order.
    """

    token_ids: dict[int, list[int]] = field(default_factory=dict)
    num_accepted: dict[int, int] = field(default_factory=dict)
    forks: dict[int, list[Fork]] = field(default_factory=dict)
