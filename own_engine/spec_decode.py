"""Speculative decoding: proposers and the rejection sampler.

- :class:`NgramProposer`: prompt-lookup decoding (Saxena 2023; vLLM's ``ngram`` method): find the
  most recent earlier occurrence of the sequence's last n tokens (n from ``max_n`` down to
  ``min_n``) and propose the tokens that followed it. Deterministic: its q is a point mass.
- :class:`DraftModelProposer`: a draft model with its own KV cache, addressed through the target's
  block tables (same slots, separate tensors). Either a separate Llama model loaded from
  ``EngineConfig.speculative_model`` (same vocabulary, any size/KV geometry) or, by default, the
  layer-truncated self-draft (first ``draft_num_layers`` layers + final norm + LM head of the same
  weights).
- :class:`AdaptiveK`: how many draft tokens to propose per step and sequence, from its running
  acceptance rate (Leviathan et al. 2023's walltime model; see the class).
- :class:`RejectionSampler`: verifies k draft tokens against the target's k+1 distributions from
  ONE target forward with the exact rule of Leviathan et al. 2023 (§2.3) / Chen et al. 2023
  (Alg. 2): accept draft ``x`` with probability ``min(1, p(x)/q(x))``; on the first rejection emit
  a sample of ``normalize(max(0, p - q))``; if all k are accepted emit a bonus sample of ``p_{k+1}``.
  The emitted tokens are distributed exactly as sampling from the target. For greedy requests this
  is exact match with the target argmax.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from own_engine.batch import BatchItem
from own_engine.config import ModelConfig
from own_engine.model_runner import ModelRunner
from own_engine.sampler import processed_probs
from own_engine.sampling_params import SamplingParams
from own_engine.sequence import Sequence


@dataclass
class Proposal:
    """Draft tokens for one sequence and, for a sampling draft model, their q rows [k, vocab]
    (``None`` = deterministic proposal, q is a point mass on each token)."""

    token_ids: list[int]
    draft_probs: torch.Tensor | None = None


class NgramProposer:
    """Prompt-lookup proposer. ``propose(token_ids, k)`` → up to ``k`` tokens (possibly none).

    Defaults min_n=2, max_n=4: 1-gram matches proposed mostly wrong tokens on our code prompts (n-gram
    acceptance 0.52 vs 0.67, TPOT speedup 1.47x vs 1.71x at batch 1, measured under load).
    """

    def __init__(self, min_n: int = 2, max_n: int = 4) -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError(f"need 1 <= min_n <= max_n, got min_n={min_n}, max_n={max_n}")
        self.min_n = min_n
        self.max_n = max_n

    def propose(self, token_ids: list[int], k: int) -> list[int]:
        """Tokens following the most recent earlier match of the longest suffix n-gram."""
        if k <= 0:
            return []
        arr = np.asarray(token_ids, dtype=np.int64)
        L = arr.shape[0]
        for n in range(min(self.max_n, L - 1), self.min_n - 1, -1):
            windows = np.lib.stride_tricks.sliding_window_view(arr[:-1], n)
            hits = np.flatnonzero((windows == arr[L - n:]).all(axis=1))
            if hits.size:
                start = int(hits[-1]) + n
                return arr[start:start + k].tolist()
        return []

    def propose_batch(self, seqs: list[Sequence], ks: list[int]) -> list[Proposal]:
        return [Proposal(self.propose(s.token_ids, k)) for s, k in zip(seqs, ks)]


class DraftModelProposer:
    """Autoregressive draft model over its own KV cache (``runner``), sharing the target's block
    tables and slot mapping. ``seq.num_draft_computed`` tracks the positions the draft has valid K/V
    for; each proposal first catches up on the missing tokens, then drafts k tokens in k batched
    forwards (the first one is the catch-up)."""

    def __init__(self, runner: ModelRunner) -> None:
        self.runner = runner

    def propose_batch(self, seqs: list[Sequence], ks: list[int],
                      generators: list[torch.Generator | None]) -> list[Proposal]:
        """Up to ``ks[i]`` draft tokens per sequence; sampled with each request's parameters."""
        live = [i for i, k in enumerate(ks) if k > 0]
        drafts: list[list[int]] = [[] for _ in seqs]
        qrows: list[list[torch.Tensor]] = [[] for _ in seqs]
        items = []
        for i in live:
            s = seqs[i]
            start = min(s.num_draft_computed, len(s) - 1)
            items.append(BatchItem(s.token_ids[start:], start, s.block_table, 1))
        step = 0
        while live:
            logits = self.runner.run(items)
            params = [seqs[i].sampling_params for i in live]
            toks, probs = self._pick(logits, params, [generators[i] for i in live])
            nxt, items = [], []
            for j, i in enumerate(live):
                drafts[i].append(toks[j])
                if probs is not None and not params[j].greedy:
                    qrows[i].append(probs[j])
                s = seqs[i]
                pos = len(s) + step  # position of the token just drafted
                s.num_draft_computed = pos  # K/V valid for positions < pos
                if len(drafts[i]) < ks[i]:
                    nxt.append(i)
                    items.append(BatchItem([toks[j]], pos, s.block_table, 1))
            live = nxt
            step += 1
        return [Proposal(d, torch.stack(q) if q else None) for d, q in zip(drafts, qrows)]

    @staticmethod
    def _pick(logits: torch.Tensor, params: list[SamplingParams], gens) -> tuple[list[int], torch.Tensor | None]:
        if all(p.greedy for p in params):
            return logits.argmax(-1).tolist(), None
        probs = processed_probs(logits, params).cpu()  # generators live on the CPU
        toks = [int(logits[j].argmax()) if p.greedy else int(torch.multinomial(probs[j], 1, generator=gens[j]))
                for j, p in enumerate(params)]
        return toks, probs


