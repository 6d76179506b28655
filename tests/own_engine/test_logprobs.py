"""Logprobs from the reference engine (``SamplingParams.logprobs``), on a locally written random-weight
model: equal to Hugging Face transformers' log_softmax of the same weights (greedy and sampled: raw,
before temperature / top-k / top-p), the same through chunked prefill, prefix-cache hits, ``n > 1``
forks and speculative decoding (n-gram; a self-draft that is the whole target, so every draft is
accepted), cut at a stop token, and absent for requests that did not ask."""

from __future__ import annotations

import os

import pytest
import torch

from own_engine.config import EngineConfig
from own_engine.engine import LLMEngine
from own_engine.outputs import TokenLogprobs
from own_engine.random_model import RandomLlamaSpec, write_random_llama
from own_engine.sampler import compute_logprobs
from own_engine.sampling_params import MAX_LOGPROBS, SamplingParams

os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(1)

SPEC = RandomLlamaSpec(num_layers=2, hidden_size=96, num_heads=6, num_kv_heads=2, head_dim=16,
                       intermediate_size=192, vocab_size=300, max_position_embeddings=512, seed=1)
NEW = 8
K = 5
GREEDY = SamplingParams(temperature=0, max_tokens=NEW, ignore_eos=True, logprobs=K)
ATOL = 1e-3  # fp32 logits of different (paged vs dense) attention paths; measured max about 1e-6


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return write_random_llama(tmp_path_factory.mktemp("random_llama"), SPEC)


@pytest.fixture(scope="module")
def prompts():
    g = torch.Generator().manual_seed(0)
    pattern = torch.randint(3, SPEC.vocab_size, (6,), generator=g).tolist()
    return [torch.randint(3, SPEC.vocab_size, (n,), generator=g).tolist() for n in (5, 40, 70)] + [pattern * 5]


