"""LLMEngine: the reference engine's request API (``add_request`` / ``step`` / ``abort`` /
``generate``), in vLLM's shape.

One :meth:`LLMEngine.step` = the scheduler plans (continuous batching, chunked prefill,
preemption) → :meth:`LLMEngine._execute` runs it (KV block copies for CoW, draft proposals for
speculative decoding, ONE batched target forward, sampling / verification, and the logprobs of
the requests that ask for them) → the scheduler applies the result (append tokens, check EOS /
stop_token_ids / max_tokens, fork ``n > 1`` children, finish sequences and free their blocks).
"""

from __future__ import annotations

import itertools
import logging

import torch

from own_engine.batch import BatchItem
from own_engine.block_manager import BlockManager
from own_engine.config import ConfigError, EngineConfig, ModelConfig
from own_engine.cuda_graphs import capture_sizes
from own_engine.model import LlamaModel
from own_engine.model_runner import ModelRunner, select_attention
from own_engine.outputs import Fork, GenerateOutput, RequestOutput, SampledTokens, TokenLogprobs
from own_engine.sampler import Sampler, compute_logprobs
from own_engine.sampling_params import SamplingParams
from own_engine.scheduler import Scheduler, SchedulerOutput
from own_engine.sequence import Sequence
from own_engine.spec_decode import (AdaptiveK, DraftModelProposer, NgramProposer, Proposal, RejectionSampler,
                                    default_cost_per_token)

__all__ = ["GenerateOutput", "LLMEngine", "RequestOutput"]


