"""The output-fidelity check on real engines (harness/app/trial/fidelity_check.py, fidelity_reference.py):
the ground truth is transformers fp32 on the default model; the reference engine on the same
weights agrees with it (tests/harness/app/cli/test_engines_fidelity.py), and the same engine with
one perturbed weight matrix is excluded by the gate."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness.app.trial.fidelity_check import check_fidelity_of
from harness.app.trial.fidelity_reference import fidelity_workload, reference_for, workload_prompts
from results.schema import STRICT_FLOOR

PROMPTS = ["The capital of France is", "def fibonacci(n):", "List three primary colors:", "Once upon a time,",
           "The three laws of motion are", "import numpy as np\n"]


@pytest.fixture(scope="module")
def model_dir():
    from harness.app.core.model import resolve_model

    return resolve_model(None)


@pytest.fixture(scope="module")
def cache_root(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def reference(model_dir, cache_root):
    """The transformers reference for PROMPTS at the run's default 64 tokens, built once for the
    module (both tests below read the same one: building it costs seconds)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    prompts = [(p, tok(p)["input_ids"]) for p in PROMPTS]
    return reference_for(model_dir, prompts, max_tokens=64, cache_root=cache_root)


def test_the_reference_is_transformers_greedy_and_cached(model_dir, reference, cache_root, monkeypatch) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    first = reference.prompts[0]
    out = model.generate(torch.tensor([first.prompt_token_ids]), max_new_tokens=64, do_sample=False)
    generated = out[0, len(first.prompt_token_ids):].tolist()
    assert first.tokens == generated[:len(first.tokens)] and "Paris" in "".join(first.pieces)
    assert all(len(t) == 5 and t[0][1] >= t[1][1] for t in first.top) and all(g >= 0 for g in first.gap)
    # per position, the whole continuation so far decoded at once (what the engines' text is compared with)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    assert first.texts == [tok.decode(first.tokens[:k + 1], skip_special_tokens=True) for k in range(len(first.tokens))]
    # the same prompts again come from the cache (the same key), without loading the model
    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", lambda *a, **k: pytest.fail("the model was loaded"))
    again = reference_for(model_dir, [(r.prompt, r.prompt_token_ids) for r in reference.prompts], max_tokens=64,
                          cache_root=cache_root)
    assert again.key == reference.key and again.prompts == reference.prompts
    # written whole through a temp file of its own (gone after the rename), readable as a plain write leaves it
    cached = Path(cache_root) / "fidelity" / f"{reference.key}.json"
    assert cached.stat().st_mode & 0o777 == 0o644 and not list(cached.parent.glob("*.tmp"))


def test_workload_prompts_are_the_sessions_first_requests(model_dir) -> None:
    from transformers import AutoTokenizer

    from workloads.options import WorkloadOptions

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    options = WorkloadOptions(name="agentic", seed=3)
    workload = fidelity_workload(options, tok, 32)
    chosen = workload_prompts(workload, tok, 32)
    # the agentic workload's first turns come from a fixed pool of trajectories: all its distinct ones
    firsts = {tok.apply_chat_template(s.first_request().messages, tokenize=False, add_generation_prompt=True)
              for s in workload.sessions}
    eligible = {t for t in firsts if len(tok(t, add_special_tokens=False)["input_ids"]) <= 1536}
    assert len(chosen) == len(eligible) >= 16 and {t for t, _ in chosen} == eligible
    assert workload_prompts(workload, tok, 5) == chosen[:5]
    first = workload.sessions[0].first_request()
    assert chosen[0][0] == tok.apply_chat_template(first.messages, tokenize=False, add_generation_prompt=True)
    assert chosen[0][1] == tok(chosen[0][0], add_special_tokens=False)["input_ids"]