# ---------------------------------------------------------------------------- adaptive k
VERIFY_COST_PER_TOKEN = 0.1
"""Marginal cost of verifying one more draft row in the target forward (plus proposing it with the
n-gram proposer), relative to a plain decode step. Rough, from the n-gram numbers measured for
:class:`NgramProposer` (acceptance 0.67 at k=4, TPOT speedup 1.71x at batch 1): eq. 1 gives
(1 - 0.67^5) / 0.33 = 2.62 tokens per step, so a step cost 2.62 / 1.71 = 1.53 decode steps, i.e.
c <= (1.53 - 1) / 4 = 0.13 (less, since some steps found no match and drafted nothing)."""


def expected_tokens(alpha: float, k: int) -> float:
    """Expected tokens emitted by one verification of ``k`` drafts when each draft is accepted
    independently with probability ``alpha`` (accepted prefix + the bonus/resampled token):
    ``(1 - alpha^(k+1)) / (1 - alpha)`` (Leviathan et al. 2023, §3.1, eq. 1); ``k + 1`` at alpha=1."""
    if alpha >= 1.0:
        return k + 1.0
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def choose_num_draft_tokens(alpha: float, k_max: int, cost_per_token: float) -> int:
    """``k`` in ``[0, k_max]`` maximising tokens per unit cost, ``expected_tokens(alpha, k) /
    (1 + cost_per_token * k)`` - Leviathan et al. 2023's walltime improvement factor
    (1 - a^(g+1)) / ((1 - a)(g c + 1)) (Theorem 3.8; §3.4 picks the optimal g from it). A step
    with k drafts costs ``1 + c k`` plain decode steps. Ties go to the smaller k; 0 = plain decode
    (it wins whenever ``alpha <= cost_per_token``)."""
    best_k, best = 0, 1.0
    for k in range(1, max(k_max, 0) + 1):
        v = expected_tokens(alpha, k) / (1.0 + cost_per_token * k)
        if v > best + 1e-12:
            best_k, best = k, v
    return best_k


