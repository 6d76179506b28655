"""The reference engine on the real default model: equality with Hugging Face transformers
(greedy), logits of chunked prefill / prefix-cache hits vs one full forward, n > 1 with CoW,
preemption, finish reasons and request validation."""

from __future__ import annotations

import os

import pytest
import torch

from own_engine.config import ConfigError, EngineConfig, ModelConfig
from own_engine.engine import LLMEngine
from own_engine.sampling_params import SamplingParams

pytestmark = pytest.mark.slow
os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(1)

PROMPTS = [
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n\n"
    "def factorial(n):\n    if n < 2:\n        return 1\n    return",
    "The capital of France is Paris. The capital of Germany is Berlin. The capital of Italy is",
    "Once upon a time, in a small village by the sea, there lived",
]
NEW = 24


@pytest.fixture(scope="module")
def model_dir():
    from harness.app.core.model import resolve_model

    return resolve_model(None)


@pytest.fixture(scope="module")
def prompt_ids(model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    return [tok(p)["input_ids"] for p in PROMPTS]


@pytest.fixture(scope="module")
def hf_refs(model_dir, prompt_ids):
    """Greedy continuations from transformers' own generate (stops at EOS like the engine)."""
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    refs = []
    for ids in prompt_ids:
        x = torch.tensor([ids])
        out = hf.generate(x, attention_mask=torch.ones_like(x), max_new_tokens=NEW, do_sample=False)
        refs.append(out[0, len(ids):].tolist())
    del hf
    return refs


GREEDY = SamplingParams(temperature=0, max_tokens=NEW)


@pytest.fixture(scope="module", autouse=True)
def share_weights(share_model_weights):
    """Load the weights once per module (tests/conftest.py)."""
    yield


def make_engine(model_dir, **kw):
    kw.setdefault("max_model_len", 512)
    return LLMEngine(EngineConfig(model_dir=model_dir, **kw))


def assert_no_leak(engine):
    s = engine.stats()
    assert s["num_running"] == 0 and s["num_waiting"] == 0
    assert s["kv_blocks_used"] == 0
    assert all(b.ref_count == 0 for b in engine.block_manager.blocks)
    assert engine.scheduler.requests == {}  # finished and aborted requests are forgotten


@pytest.fixture(scope="module")
def default_engine(model_dir):
    return make_engine(model_dir)


def test_single_and_batched_greedy_match_transformers_with_prefix_hits(default_engine, prompt_ids, hf_refs):
    e = default_engine
    for ids, ref in zip(prompt_ids, hf_refs):  # single requests
        assert e.generate([ids], GREEDY)[0].output_token_ids == ref
    hits_before = e.stats()["prefix_cache_hits"]
    outs = e.generate(prompt_ids, GREEDY)  # batched; prompts now hit the prefix cache
    assert [o.output_token_ids for o in outs] == hf_refs
    assert all(o.num_cached_tokens > 0 for o in outs if len(o.prompt_token_ids) > 16)
    assert e.stats()["prefix_cache_hits"] - hits_before == sum(o.num_cached_tokens for o in outs)
    assert all(o.finish_reason in ("stop", "length") for o in outs)
    assert_no_leak(e)


@pytest.mark.parametrize("kw", [
    dict(enable_prefix_caching=False, enable_chunked_prefill=False),
    dict(max_num_batched_tokens=13),  # prompts split into many chunks, mixed with decodes
    dict(batching="static", kv_allocation="naive"),
    dict(num_kv_blocks=14, block_size=8, max_num_batched_tokens=64, max_num_seqs=8),  # forces preemption by recompute
    dict(attention_backend="torch", linear_backend="dense"),  # the PyTorch paths the fast ones replace
], ids=["no-cache-no-chunk", "chunked-13", "static-naive", "preempt", "torch-attention-dense-linear"])
def test_ablations_give_identical_greedy_tokens(model_dir, prompt_ids, hf_refs, kw):
    e = make_engine(model_dir, **({"max_model_len": 96} if "num_kv_blocks" in kw else {}), **kw)
    outs = e.generate(prompt_ids, GREEDY)
    assert [o.output_token_ids for o in outs] == hf_refs
    if "num_kv_blocks" in kw:
        assert e.stats()["num_preemptions"] > 0
    assert_no_leak(e)


@pytest.mark.parametrize("spec", ["ngram", "draft"])
def test_speculative_greedy_matches_transformers(model_dir, prompt_ids, hf_refs, spec):
    e = make_engine(model_dir, speculative=spec, num_speculative_tokens=3)
    if spec == "ngram":  # batch 1
        assert e.generate([prompt_ids[0]], GREEDY)[0].output_token_ids == hf_refs[0]
    outs = e.generate(prompt_ids, GREEDY)  # batched verification
    assert [o.output_token_ids for o in outs] == hf_refs
    s = e.stats()
    assert s["spec_num_verify_steps"] > 0 and s["spec_num_draft_tokens"] > 0
    assert 0 <= s["spec_num_accepted_tokens"] <= s["spec_num_draft_tokens"]
    if spec == "ngram":  # the code prompt repeats itself: prompt lookup must hit
        assert s["spec_num_accepted_tokens"] > 0
    assert_no_leak(e)


def test_chunked_prefill_and_prefix_hits_match_full_forward_logits(default_engine, prompt_ids):
    from own_engine.batch import BatchItem
    from own_engine.model_runner import ModelRunner

    model = default_engine.runner.model
    ids = prompt_ids[0]
    n = len(ids)
    r = ModelRunner(model, num_blocks=16, block_size=16, device=default_engine.device)
    full = r.run([BatchItem(ids, 0, [0, 1, 2, 3], n)])
    # chunked: 3 uneven chunks into other blocks, logits of every position
    bt = [5, 6, 7, 8]
    parts = [r.run([BatchItem(ids[a:b], a, bt, b - a)]) for a, b in [(0, 13), (13, 40), (40, n)]]
    # chunks and the full prompt take different attention paths (and, without the panel GEMM, oneDNN
    # vs MKL for short chunks): fp32 rounding of logits up to ~40 differs by ~1e-4 (6e-6 relative)
    torch.testing.assert_close(torch.cat(parts), full, atol=5e-4, rtol=1e-4)
    # prefix-cache hit: a new sequence reuses blocks 0-1 (32 tokens) and computes only the rest,
    # batched with an unrelated decode
    hit = r.run([BatchItem(ids[32:], 32, [0, 1, 9, 10], n - 32), BatchItem(ids[5:6], 5, [11], 1)])
    torch.testing.assert_close(hit[:n - 32], full[32:], atol=5e-4, rtol=1e-4)


def test_engine_prefix_cache_counts_and_last_token_is_computed(model_dir, prompt_ids):
    e = make_engine(model_dir, block_size=16)
    ids = prompt_ids[0][:48]  # exactly 3 full blocks
    a = e.generate([ids], GREEDY)[0]
    b = e.generate([ids], GREEDY)[0]
    assert a.num_cached_tokens == 0
    assert b.num_cached_tokens == 32  # at most len - 1 tokens: the last block is recomputed
    assert b.output_token_ids == a.output_token_ids and len(b.output_token_ids) > 0
    assert e.stats()["prefix_cache_queries"] == 96 and e.stats()["prefix_cache_hits"] == 32


def test_n_samples_fork_with_copy_on_write(default_engine, prompt_ids, hf_refs):
    e = default_engine
    cows = e.block_manager.num_cow_copies
    outs = e.generate([prompt_ids[1]], SamplingParams(temperature=0, max_tokens=NEW, n=3))
    assert [o.index for o in outs] == [0, 1, 2]
    assert all(o.output_token_ids == hf_refs[1] for o in outs)  # greedy: every fork agrees
    assert e.block_manager.num_cow_copies > cows  # the shared partial block was copied
    seeded = SamplingParams(temperature=1.0, top_p=0.9, max_tokens=12, n=2, seed=11, ignore_eos=True)
    x = e.generate([prompt_ids[2]], seeded)
    y = e.generate([prompt_ids[2]], seeded)
    assert [o.output_token_ids for o in x] == [o.output_token_ids for o in y]  # per-request seed
    assert x[0].output_token_ids != x[1].output_token_ids  # seed + index differ
    assert_no_leak(e)


def test_finish_reasons_abort_and_validation(default_engine, prompt_ids, hf_refs):
    e = default_engine
    ref = hf_refs[1]
    stop_at = ref[3]
    out = e.generate([prompt_ids[1]], SamplingParams(temperature=0, max_tokens=NEW, stop_token_ids=[stop_at]))[0]
    assert out.output_token_ids == ref[:ref.index(stop_at) + 1] and out.finish_reason == "stop"
    out = e.generate([prompt_ids[1]], SamplingParams(temperature=0, max_tokens=2))[0]
    assert out.output_token_ids == ref[:2] and out.finish_reason == "length"
    e.add_request("x", prompt_ids[0], SamplingParams(temperature=0, max_tokens=50))
    outs = e.step()
    assert outs[0].request_id == "x" and len(outs[0].new_token_ids) == 1 and outs[0].num_output_tokens == 1
    assert e.stats()["kv_blocks_used"] > 0
    e.abort("x")
    e.abort("never-seen")
    assert not e.has_unfinished()
    assert_no_leak(e)
    with pytest.raises(ValueError, match="empty"):
        e.add_request("a", [], GREEDY)
    with pytest.raises(ValueError, match="max_model_len"):
        e.add_request("b", [1] * 500, SamplingParams(max_tokens=100))
    with pytest.raises(ValueError, match="vocabulary|token ids"):
        e.add_request("c", [10**9], GREEDY)


def test_config_errors_are_one_line(model_dir):
    with pytest.raises(ConfigError, match="batching"):
        make_engine(model_dir, batching="dynamic")
    with pytest.raises(ConfigError, match="KV cache holds"):
        make_engine(model_dir, num_kv_blocks=2)
    with pytest.raises(ConfigError, match="max_position_embeddings"):
        make_engine(model_dir, max_model_len=10**6)
    mc = ModelConfig.from_dir(model_dir)
    assert (mc.num_layers, mc.num_heads, mc.num_kv_heads, mc.head_dim) == (30, 9, 3, 64)
    assert mc.kv_bytes_per_block(16) == 2 * 30 * 16 * 3 * 64 * 4


def test_model_config_agrees_with_the_harness_geometry(model_dir, tmp_path):
    # own_engine reads config.json itself (it imports nothing of results); the harness's reader
    # and KV formula (results.model_geometry) must give the same sizes on the same folders
    import json

    from results.model_geometry import kv_bytes_per_token, read_model_summary

    base = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 4,
            "hidden_size": 256, "num_attention_heads": 8, "intermediate_size": 512, "vocab_size": 1000}
    folders = [model_dir]
    for i, extra in enumerate(({}, {"num_key_value_heads": 2, "head_dim": 64})):  # defaults, then GQA
        folder = tmp_path / f"m{i}"
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({**base, **extra}))
        folders.append(folder)
    for folder in folders:
        mc, geometry = ModelConfig.from_dir(folder), read_model_summary(folder)
        assert (mc.num_layers, mc.hidden_size, mc.num_heads, mc.num_kv_heads, mc.head_dim, mc.vocab_size) == (
            geometry.num_layers, geometry.hidden_size, geometry.num_heads, geometry.num_kv_heads, geometry.head_dim,
            geometry.vocab_size)
        for layers, dtype_bytes in ((None, 4), (2, 2)):
            assert mc.kv_bytes_per_block(16, layers, dtype_bytes=dtype_bytes) == 16 * kv_bytes_per_token(
                mc.num_layers if layers is None else layers, geometry.num_kv_heads, geometry.head_dim, dtype_bytes)
    (folders[1] / "config.json").write_text(json.dumps({k: v for k, v in base.items() if k != "vocab_size"}))
    with pytest.raises(ConfigError, match="vocab_size"):
        ModelConfig.from_dir(folders[1])