def test_the_reference_engine_with_a_perturbed_weight_is_excluded(model_dir, reference, tmp_path) -> None:
    """One MLP matrix of layer 3 with noise of about twice its weights' own scale: the engine runs,
    fast as ever, and computes something else (the unperturbed engine passes: test_engines_fidelity).

    Checked at the run's default 64 tokens per prompt: the agreement's interval resamples the
    prompts (its positions cluster by prompt), and at 24 tokens half of the 6 prompts never left
    the reference, 4 real divergences in the other three, so a resample of the prompts reached
    0.993 and the upper bound was above the floor (the Wilson interval over positions, which took
    them as independent, said 0.989); at 64 tokens every prompt leaves it and the clustered upper
    bound is about 0.98."""
    import torch
    from safetensors.torch import load_file, save_file

    from adapters.registry import get_adapter

    bent = tmp_path / "bent"  # the folder's small files copied; the weights written once, perturbed
    shutil.copytree(model_dir, bent, ignore=shutil.ignore_patterns("model.safetensors"))
    weights = load_file(str(model_dir / "model.safetensors"))
    name = next(k for k in weights if "layers.3.mlp.down_proj" in k)
    generator = torch.Generator().manual_seed(0)
    weights[name] = weights[name] + 0.05 * torch.randn(weights[name].shape, generator=generator)
    save_file(weights, str(bent / "model.safetensors"), metadata={"format": "pt"})
    assert reference.max_tokens == 64 and [r.prompt for r in reference.prompts] == PROMPTS
    check, missing = check_fidelity_of([get_adapter("own", "cpu")], bent, tmp_path / "run", reference)
    assert missing == {}
    broken = check.engines["own"]
    assert broken.agreement_interval.method.startswith("cluster bootstrap percentile, 6 prompts")
    assert broken.prompts_answered == 6 and broken.exclusion() == broken.reason()
    assert broken.prompt_format == "token_ids" and broken.logprobs and broken.floor == STRICT_FLOOR
    assert broken.passed is False and broken.divergences > broken.near_tie_divergences
    assert broken.agreement_interval.high < STRICT_FLOOR and broken.reason().startswith("fidelity 0.")


def test_an_endpoint_serving_another_model_is_compared_with_no_reference() -> None:
    """An --endpoint serving a model other than the folder the reference ran is not checked against
    it (a Llama-8B deployment compared with SmolLM2's outputs would fall below any floor): the check
    says why and how to check it, and the gate reads "not checked" (excluded unless --allow-unchecked).
    The same endpoint with the folder named (--tokenizer), or serving the folder's name, is checked."""
    import io

    from rich.console import Console

    from adapters.base import Endpoint
    from harness.app.trial.steps import TrialSpec, check_fidelity, foreign_model
    from harness.app.trial.measure import MeasureOptions
    from tests.fake_servers.fidelity_server import synthetic_reference

    ref = synthetic_reference().model_copy(update={"model": "SmolLM2-135M-Instruct"})
    llama = Endpoint(base_url="http://127.0.0.1:9", model_name="meta-llama/Llama-3.1-8B-Instruct",
                     effective_config={"engine": "openai"}, display_name="prod")
    why = foreign_model(llama, ref, declared=False)
    assert why.startswith("serves another model (Llama-3.1-8B-Instruct)\n"
                          "it serves 'meta-llama/Llama-3.1-8B-Instruct', not SmolLM2-135M-Instruct")
    assert "--tokenizer FOLDER" in why
    assert foreign_model(llama, ref, declared=True) == ""  # the user named the served model's folder
    same = Endpoint(base_url="http://127.0.0.1:9", model_name="HuggingFaceTB/smollm2-135m-instruct",
                    effective_config={"engine": "openai"}, display_name="prod")
    assert foreign_model(same, ref, declared=False) == ""
    started = Endpoint(base_url="http://127.0.0.1:9", model_name="anything", effective_config={"engine": "vllm"}, display_name="vllm")
    assert foreign_model(started, ref, declared=False) == ""  # an engine we started runs the folder's weights
    out = io.StringIO()
    result = check_fidelity("prod", llama, TrialSpec(MeasureOptions(), fidelity=ref), Console(file=out, width=400))
    assert result.error == why and result.passed is None  # nothing was asked of the endpoint (port 9 is closed)
    assert result.exclusion(False) == ("fidelity not checked (serves another model (Llama-3.1-8B-Instruct)); "
                                       "--allow-unchecked lets it compete")  # whole, in a table cell
    assert result.exclusion(True) == ""
    assert "prod: fidelity not checked" in out.getvalue()