class LLMEngine:
    """The reference engine over one Llama-architecture model folder.

    Attributes: ``tokenizer`` (transformers tokenizer of ``model_dir``), ``max_model_len`` (tokens),
    ``config``, ``model_config``, ``num_kv_blocks``, ``max_num_seqs`` (effective), ``device``,
    ``attention_backend`` (``"triton"``, ``"native"`` or ``"torch"``) and ``attention_note`` (why ``auto`` fell back to ``"torch"``, else None),
    ``dtype`` (weights and KV cache, a ``torch.dtype``), ``cuda_graphs_active`` (pure-decode steps
    replay CUDA graphs, :mod:`own_engine.cuda_graphs`) and ``cuda_graphs_note`` (why not, else None).
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
        self.dtype = getattr(torch, config.resolve_dtype(self.device.type))  # ConfigError: half dtype on CPU
        self.model_config = mc = ModelConfig.from_dir(config.model_dir)
        self.max_model_len = config.resolve_max_model_len(mc)
        self.draft_model_config = draft_mc = config.resolve_draft_model(mc)  # None unless speculative_model
        self.num_kv_blocks = config.resolve_num_kv_blocks(mc, self.max_model_len, draft_mc)
        self.tokenizer = AutoTokenizer.from_pretrained(str(config.model_dir))
        spec_k = config.num_speculative_tokens if config.speculative != "none" else 0
        max_blocks_per_seq = -(-(self.max_model_len + spec_k) // config.block_size)
        self.block_manager = BlockManager(self.num_kv_blocks, config.block_size, config.enable_prefix_caching,
                                          config.kv_allocation, max_blocks_per_seq)
        self.eos_token_ids = set(mc.eos_token_ids)
        if self.tokenizer.eos_token_id is not None:
            self.eos_token_ids.add(self.tokenizer.eos_token_id)
        self.max_num_seqs = config.resolve_max_num_seqs(self.num_kv_blocks)
        self.scheduler = Scheduler(self.block_manager, self.max_num_seqs, config.max_num_batched_tokens,
                                   self.max_model_len, config.enable_chunked_prefill, config.batching, spec_k,
                                   self.eos_token_ids)
        attention_fn, self.attention_backend, self.attention_note = select_attention(
            self.device, config.attention_backend)
        model = LlamaModel.from_dir(config.model_dir, mc, self.max_model_len + spec_k + 1, self.device, attention_fn,
                                    linear_backend=config.linear_backend, dtype=self.dtype)
        graphs = config.cuda_graphs and self.device.type == "cuda"
        self.runner = ModelRunner(model, self.num_kv_blocks, config.block_size, self.device, scratch_block=graphs)
        if not config.cuda_graphs:
            self._graphs_note: str | None = "cuda_graphs=False"
        elif not graphs:
            self._graphs_note = f"CUDA graphs need a CUDA device, got {self.device}"
        else:  # captured now, before any request (see own_engine.cuda_graphs)
            sizes = capture_sizes(config.cuda_graph_batch_sizes, min(self.max_num_seqs, self.num_kv_blocks))
            self._graphs_note = self.runner.enable_cuda_graphs(sizes, max_blocks_per_seq)
        self.sampler = Sampler()
        self.rejection_sampler = RejectionSampler()
        self.proposer = None
        self.draft_runner = None
        if config.speculative == "ngram":
            self.proposer = NgramProposer()
        elif config.speculative == "draft":
            if draft_mc is not None:  # a separate model: own weights, own KV geometry, same block pool
                draft = LlamaModel.from_dir(config.speculative_model, draft_mc, self.max_model_len + spec_k + 1,
                                            self.device, attention_fn, linear_backend=config.linear_backend,
                                            dtype=self.dtype)
            else:
                if not 1 <= config.draft_num_layers <= mc.num_layers:
                    raise ConfigError(f"draft_num_layers must be in [1, {mc.num_layers}] (the model's layers), "
                                      f"got {config.draft_num_layers}")
                draft = model.truncated(config.draft_num_layers)
            self.draft_runner = ModelRunner(draft, self.num_kv_blocks, config.block_size, self.device)  # eager
            self.proposer = DraftModelProposer(self.draft_runner)
        cost = config.spec_cost_per_token
        if cost is None:
            cost = default_cost_per_token(
                mc, draft_mc, config.draft_num_layers if config.speculative == "draft" and draft_mc is None else None)
        self.spec_policy = AdaptiveK(float(cost), enabled=config.adaptive_speculation)
        logging.getLogger("own_engine").info(
            "engine on %s: attention %s, linears %s, %d threads, max_num_seqs %d, %d KV blocks of %d tokens%s",
            self.device, self.attention_backend, model.linear_kernels, config.threads, self.max_num_seqs,
            self.num_kv_blocks, config.block_size, " (huge pages)" if self.runner.kv_huge_pages else "")
        self.generator = torch.Generator().manual_seed(config.seed)
        self._ids = itertools.count()
        self.spec_num_draft_tokens = 0
        self.spec_num_accepted_tokens = 0
        self.spec_num_verify_steps = 0

    @property
    def cuda_graphs_active(self) -> bool:
        """True while pure-decode steps of the target model replay CUDA graphs (False on CPU, with
        ``cuda_graphs=False``, and after a failed capture check or replay: ``cuda_graphs_note``)."""
        g = self.runner.graphs
        return g is not None and g.enabled

    @property
    def cuda_graphs_note(self) -> str | None:
        """Why CUDA graphs are off (one line), None while they are active."""
        g = self.runner.graphs
        if g is not None:
            return None if g.enabled else g.note
        return self._graphs_note

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
        if request_id in self.scheduler.requests:
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
        self.scheduler.add(seq)

    def abort(self, request_id: str) -> None:
        """Stop a request and free its blocks; an unknown (or finished) id is a no-op."""
        self.scheduler.abort(request_id)

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    # ------------------------------------------------------------------ the step
    def step(self) -> list[RequestOutput]:
        """One iteration: schedule → run → update. A :class:`RequestOutput` for every sequence
        that produced tokens in it (finished ones included)."""
        plan = self.scheduler.schedule()
        if plan.is_empty:
            return []
        sampled = self._execute(plan)
        return self.scheduler.update_from_output(plan, sampled)

    def _execute(self, plan: SchedulerOutput) -> SampledTokens:
        """Run ``plan`` on the model: apply its KV block copies, propose draft tokens, ONE target
        forward over every scheduled sequence, then sample (and verify drafts)."""
        self.runner.copy_blocks(plan.blocks_to_copy)
        if self.draft_runner is not None:
            self.draft_runner.copy_blocks(plan.blocks_to_copy)
        proposals = self._propose(plan)
        items = []
        for s in plan.scheduled:
            seq = s.seq
            toks = seq.token_ids[s.start:s.start + s.num_new_tokens]
            prop = proposals.get(seq.seq_id)
            if prop is not None:
                toks = toks + prop.token_ids
            n_logits = (1 + (len(prop.token_ids) if prop else 0)) if s.samples else 0
            items.append(BatchItem(toks, s.start, seq.block_table, n_logits))
        logits = self.runner.run(items)
        return self._sample(plan, items, logits, proposals)

    def _propose(self, plan: SchedulerOutput) -> dict[int, Proposal]:
        todo = [s for s in plan.scheduled if s.num_lookahead > 0 and s.samples]
        if not todo or self.proposer is None:
            return {}
        # adaptive k: at most the reserved slots (unused reserved slots are never written)
        chosen = [(s.seq, self.spec_policy.num_tokens(s.seq, s.num_lookahead)) for s in todo]
        chosen = [(seq, k) for seq, k in chosen if k > 0]
        if not chosen:
            return {}
        seqs = [seq for seq, _ in chosen]
        ks = [k for _, k in chosen]
        if isinstance(self.proposer, DraftModelProposer):
            props = self.proposer.propose_batch(seqs, ks, [s.generator for s in seqs])
        else:
            props = self.proposer.propose_batch(seqs, ks)
        return {s.seq_id: p for s, p in zip(seqs, props) if p.token_ids}

    def _sample(self, plan: SchedulerOutput, items: list[BatchItem], logits: torch.Tensor,
                proposals: dict[int, Proposal]) -> SampledTokens:
        """Tokens from ``logits`` (``[sum(item.num_logits), vocab]`` fp32, items in plan order): plain
        rows are sampled in one batch (a prompt's last row ``1 + pending_forks`` times for
        ``n > 1``); speculative rows are verified per sequence by the rejection sampler. Then,
        only for the sequences whose request asked for logprobs, :func:`compute_logprobs` over
        the rows that scored their emitted tokens (a fork: its parent's row; speculation: the
        target's verify row of each accepted draft and of the bonus/resampled token)."""
        plain_rows, plain_params, plain_gens, plain_owner = [], [], [], []
        spec: list[tuple] = []
        row = 0
        for s, it in zip(plan.scheduled, items):
            if not it.num_logits:
                continue
            seq = s.seq
            prop = proposals.get(seq.seq_id)
            if prop is not None:
                spec.append((seq, prop, row, logits[row:row + it.num_logits]))
            else:
                n = 1 + seq.pending_forks if seq.num_output_tokens == 0 else 1
                for j in range(n):
                    plain_rows.append(row)
                    plain_params.append(seq.sampling_params)
                    plain_gens.append(seq.generator if j == 0 else self._generator(seq.sampling_params, seq.index + j))
                    plain_owner.append((seq, j))
            row += it.num_logits
        out = SampledTokens()
        # logprob jobs: (logits row, emitted token, top k, where it goes: (seq_id, fork number or -1))
        lp_jobs: list[tuple[int, int, int, tuple[int, int]]] = []
        forks: list[tuple[Sequence, Fork]] = []
        if plain_rows:
            idx = torch.tensor(plain_rows, device=logits.device)
            toks = self.sampler(logits.index_select(0, idx), plain_params, plain_gens)
            for (seq, j), tok, gen, r in zip(plain_owner, toks, plain_gens, plain_rows):
                if j == 0:
                    out.token_ids[seq.seq_id] = [tok]
                else:
                    forks.append((seq, Fork(tok, gen, next(self._ids))))
                k = seq.sampling_params.logprobs
                if k is not None:
                    lp_jobs.append((r, tok, k, (seq.seq_id, len(forks) - 1 if j else -1)))
        for seq, prop, r0, rows in spec:
            a, toks = self.rejection_sampler(rows, prop.token_ids, prop.draft_probs, seq.sampling_params, seq.generator)
            out.token_ids[seq.seq_id] = toks
            out.num_accepted[seq.seq_id] = a
            k = seq.sampling_params.logprobs
            if k is not None:  # emitted token i was scored by verify row i
                lp_jobs.extend((r0 + i, tok, k, (seq.seq_id, -1)) for i, tok in enumerate(toks))
            self.spec_policy.observe(seq, len(prop.token_ids), a)
            self.spec_num_draft_tokens += len(prop.token_ids)
            self.spec_num_accepted_tokens += a
            self.spec_num_verify_steps += 1
        fork_lps: dict[int, TokenLogprobs] = {}
        if lp_jobs:
            idx = torch.tensor([j[0] for j in lp_jobs], device=logits.device)
            lps = compute_logprobs(logits.index_select(0, idx), [j[1] for j in lp_jobs], [j[2] for j in lp_jobs])
            for (_, _, _, (seq_id, f)), lp in zip(lp_jobs, lps):
                if f < 0:
                    out.logprobs.setdefault(seq_id, []).append(lp)
                else:
                    fork_lps[f] = lp
        for f, (seq, fork) in enumerate(forks):
            if f in fork_lps:
                fork = Fork(fork.token_id, fork.generator, fork.seq_id, fork_lps[f])
            out.forks.setdefault(seq.seq_id, []).append(fork)
        return out

    # ------------------------------------------------------------------ offline API
    def generate(self, prompts: list[list[int]] | list[str],
                 sampling_params: SamplingParams | list[SamplingParams]) -> list[GenerateOutput]:
        """Run ``prompts`` (token id lists or strings, tokenized with the chat-free tokenizer) to
        completion; one :class:`GenerateOutput` per prompt and sample index, in prompt order (with
        its tokens' :class:`TokenLogprobs` when its params ask for ``logprobs``).
        Raises ``ValueError`` for a params list of the wrong length or an invalid prompt."""
        if isinstance(sampling_params, list) and len(sampling_params) != len(prompts):
            raise ValueError(f"got {len(sampling_params)} sampling params for {len(prompts)} prompts")
        params = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(prompts)
        token_lists = [self.tokenizer(p)["input_ids"] if isinstance(p, str) else list(p) for p in prompts]
        base = next(self._ids)
        rids = [f"gen-{base}-{i}" for i in range(len(prompts))]
        reqs: list[list[Sequence]] = []  # each request's sequences (children are added as they fork)
        try:
            for rid, toks, sp in zip(rids, token_lists, params):
                self.add_request(rid, toks, sp)
                reqs.append(self.scheduler.requests[rid])
        except ValueError:
            for rid in rids[:len(reqs)]:  # all or nothing: drop the prompts already queued
                self.abort(rid)
            raise
        logprobs: dict[tuple[str, int], list[TokenLogprobs]] = {}
        while self.has_unfinished():
            for o in self.step():
                if o.new_logprobs is not None:
                    logprobs.setdefault((o.request_id, o.index), []).extend(o.new_logprobs)
        out = []
        for rid, toks, seqs, sp in zip(rids, token_lists, reqs, params):
            for seq in sorted(seqs, key=lambda s: s.index):
                ids = seq.output_token_ids
                out.append(GenerateOutput(rid, toks, ids, self.tokenizer.decode(ids, skip_special_tokens=True),
                                          seq.finish_reason, seq.num_cached_tokens, seq.index,
                                          None if sp.logprobs is None else logprobs.get((rid, seq.index), [])))
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
