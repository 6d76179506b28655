"""The reference engine on a locally written random-weight model (no download): attention backend
selection and its fallback, the random model folder itself, and (with CUDA) the engine on the GPU
against the CPU. ``benchmarks/cuda_check.py`` runs the long version of the CUDA checks."""

from __future__ import annotations

import os

import pytest
import torch

from own_engine.config import ConfigError, EngineConfig
from own_engine.engine import LLMEngine
from own_engine.random_model import SMOLLM2_135M, RandomLlamaSpec, write_random_llama
from own_engine.sampling_params import SamplingParams

os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(1)

SPEC = RandomLlamaSpec(num_layers=2, hidden_size=96, num_heads=6, num_kv_heads=2, head_dim=16,
                       intermediate_size=192, vocab_size=300, max_position_embeddings=512, seed=1)
GREEDY = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return write_random_llama(tmp_path_factory.mktemp("random_llama"), SPEC)


@pytest.fixture(scope="module")
def prompts():
    g = torch.Generator().manual_seed(0)
    pattern = torch.randint(3, SPEC.vocab_size, (6,), generator=g).tolist()
    return [torch.randint(3, SPEC.vocab_size, (n,), generator=g).tolist() for n in (5, 40, 70)] + [pattern * 5]


def engine(model_dir, **kw):
    kw.setdefault("max_model_len", 256)
    kw.setdefault("device", "cpu")
    return LLMEngine(EngineConfig(model_dir=model_dir, **kw))


def test_random_model_folder_loads_with_its_tokenizer(model_dir):
    e = engine(model_dir)
    mc = e.model_config
    assert (mc.num_layers, mc.num_heads, mc.num_kv_heads, mc.head_dim, mc.vocab_size) == (2, 6, 2, 16, 300)
    assert e.tokenizer("t5 t299")["input_ids"] == [5, 299]
    assert e.tokenizer.decode([5, 299]) == "t5 t299"
    assert 2 in e.eos_token_ids
    assert (e.attention_backend, e.attention_note) == ("native", None)  # the C kernel, on any head geometry
    assert SMOLLM2_135M.num_params == 134_515_008  # the embedded default model's size: the shape is right


@pytest.mark.parametrize("bad,why", [
    (dict(hidden_size=100), "hidden_size 100 is not a multiple of num_heads 6"),
    (dict(num_kv_heads=4), "num_heads 6 is not a multiple of num_kv_heads 4"),
    (dict(head_dim=15), "head_dim must be even"),
    (dict(num_layers=0), "sizes must be integers >= 1"),
    (dict(hidden_size=96.0), "sizes must be integers >= 1"),
    (dict(num_layers=True), "sizes must be integers >= 1"),
])
def test_random_model_refuses_impossible_geometry_before_writing(tmp_path, bad, why):
    with pytest.raises(ValueError, match=why):
        write_random_llama(tmp_path / "m", SPEC.with_(**bad))
    assert not (tmp_path / "m").exists()  # refused up front, not blamed on the tokenizer afterwards


def test_random_model_greedy_agrees_across_engine_mechanisms(model_dir, prompts):
    ref = [o.output_token_ids for o in engine(model_dir, enable_prefix_caching=False, enable_chunked_prefill=False)
           .generate(prompts, GREEDY)]
    assert all(len(r) == GREEDY.max_tokens for r in ref)
    assert len({tuple(r) for r in ref}) > 1  # a random model that says the same thing everywhere tests nothing
    for kw in (dict(max_num_batched_tokens=7), dict(block_size=4), dict(speculative="ngram", num_speculative_tokens=3),
               dict(speculative="draft", draft_num_layers=1), dict(attention_backend="torch")):
        e = engine(model_dir, **kw)
        assert [o.output_token_ids for o in e.generate(prompts, GREEDY)] == ref, kw
        assert e.stats()["kv_blocks_used"] == 0