def decode_weight_count(cfg: ModelConfig, num_layers: int | None = None) -> int:
    """Weights one decoded token multiplies (its cost on memory-bound hardware): per layer
    ``h (H + 2 H_kv) d`` (q, k, v) + ``H d h`` (o) + ``3 h i`` (gate, up, down), over ``num_layers``
    (default all), plus the LM head ``vocab h``; the embedding lookup and norms are left out."""
    h, d = cfg.hidden_size, cfg.head_dim
    per_layer = h * (cfg.num_heads + 2 * cfg.num_kv_heads) * d + cfg.num_heads * d * h + 3 * h * cfg.intermediate_size
    layers = cfg.num_layers if num_layers is None else num_layers
    return layers * per_layer + cfg.vocab_size * h


def default_cost_per_token(target: ModelConfig, draft: ModelConfig | None = None,
                           draft_num_layers: int | None = None) -> float:
    """``EngineConfig.spec_cost_per_token`` when left ``None``: :data:`VERIFY_COST_PER_TOKEN`, plus
    for a draft model the cost of one draft forward relative to a target decode step, estimated
    as the ratio of :func:`decode_weight_count` (``draft``'s, or ``draft_num_layers`` layers of the
    target for the self-draft; neither = n-gram, no draft forward). E.g. SmolLM2-135M with its
    8-layer self-draft: 0.1 + 0.42."""
    if draft is None and draft_num_layers is None:
        return VERIFY_COST_PER_TOKEN
    num = decode_weight_count(draft) if draft is not None else decode_weight_count(target, draft_num_layers)
    return VERIFY_COST_PER_TOKEN + num / decode_weight_count(target)


class AdaptiveK:
    """Per-sequence choice of the number of draft tokens, from a running acceptance rate.

    Model (Leviathan et al. 2023, §3.1): each draft token is accepted independently with
    probability ``alpha``. Each sequence keeps ``seq.spec_alpha``, an exponentially weighted mean
    over verified draft positions: a step that accepted ``a`` of ``k`` drafts tested ``n = a + 1``
    positions (``a`` successes then the rejection; ``n = k`` when all were accepted - positions
    after a rejection are never tested, so ``a / k`` would underestimate alpha), and
    ``alpha <- (1 - w)^n alpha + (1 - (1 - w)^n) a / n``. Each step proposes
    ``k = choose_num_draft_tokens(alpha, k_max, cost_per_token)`` with ``k_max`` the slots the
    scheduler reserved (up to ``num_speculative_tokens``; unused reserved slots are never written).

    Constants: ``prior`` 0.7 = alpha before the first verification, about the acceptance measured
    for the n-gram proposer on code prompts (0.67), so a sequence starts near its typical optimum
    (k = k_max for n-gram at c = 0.1) and a bad proposer is dropped after a few steps. ``weight``
    0.1 per tested position: a memory of about 10 positions (2-3 steps at k = 4), short enough to
    follow a sequence moving between repetitive and novel text; its noise (std about 0.11 at
    alpha = 0.7) costs little because tokens/cost is flat near the optimum (k = 3..5 within 2 % at
    alpha = 0.7, c = 0.1). Probing: when k = 0 wins, alpha gets no new data, so every
    ``probe_interval``-th (8) consecutive step without drafts still proposes 1 token; that costs
    about ``c / 8`` of a step (about 1 %) and lets alpha recover (one accepted probe lifts alpha
    from near 0 above c = 0.1). ``enabled=False``: always ``k_max`` (the fixed-k ablation).
    """

    def __init__(self, cost_per_token: float, enabled: bool = True, prior: float = 0.7, weight: float = 0.1,
                 probe_interval: int = 8) -> None:
        if cost_per_token < 0 or not math.isfinite(cost_per_token):
            raise ValueError(f"cost_per_token must be a finite number >= 0, got {cost_per_token}")
        if not 0.0 <= prior <= 1.0 or not 0.0 < weight <= 1.0 or probe_interval < 1:
            raise ValueError(f"need prior in [0, 1], weight in (0, 1], probe_interval >= 1; got "
                             f"{prior}, {weight}, {probe_interval}")
        self.cost_per_token = cost_per_token
        self.enabled = enabled
        self.prior = prior
        self.weight = weight
        self.probe_interval = probe_interval

    def alpha(self, seq: Sequence) -> float:
        return self.prior if seq.spec_alpha is None else seq.spec_alpha

    def num_tokens(self, seq: Sequence, k_max: int) -> int:
        """Drafts to propose for ``seq`` this step (0..``k_max``); advances its probe counter, so
        call it once per step and sequence."""
        if k_max <= 0:
            return 0
        if not self.enabled:
            return k_max
        k = choose_num_draft_tokens(self.alpha(seq), k_max, self.cost_per_token)
        if k == 0:
            seq.spec_idle_steps += 1
            if seq.spec_idle_steps < self.probe_interval:
                return 0
            k = 1  # the probe
        seq.spec_idle_steps = 0
        return k

    def observe(self, seq: Sequence, num_drafted: int, num_accepted: int) -> None:
        """Fold one verification (``num_accepted`` of ``num_drafted`` drafts) into ``seq.spec_alpha``."""
        if num_drafted <= 0:
            return
        n = num_accepted + (1 if num_accepted < num_drafted else 0)
        decay = (1.0 - self.weight) ** n
        seq.spec_alpha = decay * self.alpha(seq) + (1.0 - decay) * num_accepted / n


