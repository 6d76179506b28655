"""One generation stream (:class:`Sequence`): token ids, KV progress and block table.

Naming follows vLLM/nano-vllm: ``num_computed_tokens`` tokens have their K/V in the cache;
``block_table[i]`` is the physical KV block holding token positions ``[i*block_size, (i+1)*block_size)``.
"""

from __future__ import annotations

import enum

from own_engine.sampling_params import SamplingParams


class SequenceStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"



class Sequence:
    """A prompt plus the tokens generated so far, and where its K/V lives.

    Attributes: ``token_ids`` (prompt + output), ``num_prompt_tokens``, ``num_computed_tokens``
    (tokens whose K/V is in the cache), ``num_cached_tokens`` (prompt tokens served by the prefix
    cache at first admission), ``block_table`` (physical block ids), ``block_hashes`` (chained
    hashes of the full blocks seen so far), ``status``, ``finish_reason``, ``index`` (sample index
    for ``n > 1``), ``seq_id`` (unique id given by the engine; also the FCFS arrival order).
    Adaptive speculation (:class:`~own_engine.spec_decode.AdaptiveK`): ``spec_alpha`` (running
    per-token acceptance rate in [0, 1]; ``None`` until the first verification, the policy's prior
    applies) and ``spec_idle_steps`` (decode steps since the last one that proposed drafts).
    """

    __slots__ = (
        "seq_id", "request_id", "index", "token_ids", "num_prompt_tokens", "num_computed_tokens",
        "num_cached_tokens", "block_table", "block_hashes", "status", "finish_reason",
        "sampling_params", "generator", "arrival", "num_draft_computed", "pending_forks",
        "prefix_cache_counted", "num_registered_blocks", "spec_alpha", "spec_idle_steps",
    )

    def __init__(self, request_id: str, token_ids: list[int], sampling_params: SamplingParams,
                 index: int = 0, generator=None, seq_id: int = 0) -> None:
        self.seq_id = seq_id
        self.request_id = request_id
        self.index = index
        self.token_ids: list[int] = list(token_ids)
        self.num_prompt_tokens = len(token_ids)
        self.num_computed_tokens = 0
        self.num_cached_tokens = 0
        self.block_table: list[int] = []
        self.block_hashes: list[int] = []
        self.status = SequenceStatus.WAITING
        self.finish_reason: str | None = None
        self.sampling_params = sampling_params
        self.generator = generator
        self.arrival = self.seq_id
        self.num_draft_computed = 0  # tokens whose K/V the draft model holds (speculative="draft")
        self.pending_forks = 0  # n>1: children still to fork off when the prompt is done
        self.prefix_cache_counted = False
        self.num_registered_blocks = 0  # leading full blocks already offered to the prefix cache
        self.spec_alpha: float | None = None  # running draft acceptance rate (None: no verification yet)
        self.spec_idle_steps = 0  # decode steps since drafts were last proposed (adaptive speculation)

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens:]

    @property
    def num_uncomputed_tokens(self) -> int:
        return len(self.token_ids) - self.num_computed_tokens

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    def fork(self, index: int, generator=None, seq_id: int = 0) -> "Sequence":
        """A child sharing this sequence's tokens and progress (blocks are shared by the
        :class:`~own_engine.block_manager.BlockManager`'s ``fork``, not here)."""
        child = Sequence(self.request_id, self.token_ids, self.sampling_params, index=index, generator=generator,
                         seq_id=seq_id)
        child.num_prompt_tokens = self.num_prompt_tokens
        child.num_computed_tokens = self.num_computed_tokens
        child.num_cached_tokens = self.num_cached_tokens
        child.block_hashes = list(self.block_hashes)
        child.status = self.status
        child.arrival = self.arrival
        child.num_draft_computed = self.num_draft_computed
        child.spec_alpha = self.spec_alpha  # same text so far: same acceptance estimate
        child.prefix_cache_counted = True
        return child

    def __repr__(self) -> str:
        return (f"Sequence(id={self.seq_id}, req={self.request_id!r}, len={len(self)}, "
                f"computed={self.num_computed_tokens}, blocks={self.block_table}, {self.status.value})")
