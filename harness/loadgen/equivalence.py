"""Greedy output-equivalence check across engines (``bench engines check``).

Every engine loads the same model folder and answers the same fixed prompts with greedy
decoding (``temperature=0``, non-streaming ``/v1/completions``); the outputs are tokenized by
the model's own tokenizer and compared token by token with the reference engine's (the first
engine that ran). Engines run one after another, never at once.

Per prompt: ``prefix_tokens`` = length of the common token prefix with the reference;
``agreement`` = prefix_tokens / max(len(reference), len(output)) (1.0 = identical; fp32 engines
on the same weights usually agree fully, and a late divergence after a near-tie is normal).
Per engine: ``token_agreement`` = mean of the per-prompt agreements, ``exact_matches`` = count
of identical outputs.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Sequence

import aiohttp

from adapters.base import EngineAdapter, EngineError, LaunchConfig

DEFAULT_PROMPTS = (
    "The capital of France is",
    "def fibonacci(n):",
    "Here is a short list of three fruits:",
    "The main difference between a CPU and a GPU is",
)


async def _complete(endpoint: Any, prompt: str, max_tokens: int, timeout_s: float) -> str:
    """One non-streaming greedy completion; returns its text. Raises EngineError on HTTP errors."""
    headers = {"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
    body = {"model": endpoint.model_name, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0, "stream": False}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:
        async with session.post(endpoint.base_url + "/v1/completions", json=body, headers=headers) as resp:
            if resp.status != 200:
                raise EngineError(f"HTTP {resp.status} from /v1/completions: {(await resp.text())[:200]}")
            data = await resp.json()
    return data["choices"][0]["text"]


def token_agreement(ref: list[int], out: list[int]) -> tuple[int, float]:
    """``(common prefix length, prefix / max(len(ref), len(out)))``; two empty outputs agree fully."""
    n = 0
    for a, b in zip(ref, out):
        if a != b:
            break
        n += 1
    denom = max(len(ref), len(out))
    return n, (n / denom if denom else 1.0)


def check_equivalence(adapters: Sequence[EngineAdapter], model_dir: Path, run_dir: Path,
                      prompts: Sequence[str] = DEFAULT_PROMPTS, max_tokens: int = 32, threads: int = 1,
                      engine_args: dict[str, dict[str, str]] | None = None, startup_timeout_s: float = 600.0,
                      request_timeout_s: float = 300.0, console: Any = None) -> dict[str, Any]:
    """Run ``prompts`` greedily on every adapter and compare tokens with the reference.

    Returns ``{"reference": name | None, "prompts": [...], "max_tokens": n, "engines": {name:
    {"status": "ok" | "skipped" | "failed", "reason": str | None, "display_name": str | None,
    "outputs": [text], "per_prompt": [{"tokens", "prefix_tokens", "agreement"}],
    "token_agreement": float | None, "exact_matches": int | None}}}``.
    Engine failures are recorded, not raised. Raises ValueError for an empty prompt list or
    ``max_tokens < 1``.
    """
    if not prompts:
        raise ValueError("no prompts given: pass at least one prompt")
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1 (got {max_tokens})")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    result: dict[str, Any] = {"reference": None, "prompts": list(prompts), "max_tokens": max_tokens, "engines": {}}
    ref_ids: list[list[int]] | None = None
    for adapter in adapters:
        entry: dict[str, Any] = {"status": "skipped", "reason": None, "display_name": None, "outputs": [],
                                 "per_prompt": [], "token_agreement": None, "exact_matches": None}
        result["engines"][adapter.name] = entry
        probe = adapter.probe()
        if not probe.available:
            entry["reason"] = probe.reason
            continue
        if console is not None:
            console.print(f"checking {adapter.name} ...")
        cfg = LaunchConfig(model_dir=Path(model_dir), run_dir=Path(run_dir), threads=threads,
                           engine_args=(engine_args or {}).get(adapter.name, {}), startup_timeout_s=startup_timeout_s)
        try:
            with adapter.launch(cfg) as ep:
                entry["display_name"] = ep.display_name
                outputs = [asyncio.run(_complete(ep, p, max_tokens, request_timeout_s)) for p in prompts]
        except (EngineError, aiohttp.ClientError, asyncio.TimeoutError, KeyError) as exc:
            entry["status"] = "failed"
            entry["reason"] = f"{type(exc).__name__}: {exc}"
            continue
        entry["status"] = "ok"
        entry["outputs"] = outputs
        ids = [tokenizer(o, add_special_tokens=False)["input_ids"] for o in outputs]
        if ref_ids is None:
            ref_ids = ids
            result["reference"] = adapter.name
        per = []
        for r, o in zip(ref_ids, ids):
            prefix, agree = token_agreement(r, o)
            per.append({"tokens": len(o), "prefix_tokens": prefix, "agreement": round(agree, 4)})
        entry["per_prompt"] = per
        entry["token_agreement"] = round(sum(p["agreement"] for p in per) / len(per), 4)
        entry["exact_matches"] = sum(1 for r, o in zip(ref_ids, ids) if r == o)
    return result