@pytest.fixture(scope="module")
def hf_model(model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()


def engine(model_dir, **kw):
    kw.setdefault("max_model_len", 256)
    kw.setdefault("device", "cpu")
    return LLMEngine(EngineConfig(model_dir=model_dir, **kw))


def hf_logprobs(hf_model, prompt: list[int], output: list[int]) -> torch.Tensor:
    """[len(output), vocab]: transformers' log_softmax of the raw logits that scored each output token."""
    with torch.no_grad():
        logits = hf_model(torch.tensor([prompt + output])).logits[0].float()
    return torch.log_softmax(logits[len(prompt) - 1:len(prompt) - 1 + len(output)], dim=-1)


def max_diff_vs_hf(hf_model, prompt, out, k) -> float:
    """Check ``out`` (a GenerateOutput with logprobs) against transformers; the max abs difference."""
    ref = hf_logprobs(hf_model, prompt, out.output_token_ids)
    assert out.logprobs is not None and len(out.logprobs) == len(out.output_token_ids)
    worst = 0.0
    for i, (tok, lp) in enumerate(zip(out.output_token_ids, out.logprobs)):
        assert lp.token_id == tok
        worst = max(worst, abs(lp.logprob - float(ref[i, tok])))
        top = ref[i].topk(k)
        assert list(lp.top_token_ids) == top.indices.tolist()  # the same set, in the same order
        assert len(lp.top_logprobs) == k and list(lp.top_logprobs) == sorted(lp.top_logprobs, reverse=True)
        worst = max(worst, max(abs(a - b) for a, b in zip(lp.top_logprobs, top.values.tolist())))
    assert worst <= ATOL, worst
    return worst


def test_greedy_logprobs_equal_transformers_log_softmax(model_dir, prompts, hf_model):
    outs = engine(model_dir).generate(prompts, GREEDY)
    diffs = [max_diff_vs_hf(hf_model, p, o, K) for p, o in zip(prompts, outs)]
    print(f"max |engine - transformers| logprob: {max(diffs):.3g}")
    for o in outs:  # greedy: the generated token is the top-1 entry
        for lp in o.logprobs:
            assert lp.top_token_ids[0] == lp.token_id and lp.top_logprobs[0] == lp.logprob
            assert lp.logprob <= 0.0


def test_sampled_logprobs_are_raw_before_temperature_top_k_top_p(model_dir, prompts, hf_model):
    params = SamplingParams(temperature=1.7, top_k=4, top_p=0.9, seed=3, max_tokens=NEW, ignore_eos=True,
                            logprobs=K, n=2)
    outs = engine(model_dir).generate(prompts[:2], params)
    assert len(outs) == 4
    for o in outs:
        prompt = prompts[0] if o.request_id == outs[0].request_id else prompts[1]
        max_diff_vs_hf(hf_model, prompt, o, K)  # the model's distribution, not the processed one
        # top-k=4 keeps the raw top 4 (temperature keeps the order): the token is among the top 5
        assert all(lp.token_id in lp.top_token_ids[:4] for lp in o.logprobs)
    assert outs[0].output_token_ids != outs[1].output_token_ids  # two samples, each with its own logprobs


def _assert_same_logprobs(got, ref, atol=ATOL):
    assert [o.output_token_ids for o in got] == [o.output_token_ids for o in ref]
    for g, r in zip(got, ref):
        assert len(g.logprobs) == len(r.logprobs) == len(g.output_token_ids)
        for a, b in zip(g.logprobs, r.logprobs):
            assert (a.token_id, a.top_token_ids) == (b.token_id, b.top_token_ids)
            assert abs(a.logprob - b.logprob) <= atol
            assert max(abs(x - y) for x, y in zip(a.top_logprobs, b.top_logprobs)) <= atol


@pytest.mark.parametrize("kw", [dict(max_num_batched_tokens=7), dict(block_size=4), dict(attention_backend="torch"),
                                dict(num_kv_blocks=12, block_size=8, max_num_batched_tokens=64, max_num_seqs=8)],
                         ids=["chunked-7", "bs4-prefix-hits", "torch-attention", "preempt"])
def test_logprobs_agree_across_engine_mechanisms(model_dir, prompts, kw):
    preempt = "num_kv_blocks" in kw  # 12 blocks of 8 = 96 tokens: the 70-token prompt + 24 fills the pool
    params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True, logprobs=K) if preempt else GREEDY
    ref = engine(model_dir, enable_prefix_caching=False, enable_chunked_prefill=False).generate(prompts, params)
    e = engine(model_dir, **({"max_model_len": 96} if preempt else {}), **kw)
    _assert_same_logprobs(e.generate(prompts, params), ref)
    if kw.get("block_size") == 4:  # again: the prompts now come from the prefix cache
        hits = e.stats()["prefix_cache_hits"]
        _assert_same_logprobs(e.generate(prompts, params), ref)
        assert e.stats()["prefix_cache_hits"] > hits
    if preempt:
        assert e.stats()["num_preemptions"] > 0
    assert e.stats()["kv_blocks_used"] == 0


def test_n_greedy_forks_each_carry_the_logprobs_and_k0_only_the_token(model_dir, prompts):
    e = engine(model_dir)
    one = e.generate([prompts[1]], GREEDY)[0]
    outs = e.generate([prompts[1]], SamplingParams(temperature=0, max_tokens=NEW, ignore_eos=True, logprobs=K, n=3))
    assert [o.index for o in outs] == [0, 1, 2]
    _assert_same_logprobs(outs, [one] * 3)
    k0 = e.generate([prompts[1]], SamplingParams(temperature=0, max_tokens=NEW, ignore_eos=True, logprobs=0))[0]
    assert [(lp.top_token_ids, lp.top_logprobs) for lp in k0.logprobs] == [((), ())] * NEW
    assert [lp.logprob for lp in k0.logprobs] == pytest.approx([lp.logprob for lp in one.logprobs], abs=ATOL)
    plain = e.generate([prompts[1]], SamplingParams(temperature=0, max_tokens=NEW, ignore_eos=True))[0]
    assert plain.logprobs is None and plain.output_token_ids == one.output_token_ids


