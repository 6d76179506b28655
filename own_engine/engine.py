"""LLMEngine: the reference engine's request API (``add_request`` / ``step`` / ``abort`` /
``generate``), in vLLM's shape.

One :meth:`LLMEngine.step` = schedule (continuous batching, chunked prefill, preemption) → apply KV
block copies (CoW) → propose draft tokens (speculative decoding) → ONE batched target forward →
sample / verify → append tokens, check EOS / stop_token_ids / max_tokens → free finished sequences.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import torch

from own_engine.block_manager import BlockManager
from own_engine.config import ConfigError, EngineConfig, ModelConfig
from own_engine.model import LlamaModel
from own_engine.model_runner import BatchItem, ModelRunner, select_attention
from own_engine.sampler import Sampler
from own_engine.sampling_params import SamplingParams
from own_engine.scheduler import Scheduler
from own_engine.sequence import Sequence, SequenceStatus
from own_engine.spec_decode import DraftModelProposer, NgramProposer, Proposal, RejectionSampler


@dataclass
class RequestOutput:
    """What one step produced for one sequence (``index``: sample index when ``n > 1``)."""

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


@dataclass
class _Request:
    request_id: str
    seqs: list[Sequence] = field(default_factory=list)


class LLMEngine:
    """The reference engine over one Llama-architecture model folder.

    Attributes: ``tokenizer`` (transformers tokenizer of ``model_dir``), ``max_model_len`` (tokens),
    ``config``, ``model_config``, ``num_kv_blocks``, ``device``, ``attention_backend`` (``"triton"`` or
    ``"torch"``) and ``attention_note`` (why ``auto`` fell back to ``"torch"`` on CUDA, else None).
    Raises :class:`~own_engine.config.ConfigError` for invalid settings.
    """

    def __init__(self, config: EngineConfig) -> None:
        from transformers import AutoTokenizer

        config.validate()
        self.config = config
        torch.set_num_threads(config.threads)  # run with OMP_NUM_THREADS set too: spin-waiting hurts on shared CPUs
        if config.device == "cuda" and not torch.cuda.is_available():
            raise ConfigError("device='cuda' but no CUDA GPU is visible: use device='cpu' or 'auto'")
        self.device = torch.device("cuda" if config.device == "cuda" or (config.device == "auto" and torch.cuda.is_available()) else "cpu")
        self.model_config = mc = ModelConfig.from_dir(config.model_dir)
        self.max_model_len = config.resolve_max_model_len(mc)
        self.num_kv_blocks = config.resolve_num_kv_blocks(mc, self.max_model_len)
        self.tokenizer = AutoTokenizer.from_pretrained(str(config.model_dir))
        spec_k = config.num_speculative_tokens if config.speculative != "none" else 0
        max_blocks_per_seq = -(-(self.max_model_len + spec_k) // config.block_size)
        self.block_manager = BlockManager(self.num_kv_blocks, config.block_size, config.enable_prefix_caching,
                                          config.kv_allocation, max_blocks_per_seq)
        self.scheduler = Scheduler(self.block_manager, config.max_num_seqs, config.max_num_batched_tokens,
                                   self.max_model_len, config.enable_chunked_prefill, config.batching, spec_k)
        attention_fn, self.attention_backend, self.attention_note = select_attention(
            self.device, config.attention_backend)
        model = LlamaModel.from_dir(config.model_dir, mc, self.max_model_len + spec_k + 1, self.device, attention_fn)
        self.runner = ModelRunner(model, self.num_kv_blocks, config.block_size, self.device)
        self.sampler = Sampler()
        self.rejection_sampler = RejectionSampler()
        self.proposer = None
        self.draft_runner = None
        if config.speculative == "ngram":
            self.proposer = NgramProposer()
        elif config.speculative == "draft":
            self.draft_runner = ModelRunner(model.truncated(config.draft_num_layers), self.num_kv_blocks,
                                            config.block_size, self.device)
            self.proposer = DraftModelProposer(self.draft_runner)
        self.generator = torch.Generator().manual_seed(config.seed)
        self._requests: dict[str, _Request] = {}
        self._ids = itertools.count()
        self.spec_num_draft_tokens = 0
        self.spec_num_accepted_tokens = 0
        self.spec_num_verify_steps = 0
        self.eos_token_ids = set(mc.eos_token_ids)
        if self.tokenizer.eos_token_id is not None:
            self.eos_token_ids.add(self.tokenizer.eos_token_id)

    # ------------------------------------------------------------------ requests
    def _generator(self, params: SamplingParams, index: int) -> torch.Generator | None:
        if params.greedy:
            return None
        if params.seed is not None:
            return torch.Generator().manual_seed(params.seed + index)
        return self.generator

    def add_request(self, request_id: str, prompt_token_ids: list[int], sampling_params: SamplingParams) -> None:
        """Queue a request. Raises ``ValueError`` for an empty prompt, a duplicate id, token ids
        outside the vocabulary, or ``len(prompt) + max_tokens > max_model_len``."""
        if not prompt_token_ids:
            raise ValueError("prompt is empty: send at least one token")
        if request_id in self._requests:
            raise ValueError(f"request id {request_id!r} is already in use")
        vocab = self.model_config.vocab_size
        if any(not isinstance(t, int) or t < 0 or t >= vocab for t in prompt_token_ids):
            raise ValueError(f"prompt token ids must be integers in [0, {vocab})")
        total = len(prompt_token_ids) + sampling_params.max_tokens
        if total > self.max_model_len:
            raise ValueError(
                f"prompt ({len(prompt_token_ids)} tokens) + max_tokens ({sampling_params.max_tokens}) = {total} "
                f"exceeds max_model_len={self.max_model_len}: shorten the prompt or lower max_tokens")
        seq = Sequence(request_id, prompt_token_ids, sampling_params, index=0,
                       generator=self._generator(sampling_params, 0), seq_id=next(self._ids))
        seq.pending_forks = sampling_params.n - 1
        self._requests[request_id] = _Request(request_id, [seq])
        self.scheduler.add(seq)

    def abort(self, request_id: str) -> None:
        """Stop a request and free its blocks; an unknown (or finished) id is a no-op."""
        if self._requests.pop(request_id, None) is not None:
            self.scheduler.abort(request_id)

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    # ------------------------------------------------------------------ the step
    def _propose(self, sched) -> dict[int, Proposal]:
        todo = [s for s in sched.scheduled if s.num_lookahead > 0 and s.samples]
        if not todo or self.proposer is None:
            return {}
        seqs = [s.seq for s in todo]
        ks = [s.num_lookahead for s in todo]
        if isinstance(self.proposer, DraftModelProposer):
            props = self.proposer.propose_batch(seqs, ks, [s.generator for s in seqs])
        else:
            props = self.proposer.propose_batch(seqs, ks)
        return {s.seq_id: p for s, p in zip(seqs, props) if p.token_ids}

    def step(self) -> list[RequestOutput]:
        """One scheduler iteration; a :class:`RequestOutput` for every sequence that produced tokens
        or finished in it."""
        sched = self.scheduler.schedule()
        if sched.is_empty:
            return []
        self.runner.copy_blocks(sched.blocks_to_copy)
        if self.draft_runner is not None:
            self.draft_runner.copy_blocks(sched.blocks_to_copy)
        proposals = self._propose(sched)
        items = []
        for s in sched.scheduled:
            seq = s.seq
            toks = seq.token_ids[s.start:s.start + s.num_new_tokens]
            prop = proposals.get(seq.seq_id)
            if prop is not None:
                toks = toks + prop.token_ids
            n_logits = (1 + (len(prop.token_ids) if prop else 0)) if s.samples else 0
            items.append(BatchItem(toks, s.start, seq.block_table, n_logits))
        logits = self.runner.run(items)

        # sample plain rows in one batch; verify speculative rows per sequence
        plain_rows, plain_params, plain_gens, plain_owner = [], [], [], []
        spec: list[tuple] = []
        row = 0
        for s, it in zip(sched.scheduled, items):
            if not it.num_logits:
                continue
            seq = s.seq
            prop = proposals.get(seq.seq_id)
            if prop is not None:
                spec.append((s, prop, logits[row:row + it.num_logits]))
            else:
                n = 1 + seq.pending_forks if seq.num_output_tokens == 0 else 1
                for j in range(n):
                    plain_rows.append(row)
                    plain_params.append(seq.sampling_params)
                    plain_gens.append(seq.generator if j == 0 else self._generator(seq.sampling_params, seq.index + j))
                    plain_owner.append((s, j))
            row += it.num_logits
        new_tokens: dict[int, tuple[list[int], int]] = {}  # seq_id -> (tokens, accepted drafts)
        forks: dict[int, list[tuple[int, torch.Generator | None]]] = {}
        if plain_rows:
            idx = torch.tensor(plain_rows, device=logits.device)
            toks = self.sampler(logits.index_select(0, idx), plain_params, plain_gens)
            for (s, j), tok, gen in zip(plain_owner, toks, plain_gens):
                if j == 0:
                    new_tokens[s.seq.seq_id] = ([tok], 0)
                else:
                    forks.setdefault(s.seq.seq_id, []).append((tok, gen))
        for s, prop, rows in spec:
            seq = s.seq
            a, toks = self.rejection_sampler(rows, prop.token_ids, prop.draft_probs, seq.sampling_params, seq.generator)
            new_tokens[seq.seq_id] = (toks, a)
            self.spec_num_draft_tokens += len(prop.token_ids)
            self.spec_num_accepted_tokens += a
            self.spec_num_verify_steps += 1

        outputs: list[RequestOutput] = []
        for s in sched.scheduled:
            seq = s.seq
            got = new_tokens.get(seq.seq_id)
            seq.num_computed_tokens = s.start + s.num_new_tokens + (got[1] if got else 0)
            if got is None:
                self.block_manager.cache_full_blocks(seq)
                continue
            if self.draft_runner is not None:
                seq.num_draft_computed = min(seq.num_draft_computed, s.start + s.num_new_tokens + got[1])
            children = []
            for tok, gen in forks.get(seq.seq_id, []):
                child = seq.fork(index=len(self._requests[seq.request_id].seqs), generator=gen, seq_id=next(self._ids))
                if self.block_manager.fork(seq, child):
                    child.status = SequenceStatus.RUNNING
                    self.scheduler.running.append(child)
                else:  # naive KV with no free reservation: recompute the child later
                    child.num_computed_tokens = child.num_draft_computed = child.num_registered_blocks = 0
                    self.scheduler.add(child)
                self._requests[seq.request_id].seqs.append(child)
                children.append((child, [tok]))
            seq.pending_forks = 0
            for target, toks in [(seq, got[0])] + children:
                outputs.append(self._append(target, toks))
        for seq in sched.preempted:
            seq.num_draft_computed = 0
        for out in outputs:
            if out.finished:
                req = self._requests.get(out.request_id)
                if req is not None and all(x.is_finished for x in req.seqs):
                    del self._requests[out.request_id]
        return outputs

    def _append(self, seq: Sequence, toks: list[int]) -> RequestOutput:
        """Append sampled tokens, stopping at EOS / stop_token_ids / max_tokens / max_model_len."""
        p = seq.sampling_params
        stop_ids = set(p.stop_token_ids or ())
        emitted: list[int] = []
        reason = None
        for tok in toks:
            seq.token_ids.append(tok)
            emitted.append(tok)
            if (not p.ignore_eos and tok in self.eos_token_ids) or tok in stop_ids:
                reason = "stop"
            elif seq.num_output_tokens >= p.max_tokens or len(seq) >= self.max_model_len:
                reason = "length"
            if reason:
                break
        self.block_manager.cache_full_blocks(seq)
        if reason:
            self.scheduler.finish(seq, reason)
        return RequestOutput(seq.request_id, emitted, reason is not None, reason, seq.num_prompt_tokens,
                             seq.num_cached_tokens, seq.num_output_tokens, seq.index)

    # ------------------------------------------------------------------ offline API
    def generate(self, prompts: list[list[int]] | list[str],
                 sampling_params: SamplingParams | list[SamplingParams]) -> list[GenerateOutput]:
        """Run ``prompts`` (token id lists or strings, tokenized with the chat-free tokenizer) to
        completion; one :class:`GenerateOutput` per prompt and sample index, in prompt order.
        Raises ``ValueError`` for a params list of the wrong length or an invalid prompt."""
        if isinstance(sampling_params, list) and len(sampling_params) != len(prompts):
            raise ValueError(f"got {len(sampling_params)} sampling params for {len(prompts)} prompts")
        params = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(prompts)
        token_lists = [self.tokenizer(p)["input_ids"] if isinstance(p, str) else list(p) for p in prompts]
        base = next(self._ids)
        rids = [f"gen-{base}-{i}" for i in range(len(prompts))]
        reqs = []
        try:
            for rid, toks, sp in zip(rids, token_lists, params):
                self.add_request(rid, toks, sp)
                reqs.append(self._requests[rid])
        except ValueError:
            for req in reqs:  # all or nothing: drop the prompts already queued
                self.abort(req.request_id)
            raise
        while self.has_unfinished():
            self.step()
        out = []
        for rid, toks, req in zip(rids, token_lists, reqs):
            for seq in sorted(req.seqs, key=lambda s: s.index):
                ids = seq.output_token_ids
                out.append(GenerateOutput(rid, toks, ids, self.tokenizer.decode(ids, skip_special_tokens=True),
                                          seq.finish_reason, seq.num_cached_tokens, seq.index))
        return out

    def stats(self) -> dict:
        """Gauges and cumulative counters: num_running, num_waiting, kv_blocks_total, kv_blocks_used,
        prefix_cache_queries / prefix_cache_hits (prompt tokens), num_preemptions,
        spec_num_draft_tokens, spec_num_accepted_tokens, spec_num_verify_steps, plus derived
        prefix_cache_hit_rate, spec_acceptance_rate (accepted / drafted) and spec_mean_accepted_length
        (tokens emitted per verification, incl. the bonus/resampled token; vLLM's convention)."""
        bm = self.block_manager
        steps = self.spec_num_verify_steps
        return {
            "num_running": len(self.scheduler.running),
            "num_waiting": len(self.scheduler.waiting),
            "kv_blocks_total": bm.num_blocks,
            "kv_blocks_used": bm.num_used_blocks,
            "prefix_cache_queries": bm.prefix_cache_queries,
            "prefix_cache_hits": bm.prefix_cache_hits,
            "prefix_cache_hit_rate": bm.prefix_cache_hits / bm.prefix_cache_queries if bm.prefix_cache_queries else 0.0,
            "num_preemptions": self.scheduler.num_preemptions,
            "spec_num_draft_tokens": self.spec_num_draft_tokens,
            "spec_num_accepted_tokens": self.spec_num_accepted_tokens,
            "spec_num_verify_steps": steps,
            "spec_acceptance_rate": (self.spec_num_accepted_tokens / self.spec_num_draft_tokens
                                     if self.spec_num_draft_tokens else 0.0),
            "spec_mean_accepted_length": 1.0 + self.spec_num_accepted_tokens / steps if steps else 0.0,
        }