def test_triton_kernel_matches_cpu_path():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    pytest.importorskip("triton", reason="needs Triton")
    from own_engine.attention import build_metadata, paged_attention, write_kv
    from own_engine.triton_attention import triton_paged_attention

    g = torch.Generator().manual_seed(0)
    H, nkv, D, bs, nblocks = 9, 3, 64, 16, 64
    q_lens, ctx_lens = [37, 1, 4, 1, 20], [37, 50, 70, 1, 100]
    tables = [[3, 9, 10], [1, 2, 4, 5], [6, 7, 8, 11, 12], [13], [14, 15, 16, 17, 18, 19, 20]]
    T = sum(q_lens)
    q = torch.randn(T, H, D, generator=g)
    k = torch.randn(T, nkv, D, generator=g)
    v = torch.randn(T, nkv, D, generator=g)
    kc = torch.randn(nblocks, bs, nkv, D, generator=g)
    vc = torch.randn(nblocks, bs, nkv, D, generator=g)
    meta = build_metadata(q_lens, ctx_lens, tables, bs, H, nkv, torch.device("cpu"))
    write_kv(k, v, kc, vc, meta.slot_mapping)
    ref = paged_attention(q, k, v, kc, vc, meta, D ** -0.5)
    dev = torch.device("cuda")
    meta_c = build_metadata(q_lens, ctx_lens, tables, bs, H, nkv, dev)
    out = triton_paged_attention(q.to(dev), k.to(dev), v.to(dev), kc.to(dev), vc.to(dev), meta_c, D ** -0.5)
    torch.testing.assert_close(out.cpu(), ref, atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("num_kv_blocks", [6, 12], ids=["no-room-recompute", "copy"])
def test_naive_kv_n_samples(model_dir, prompt_ids, hf_refs, num_kv_blocks):
    # max_model_len 96 / block 16 = one 6-block reservation per sequence
    e = make_engine(model_dir, kv_allocation="naive", max_model_len=96, num_kv_blocks=num_kv_blocks)
    outs = e.generate([prompt_ids[1]], SamplingParams(temperature=0, max_tokens=NEW, n=2))
    assert [o.output_token_ids for o in outs] == [hf_refs[1], hf_refs[1]]
    assert_no_leak(e)