def test_attention_backend_selection_on_cpu():
    from own_engine.attention import paged_attention
    from own_engine.cpu_kernels import native_attention
    from own_engine.model_runner import select_attention

    assert select_attention(torch.device("cpu")) == (native_attention()[0], "native", None)
    assert select_attention(torch.device("cpu"), "native")[1] == "native"
    assert select_attention(torch.device("cpu"), "torch") == (paged_attention, "torch", None)
    with pytest.raises(ConfigError, match="needs a CUDA device"):
        select_attention(torch.device("cpu"), "triton")
    with pytest.raises(ConfigError, match="attention_backend"):
        select_attention(torch.device("cpu"), "flash")
    with pytest.raises(ConfigError, match="attention_backend"):
        EngineConfig(model_dir=".", attention_backend="flash").validate()


def test_auto_falls_back_to_torch_when_the_triton_kernel_is_unusable(monkeypatch, caplog):
    """A GPU machine without a C compiler (Triton builds its launcher at first use) or with a
    kernel that fails its smoke test still serves, on the PyTorch path, and says why."""
    from own_engine import model_runner
    from own_engine.attention import paged_attention

    cuda = torch.device("cuda")
    monkeypatch.setattr(model_runner, "_SMOKE", {"cuda": "Triton kernel failed on cuda: RuntimeError: Failed to find C compiler"})
    with caplog.at_level("WARNING", logger="own_engine"):
        fn, name, note = model_runner.select_attention(cuda)
    assert (fn, name) == (paged_attention, "torch") and "C compiler" in note
    assert "C compiler" in caplog.text
    with pytest.raises(ConfigError, match="unusable: .*C compiler"):
        model_runner.select_attention(cuda, "triton")
    assert model_runner.select_attention(cuda, "torch") == (paged_attention, "torch", None)


def test_triton_kernel_smoke_test_and_selection_on_cuda():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    pytest.importorskip("triton", reason="needs Triton")
    from own_engine.model_runner import select_attention, triton_unavailable_reason
    from own_engine.triton_attention import triton_paged_attention

    assert triton_unavailable_reason(torch.device("cuda")) is None
    assert select_attention(torch.device("cuda"))[:2] == (triton_paged_attention, "triton")


@pytest.mark.parametrize("kw", [{}, dict(max_num_batched_tokens=7, block_size=8), dict(speculative="ngram"),
                                dict(attention_backend="torch")], ids=["defaults", "chunked-bs8", "ngram", "torch-attn"])
def test_cuda_engine_matches_cpu_on_random_model(model_dir, prompts, kw):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from own_engine.batch import BatchItem
    from own_engine.model_runner import ModelRunner

    cpu = engine(model_dir, enable_prefix_caching=False, enable_chunked_prefill=False)
    gpu = engine(model_dir, device="cuda", **kw)
    if kw.get("attention_backend") != "torch":
        assert gpu.attention_backend == "triton", gpu.attention_note
    # logits of one mixed batch (prefill + a chunk over cached context + decode) on both devices
    items = [BatchItem(prompts[1], 0, [0, 1, 2], len(prompts[1])), BatchItem(prompts[2][:30], 0, [3, 4], 30)]
    items2 = [BatchItem(prompts[2][30:], 30, [3, 4, 5, 6, 7], 40), BatchItem([7], 40, [0, 1, 2], 1)]
    rc, rg = ModelRunner(cpu.runner.model, 8, 16, torch.device("cpu")), ModelRunner(gpu.runner.model, 8, 16, gpu.device)
    for batch in (items, items2):
        torch.testing.assert_close(rg.run(batch).cpu(), rc.run(batch), atol=1e-3, rtol=1e-3)
    ref = [o.output_token_ids for o in cpu.generate(prompts, GREEDY)]
    assert [o.output_token_ids for o in gpu.generate(prompts, GREEDY)] == ref
    assert gpu.stats()["kv_blocks_used"] == 0


def test_self_draft_deeper_than_the_model_is_a_config_error(model_dir):
    with pytest.raises(ConfigError) as exc:
        engine(model_dir, speculative="draft", draft_num_layers=5)
    assert str(exc.value) == "draft_num_layers must be in [1, 2] (the model's layers), got 5"
