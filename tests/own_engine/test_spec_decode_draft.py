"""Speculative decoding with a draft model from its own folder (``speculative_model``) and adaptive k.

The draft is a random-weight Llama (``own_engine.random_model``) with the default model's
vocabulary (49152) and a tiny, different KV geometry: a bad draft (acceptance near 0), so these
tests check that verification is exact (greedy output identical to plain decoding), that the KV
budget counts the draft's own layers, and that adaptive k stops proposing for it.
"""

from __future__ import annotations

import os

import pytest
import torch

from own_engine.config import ConfigError, EngineConfig, ModelConfig
from own_engine.random_model import RandomLlamaSpec, write_random_llama
from own_engine.sampling_params import SamplingParams

os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(1)

# 2 layers, 2 KV heads of 16 dims (the target: 30 layers, 3 KV heads of 64 dims)
DRAFT = RandomLlamaSpec(num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2, head_dim=16,
                        intermediate_size=128, vocab_size=49152, seed=3)
PROMPTS = ["def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return", "The capital of France is"]
NEW = 40
LEN = 256


@pytest.fixture(scope="module")
def model_dir():
    from harness.app.core.model import resolve_model

    return resolve_model(None)


@pytest.fixture(scope="module")
def draft_dir(tmp_path_factory):
    return write_random_llama(tmp_path_factory.mktemp("draft"), DRAFT)


@pytest.fixture(scope="module")
def share_weights(share_model_weights):
    """Each model folder's weights loaded once per module (tests/conftest.py)."""
    yield


def make_engine(model_dir, **kw):
    from own_engine.engine import LLMEngine

    kw.setdefault("max_model_len", LEN)
    kw.setdefault("num_kv_blocks", 64)
    return LLMEngine(EngineConfig(model_dir=model_dir, **kw))


GREEDY = SamplingParams(temperature=0, max_tokens=NEW, ignore_eos=True)


@pytest.fixture(scope="module")
def plain_outputs(model_dir, share_weights):
    e = make_engine(model_dir)
    return [o.output_token_ids for o in e.generate(PROMPTS, GREEDY)]


def _assert_no_leak(e):
    s = e.stats()
    assert s["num_running"] == s["num_waiting"] == s["kv_blocks_used"] == 0


# ---------------------------------------------------------------------------- engine (loads the default model)
@pytest.mark.slow
def test_random_draft_model_is_verified_exactly(model_dir, draft_dir, plain_outputs, share_weights):
    e = make_engine(model_dir, speculative="draft", speculative_model=draft_dir, num_speculative_tokens=4,
                    adaptive_speculation=False)
    assert e.draft_runner.model.num_layers == 2
    k, _ = e.draft_runner.kv_caches[0]
    assert tuple(k.shape) == (64, 16, 2, 16)  # the draft's own KV geometry, the target's block pool
    outs = e.generate(PROMPTS, GREEDY)
    assert [o.output_token_ids for o in outs] == plain_outputs
    assert all(len(o.output_token_ids) == NEW for o in outs)
    s = e.stats()
    assert s["spec_num_verify_steps"] > 0 and s["spec_num_draft_tokens"] > 0
    assert s["spec_acceptance_rate"] < 0.1  # a random draft: nearly every draft is rejected
    # sampling: draft rows q go through the rejection rule; a per-request seed reproduces the output
    seeded = SamplingParams(temperature=0.8, top_p=0.9, max_tokens=12, seed=5, ignore_eos=True)
    a = e.generate([PROMPTS[1]], seeded)[0].output_token_ids
    assert a == e.generate([PROMPTS[1]], seeded)[0].output_token_ids and len(a) == 12
    _assert_no_leak(e)


@pytest.mark.slow
def test_adaptive_k_stops_proposing_for_a_bad_draft(model_dir, draft_dir, plain_outputs, share_weights):
    drafted = {}
    for adaptive in (False, True):
        e = make_engine(model_dir, speculative="draft", speculative_model=draft_dir, num_speculative_tokens=4,
                        adaptive_speculation=adaptive)
        assert [o.output_token_ids for o in e.generate(PROMPTS, GREEDY)] == plain_outputs
        s = e.stats()
        assert s["spec_acceptance_rate"] < 0.1
        drafted[adaptive] = s["spec_num_draft_tokens"]
        _assert_no_leak(e)
    # fixed k: about 4 drafts in each of the ~39 decode steps per prompt; adaptive: alpha falls from
    # the 0.7 prior below c ~ 0.12 in ~20 rejections, then only a 1-token probe every 8th step
    assert drafted[False] > 250
    assert 0 < drafted[True] < 0.3 * drafted[False], drafted


