"""Speculative decoding pieces without the model: n-gram proposer, the rejection sampler's law and the
adaptive-k policy (expected tokens, the k choice, acceptance tracking and probes)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from own_engine.config import ModelConfig
from own_engine.sampler import Sampler, processed_probs
from own_engine.sampling_params import SamplingParams
from own_engine.sequence import Sequence
from own_engine.spec_decode import (AdaptiveK, NgramProposer, RejectionSampler, choose_num_draft_tokens,
                                    decode_weight_count, default_cost_per_token, expected_tokens)


def test_ngram_proposes_continuation_of_most_recent_match():
    p = NgramProposer(min_n=1, max_n=3)
    toks = [5, 6, 7, 8, 9, 1, 5, 6, 7, 2, 3, 5, 6, 7]
    # suffix [5,6,7] occurs at 0 and 6; the most recent earlier one (6) is followed by 2, 3
    assert p.propose(toks, 2) == [2, 3]
    assert p.propose(toks, 10) == [2, 3, 5, 6, 7]  # clipped at the end of the sequence
    assert p.propose([1, 2, 3, 4], 3) == []  # no earlier match
    assert p.propose([4, 9, 4], 2) == [9, 4]  # falls back to a 1-gram
    assert NgramProposer(min_n=2).propose([4, 9, 4], 2) == []
    assert p.propose(toks, 0) == []


def _first_token_freqs(p, q_or_none, draft_sampler, trials, seed=1234):
    """Empirical distribution of the first emitted token over many verifications."""
    gen = torch.Generator().manual_seed(seed)
    counts = np.zeros(p.shape[1])
    accepted = 0
    rs = RejectionSampler()
    for _ in range(trials):
        drafts = draft_sampler(gen)
        a, toks = rs.verify_probs(p, drafts, q_or_none, gen)
        assert len(toks) == a + 1
        counts[toks[0]] += 1
        accepted += a
    return counts / trials, accepted


def _chi2_ok(freqs, probs, n):
    """Pearson chi-square against the target law; threshold = df + 5 sqrt(2 df) (far tail)."""
    mask = probs > 0
    assert freqs[~mask].sum() == 0, "emitted a token the target gives probability 0"
    expected = probs[mask] * n
    chi2 = float((((freqs[mask] * n) - expected) ** 2 / expected).sum())
    df = int(mask.sum()) - 1
    return chi2, df + 5 * np.sqrt(2 * df)


def test_rejection_sampler_emits_the_target_distribution_draft_model():
    p_first = torch.tensor([0.05, 0.4, 0.1, 0.3, 0.15, 0.0])
    q_first = torch.tensor([0.3, 0.1, 0.3, 0.1, 0.1, 0.1])  # badly mismatched draft
    p = torch.stack([p_first, torch.full((6,), 1 / 6)])  # k = 1 draft token + bonus row
    q = q_first.unsqueeze(0)

    def draft(gen):
        return [int(torch.multinomial(q_first, 1, generator=gen))]

    n = 8000
    freqs, accepted = _first_token_freqs(p, q, draft, n)
    chi2, limit = _chi2_ok(freqs, p_first.numpy(), n)
    assert chi2 < limit, (chi2, limit, freqs)
    assert np.abs(freqs - p_first.numpy()).sum() / 2 < 0.03  # total variation
    # acceptance rate = sum_x min(p(x), q(x)) (Leviathan et al. 2023, §3.1)
    beta = float(torch.minimum(p_first, q_first).sum())
    assert abs(accepted / n - beta) < 0.02, (accepted / n, beta)


def test_rejection_sampler_point_mass_ngram_draft():
    p_first = torch.tensor([0.1, 0.2, 0.3, 0.4])
    p = torch.stack([p_first, torch.full((4,), 0.25)])
    n = 8000
    freqs, accepted = _first_token_freqs(p, None, lambda gen: [3], n)
    chi2, limit = _chi2_ok(freqs, p_first.numpy(), n)
    assert chi2 < limit, (chi2, limit, freqs)
    assert abs(accepted / n - 0.4) < 0.02  # accept a deterministic draft with probability p(x)


def test_greedy_verification_is_exact_match():
    logits = torch.full((4, 8), -5.0)
    for row, best in enumerate([3, 1, 6, 2]):
        logits[row, best] = 5.0
    rs = RejectionSampler()
    greedy = SamplingParams(temperature=0)
    assert rs(logits, [3, 1, 6], None, greedy, None) == (3, [3, 1, 6, 2])
    assert rs(logits, [3, 4, 6], None, greedy, None) == (1, [3, 1])
    assert rs(logits, [0, 1, 6], None, greedy, None) == (0, [3])
    with pytest.raises(ValueError, match="target rows"):
        rs(logits, [3], None, greedy, None)


def test_processed_probs_top_k_top_p_temperature():
    logits = torch.log(torch.tensor([[0.5, 0.25, 0.15, 0.1]]))
    p = processed_probs(logits, [SamplingParams(temperature=1.0, top_k=2)])
    assert torch.allclose(p, torch.tensor([[2 / 3, 1 / 3, 0, 0]]), atol=1e-6)
    p = processed_probs(logits, [SamplingParams(temperature=1.0, top_p=0.7)])  # 0.5 + 0.25 reaches 0.7
    assert torch.allclose(p, torch.tensor([[2 / 3, 1 / 3, 0, 0]]), atol=1e-6)
    p = processed_probs(logits, [SamplingParams(temperature=1.0, top_p=0.4)])  # top token alone
    assert torch.allclose(p, torch.tensor([[1.0, 0, 0, 0]]))
    p = processed_probs(logits, [SamplingParams(temperature=0.5)])
    expected = torch.tensor([0.5, 0.25, 0.15, 0.1]) ** 2
    assert torch.allclose(p[0], expected / expected.sum(), atol=1e-6)
    p = processed_probs(logits, [SamplingParams(temperature=0)])
    assert p.tolist() == [[1.0, 0.0, 0.0, 0.0]]


def test_sampler_seeded_rows_are_reproducible():
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0))
    params = [SamplingParams(temperature=0), SamplingParams(temperature=1.0), SamplingParams(temperature=1.0)]
    s = Sampler()

    def run():
        return s(logits, params, [None, torch.Generator().manual_seed(5), torch.Generator().manual_seed(6)])

    a, b = run(), run()
    assert a == b and a[0] == int(logits[0].argmax())


@pytest.mark.parametrize("kwargs,match", [
    (dict(max_tokens=-1), "max_tokens"), (dict(top_p=0.0), "top_p"), (dict(top_p=1.5), "top_p"),
    (dict(top_k=0), "top_k"), (dict(temperature=-0.1), "temperature"), (dict(n=0), "n must"),
    (dict(stop_token_ids=[-3]), "stop_token_ids"),
])
def test_sampling_params_reject_bad_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SamplingParams(**kwargs)


# ---------------------------------------------------------------------------- adaptive k


def test_expected_tokens_is_leviathan_eq1():
    assert expected_tokens(0.5, 2) == pytest.approx(1 + 0.5 + 0.25)  # (1 - 0.5^3) / 0.5
    assert expected_tokens(0.0, 4) == 1.0
    assert expected_tokens(1.0, 4) == 5.0
    assert expected_tokens(0.9, 5) == pytest.approx((1 - 0.9 ** 6) / 0.1)


@pytest.mark.parametrize("alpha,k_max,c,k", [
    (0.9, 5, 0.1, 5),  # 4.69 tokens / 1.5 = 3.12 beats k=4: 4.10 / 1.4 = 2.93
    (0.1, 5, 0.1, 0),  # k=1 ties plain decode (1.1 / 1.1): ties go to the smaller k
    (0.0, 5, 0.0, 0),
    (0.7, 8, 0.1, 4),  # 2.77 / 1.4 = 1.981 > k=5: 2.94 / 1.5 = 1.961 > k=3: 2.53 / 1.3 = 1.948
    (0.67, 4, 0.52, 1),  # the 8-layer self-draft's cost: one draft (1.67 / 1.52 = 1.10 vs 2.12 / 2.04)
    (0.3, 4, 0.52, 0),  # alpha below c: drafting never pays
    (1.0, 6, 0.3, 6),
    (0.95, 3, 0.0, 3),  # free drafts: always the most
    (0.9, 0, 0.1, 0),
])
def test_choose_num_draft_tokens(alpha, k_max, c, k):
    assert choose_num_draft_tokens(alpha, k_max, c) == k
    best = max(expected_tokens(alpha, j) / (1 + c * j) for j in range(k_max + 1))
    assert expected_tokens(alpha, k) / (1 + c * k) == pytest.approx(best)


def _mc(**kw):
    base = dict(num_layers=30, hidden_size=576, num_heads=9, num_kv_heads=3, head_dim=64, intermediate_size=1536,
                vocab_size=49152, rms_norm_eps=1e-5, max_position_embeddings=8192, tie_word_embeddings=True)
    return ModelConfig(**{**base, **kw})


def test_default_cost_per_token_from_weight_counts():
    target = _mc()
    per_layer = 576 * (9 + 6) * 64 + 9 * 64 * 576 + 3 * 576 * 1536
    assert decode_weight_count(target) == 30 * per_layer + 49152 * 576
    assert decode_weight_count(target, 8) == 8 * per_layer + 49152 * 576
    assert default_cost_per_token(target) == 0.1  # n-gram: verification only
    self_draft = default_cost_per_token(target, draft_num_layers=8)
    assert self_draft == pytest.approx(0.1 + (8 * per_layer + 49152 * 576) / (30 * per_layer + 49152 * 576))
    assert self_draft == pytest.approx(0.521, abs=1e-3)
    tiny = _mc(num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2, head_dim=16, intermediate_size=128)
    assert default_cost_per_token(target, tiny) == pytest.approx(0.1 + decode_weight_count(tiny) / decode_weight_count(target))


def test_adaptive_k_tracks_acceptance_and_probes():
    seq = Sequence("r", [1, 2, 3], SamplingParams(temperature=0))
    pol = AdaptiveK(0.1)
    assert pol.alpha(seq) == 0.7 and pol.num_tokens(seq, 4) == 4  # the prior: speculate fully
    pol.observe(seq, 4, 2)  # 2 accepted then a rejection: 3 tested positions, 2 successes
    assert seq.spec_alpha == pytest.approx(0.9 ** 3 * 0.7 + (1 - 0.9 ** 3) * 2 / 3)
    seq.spec_alpha = 0.5
    pol.observe(seq, 3, 3)  # all accepted: 3 positions, all successes
    assert seq.spec_alpha == pytest.approx(0.9 ** 3 * 0.5 + (1 - 0.9 ** 3))
    pol.observe(seq, 0, 0)  # nothing drafted: no information
    assert seq.spec_alpha == pytest.approx(0.9 ** 3 * 0.5 + (1 - 0.9 ** 3))
    seq.spec_alpha = 0.02  # a bad proposer: plain decodes, and a 1-token probe every 8th step
    ks = [pol.num_tokens(seq, 4) for _ in range(24)]
    assert ks == ([0] * 7 + [1]) * 3
    pol.observe(seq, 1, 1)  # an accepted probe lifts alpha above c: speculation resumes
    assert seq.spec_alpha > 0.1 and pol.num_tokens(seq, 4) >= 1
    assert pol.num_tokens(seq, 0) == 0  # nothing reserved: nothing proposed
    fixed = AdaptiveK(0.1, enabled=False)
    seq.spec_alpha = 0.0
    assert [fixed.num_tokens(seq, k) for k in (0, 1, 4)] == [0, 1, 4]
    child = seq.fork(1, seq_id=9)
    assert child.spec_alpha == seq.spec_alpha
    with pytest.raises(ValueError, match="cost_per_token"):
        AdaptiveK(-1.0)