@pytest.mark.parametrize("kw", [dict(speculative="ngram", num_speculative_tokens=3),
                                dict(speculative="draft", draft_num_layers=SPEC.num_layers, num_speculative_tokens=4),
                                dict(speculative="draft", draft_num_layers=1, num_speculative_tokens=3)],
                         ids=["ngram", "full-self-draft", "1-layer-draft"])
def test_speculative_greedy_logprobs_equal_the_plain_run(model_dir, prompts, kw):
    ref = engine(model_dir).generate(prompts, GREEDY)
    e = engine(model_dir, adaptive_speculation=False, **kw)  # always draft: every step verifies
    _assert_same_logprobs(e.generate(prompts, GREEDY), ref)
    s = e.stats()
    assert s["spec_num_verify_steps"] > 0
    if kw.get("draft_num_layers") == SPEC.num_layers:  # the draft is the target: drafts accepted, bonus rows used
        assert s["spec_num_accepted_tokens"] >= s["spec_num_draft_tokens"] // 2 > 0
    # a stop token in the middle of accepted drafts: the logprobs stop with the tokens
    stop_at = ref[1].output_token_ids[3]
    params = SamplingParams(temperature=0, max_tokens=NEW, ignore_eos=True, logprobs=K, stop_token_ids=[stop_at])
    out = e.generate([prompts[1]], params)[0]
    cut = ref[1].output_token_ids.index(stop_at) + 1
    assert out.output_token_ids == ref[1].output_token_ids[:cut] and out.finish_reason == "stop"
    assert [lp.token_id for lp in out.logprobs] == out.output_token_ids
    assert e.stats()["kv_blocks_used"] == 0


def test_step_outputs_carry_one_logprob_per_new_token(model_dir, prompts):
    e = engine(model_dir, speculative="draft", draft_num_layers=SPEC.num_layers, num_speculative_tokens=4,
               adaptive_speculation=False)
    e.add_request("a", prompts[0], GREEDY)
    e.add_request("b", prompts[1], SamplingParams(temperature=0, max_tokens=NEW, ignore_eos=True))
    seen = 0
    while e.has_unfinished():
        for o in e.step():
            if o.request_id == "a":
                assert [lp.token_id for lp in o.new_logprobs] == o.new_token_ids
                seen += len(o.new_token_ids)
            else:
                assert o.new_logprobs is None
    assert seen == NEW


def test_compute_logprobs_top_k_per_row():
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.0], [0.0, 0.0, 5.0, -1.0]])
    ref = torch.log_softmax(logits, -1)
    a, b = compute_logprobs(logits, [0, 2], [3, 0])
    assert isinstance(a, TokenLogprobs)
    assert a.token_id == 0 and a.logprob == pytest.approx(float(ref[0, 0]))
    assert a.top_token_ids == (1, 2, 0) and a.top_logprobs == pytest.approx(tuple(ref[0, [1, 2, 0]].tolist()))
    assert (b.token_id, b.top_token_ids, b.top_logprobs) == (2, (), ())
    assert b.logprob == pytest.approx(float(ref[1, 2]))
    assert compute_logprobs(logits[:0], [], []) == []
    with pytest.raises(ValueError, match="2 logits rows for 1 tokens"):
        compute_logprobs(logits, [0], [1])


@pytest.mark.parametrize("bad", [-1, MAX_LOGPROBS + 1, True, 1.5])
def test_sampling_params_logprobs_bounds(bad):
    with pytest.raises(ValueError, match=rf"logprobs must be None or an integer in \[0, {MAX_LOGPROBS}\]"):
        SamplingParams(logprobs=bad)