# ---------------------------------------------------------------------------- configuration (config.json only)
def test_kv_budget_counts_the_draft_models_own_layers(model_dir, draft_dir):
    target, draft = ModelConfig.from_dir(model_dir), ModelConfig.from_dir(draft_dir)
    budget = 64 * 2**20
    plain = EngineConfig(model_dir=model_dir, kv_cache_bytes=budget).resolve_num_kv_blocks(target, LEN)
    cfg = EngineConfig(model_dir=model_dir, kv_cache_bytes=budget, speculative="draft", speculative_model=draft_dir)
    cfg.validate()
    with_draft = cfg.resolve_num_kv_blocks(target, LEN)
    target_block = 16 * 2 * 30 * 3 * 64 * 4  # block_size × K,V × layers × kv heads × head_dim × fp32
    draft_block = 16 * 2 * 2 * 2 * 16 * 4  # the draft's 2 layers, 2 KV heads of 16 dims
    assert plain == budget // target_block
    assert with_draft == budget // (target_block + draft_block) < plain
    assert cfg.resolve_num_kv_blocks(target, LEN, draft) == with_draft
    self_draft = EngineConfig(model_dir=model_dir, kv_cache_bytes=budget, speculative="draft", draft_num_layers=8)
    assert self_draft.resolve_num_kv_blocks(target, LEN) == budget // (target_block * 38 // 30)


def test_draft_vocab_mismatch_is_a_one_line_config_error(model_dir, tmp_path):
    small = write_random_llama(tmp_path / "small", RandomLlamaSpec(vocab_size=512))
    cfg = EngineConfig(model_dir=model_dir, speculative="draft", speculative_model=small, max_model_len=LEN)
    cfg.validate()  # the folder exists and is a Llama model: only the vocabulary is wrong
    with pytest.raises(ConfigError, match=r"vocab_size=512 .* vocab_size=49152") as exc:
        cfg.resolve_draft_model(ModelConfig.from_dir(model_dir))
    assert "\n" not in str(exc.value) and "speculative_model" in str(exc.value)
    from own_engine.engine import LLMEngine

    with pytest.raises(ConfigError, match="vocab_size=512"):  # raised before any weights load
        LLMEngine(cfg)


def test_draft_folder_errors(model_dir, tmp_path):
    with pytest.raises(ConfigError, match="speculative_model=.*missing is not a folder") as exc:
        EngineConfig(model_dir=model_dir, speculative="draft", speculative_model=tmp_path / "missing").validate()
    assert "\n" not in str(exc.value)
    (tmp_path / "empty").mkdir()
    cfg = EngineConfig(model_dir=model_dir, speculative="draft", speculative_model=tmp_path / "empty")
    cfg.validate()
    with pytest.raises(ConfigError, match="speculative_model: .*empty has no config.json"):
        cfg.resolve_draft_model(ModelConfig.from_dir(model_dir))
    with pytest.raises(ConfigError, match="speculative_model is set but speculative='ngram'"):
        EngineConfig(model_dir=model_dir, speculative="ngram", speculative_model=tmp_path).validate()
    with pytest.raises(ConfigError, match="spec_cost_per_token"):
        EngineConfig(model_dir=model_dir, speculative="ngram", spec_cost_per_token=-0.5).validate()
    with pytest.raises(ConfigError, match="adaptive_speculation"):
        EngineConfig(model_dir=model_dir, speculative="ngram", adaptive_speculation="no").validate()


def test_cli_flags_for_the_draft_model_and_adaptive_k(monkeypatch, tmp_path, capsys):
    import own_engine.server.cli as cli_main

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    seen = {}

    def fake_load(options):
        seen.update(options)
        raise cli_main._Exit("stop here", 3)

    monkeypatch.setattr(cli_main, "_load_engine", fake_load)
    rc = cli_main.main(["--model", str(tmp_path), "--speculative", "draft", "--speculative-model", str(tmp_path),
                        "--no-adaptive-speculation", "--spec-cost-per-token", "0.25"])
    assert rc == 3
    config = EngineConfig(**seen)
    config.validate()
    assert (config.speculative_model, config.adaptive_speculation, config.spec_cost_per_token) == (tmp_path, False, 0.25)
    seen.clear()
    assert cli_main.main(["--model", str(tmp_path)]) == 3
    assert (seen["speculative_model"], seen["adaptive_speculation"], seen["spec_cost_per_token"]) == (None, True, None)
    monkeypatch.undo()  # the real loader: validation fails before any model loads
    capsys.readouterr()
    rc = cli_main.main(["--model", str(tmp_path), "--speculative", "draft", "--speculative-model",
                        str(tmp_path / "nope")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.startswith("error: speculative_model=") and "\n" not in err
