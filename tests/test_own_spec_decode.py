"""Speculative decoding pieces without the model: n-gram proposer and the rejection sampler's law."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from own_engine.sampler import Sampler, processed_probs
from own_engine.sampling_params import SamplingParams
from own_engine.spec_decode import NgramProposer, RejectionSampler


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
