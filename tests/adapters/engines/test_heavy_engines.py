"""Real engines from ``.engines/`` (``bench engines setup NAME``): each streams two concurrent
greedy requests of different prompt lengths, and the texts must equal Hugging Face ``generate``
on the same weights. Skipped, with the probe's reason, when the engine's environment is absent
(CI: always, these need multi-GB installs)."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from adapters.base import LaunchConfig
from adapters.runtime.process import port_is_free
from adapters.registry import get_adapter

PROMPTS = ("The capital of France is", "Write a haiku about the sea. Here it is:\n")
MAX_TOKENS = 8


@pytest.fixture(scope="module")
def reference():
    """HF greedy continuations of PROMPTS (text of MAX_TOKENS new tokens each)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from harness.app.core.model import resolve_model

    torch.set_num_threads(1)
    model_dir = resolve_model(None)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    outs = []
    for p in PROMPTS:
        ids = tok(p, return_tensors="pt")
        with torch.inference_mode():
            gen = model.generate(**ids, max_new_tokens=MAX_TOKENS, do_sample=False, temperature=None, top_p=None,
                                 top_k=None, min_new_tokens=MAX_TOKENS)
        outs.append(tok.decode(gen[0, ids["input_ids"].shape[1]:], skip_special_tokens=True))
    return model_dir, outs


async def _stream(session, ep, prompt):
    body = {"model": ep.model_name, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    if ep.supports_ignore_eos:
        body["ignore_eos"] = True
    text, usage, chunks = "", None, 0
    async with session.post(ep.base_url + "/v1/completions", json=body) as resp:
        assert resp.status == 200, await resp.text()
        async for raw in resp.content:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            obj = json.loads(line[5:])
            usage = obj.get("usage") or usage
            for c in obj.get("choices", []):
                if c.get("text"):
                    text += c["text"]
                    chunks += 1
    return text, usage, chunks


@pytest.mark.slow
@pytest.mark.heavy_engine
@pytest.mark.parametrize("engine", ["vllm", "sglang", "deepspeed", "onnxruntime", "transformers_serve"])
def test_engine_streams_greedy_batch_equal_to_hf(engine, reference, tmp_path):
    adapter = get_adapter(engine)
    probe = adapter.probe()
    if not probe.available:
        pytest.skip(probe.reason)
    model_dir, expected = reference
    cfg = LaunchConfig(model_dir=model_dir, run_dir=tmp_path, threads=1, startup_timeout_s=600,
                       engine_args={"batch_window_ms": "1500"} if engine in ("deepspeed", "onnxruntime") else {})

    async def run(ep):
        async with aiohttp.ClientSession() as s:
            return await asyncio.gather(*(_stream(s, ep, p) for p in PROMPTS))

    with adapter.launch(cfg) as ep:
        results = asyncio.run(run(ep))
        port = ep.effective_config["port"]
        assert ep.effective_config["threads"] == 1 and ep.effective_config["env"]["OMP_NUM_THREADS"] == "1"
    for (text, usage, chunks), want in zip(results, expected):
        assert text == want
        assert chunks >= 2  # streamed, not one block
        if engine != "transformers_serve":
            assert usage["completion_tokens"] == MAX_TOKENS
    assert port_is_free(port)
    assert (tmp_path / "logs" / f"{engine}.log").stat().st_size > 0