class RejectionSampler:
    """Exact speculative verification (see the module docstring for the rule and its sources)."""

    def __call__(self, target_logits: torch.Tensor, draft_token_ids: list[int], draft_probs: torch.Tensor | None,
                 params: SamplingParams, generator: torch.Generator | None) -> tuple[int, list[int]]:
        """``target_logits`` [k+1, vocab] (row i scores the token after draft i-1); ``draft_probs``
        [k, vocab] or None (point mass). Returns ``(num_accepted, emitted_tokens)`` with
        ``len(emitted) == num_accepted + 1``."""
        k = len(draft_token_ids)
        if target_logits.shape[0] != k + 1:
            raise ValueError(f"need {k + 1} target rows for {k} draft tokens, got {target_logits.shape[0]}")
        if params.greedy:
            best = target_logits.argmax(-1).tolist()
            a = 0
            while a < k and best[a] == draft_token_ids[a]:
                a += 1
            return a, draft_token_ids[:a] + [best[a]]
        p = processed_probs(target_logits, [params] * (k + 1))
        return self.verify_probs(p, draft_token_ids, draft_probs, generator)

    @staticmethod
    def verify_probs(p: torch.Tensor, draft_token_ids: list[int], q: torch.Tensor | None,
                     generator: torch.Generator | None) -> tuple[int, list[int]]:
        """The rule on probabilities: ``p`` [k+1, vocab] target, ``q`` [k, vocab] draft or None."""
        k = len(draft_token_ids)
        p = p.cpu()
        q = None if q is None else q.cpu()
        u = torch.rand(k, generator=generator, dtype=p.dtype) if k else None
        for i, x in enumerate(draft_token_ids):
            px = float(p[i, x])
            qx = 1.0 if q is None else float(q[i, x])
            if float(u[i]) * qx < px:  # u < p/q, i.e. accept with probability min(1, p/q)
                continue
            if q is None:
                residual = p[i].clone()
                residual[x] = 0.0
            else:
                residual = torch.clamp(p[i] - q[i], min=0.0)
            total = float(residual.sum())
            dist = residual / total if total > 0 else p[i]
            tok = int(torch.multinomial(dist, 1, generator=generator))
            return i, list(draft_token_ids[:i]) + [tok]
        tok = int(torch.multinomial(p[k], 1, generator=generator))
        return k, list(draft_token_ids) + [tok]
