"""The greedy output-equivalence check: one prompt set, one definition, used by ``bench run``
(after each engine's warm-up, summary ``equivalence``) and ``bench engines check``
(``harness.app.trial.equivalence_check``, which starts the engines through the one launch path).

Every engine serves the same model folder and answers the same fixed prompts with greedy
decoding (``temperature=0``); the outputs are tokenized by the model's own tokenizer and
compared token by token with the reference engine's (``bench run``: transformers when it ran,
else the first engine; ``bench engines check``: the first engine). Engines run one after
another, never at once.

Per prompt: ``prefix_tokens`` = length of the common token prefix with the reference;
``agreement`` = prefix_tokens / max(len(reference), len(output)) (1.0 = identical; fp32 engines
on the same weights usually agree fully, and a late divergence after a near-tie is normal).
Per engine: ``token_agreement`` = mean of the per-prompt agreements, ``exact_matches`` = count
of identical outputs.
"""

from __future__ import annotations

import asyncio
from typing import Any, Sequence

import aiohttp

from adapters.base import EngineError
from results.schema import EquivalenceResult
from workloads.base import RequestSpec

EQUIVALENCE_PROMPTS = (
    "The capital of France is",
    "def fibonacci(n):",
    "List three primary colors:",
)
EQUIVALENCE_MAX_TOKENS = 16  # per prompt in ``bench run`` (``bench engines check --max-tokens``)
DEFAULT_PROMPTS = EQUIVALENCE_PROMPTS


def equivalence_requests() -> list[RequestSpec]:
    """The prompts as greedy requests whose reply text is kept (``bench run``)."""
    return [
        RequestSpec(request_id=f"equiv-{i}", prompt=p, max_tokens=EQUIVALENCE_MAX_TOKENS, temperature=0.0,
                    keep_output_text=True)
        for i, p in enumerate(EQUIVALENCE_PROMPTS)
    ]


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


def prompt_agreements(tokenizer: Any, reference: Sequence[str], outputs: Sequence[str]) -> list[dict[str, Any]]:
    """Per prompt, one engine's greedy text against the reference's, each tokenized once:
    ``{"tokens": len(output ids), "prefix_tokens": common prefix, "agreement": 0..1, "exact": bool}``."""
    per = []
    for ref_text, out_text in zip(reference, outputs):
        ref_ids = tokenizer.encode(ref_text, add_special_tokens=False)
        out_ids = tokenizer.encode(out_text, add_special_tokens=False)
        prefix, agreement = token_agreement(ref_ids, out_ids)
        per.append({"tokens": len(out_ids), "prefix_tokens": prefix, "agreement": agreement, "exact": ref_ids == out_ids})
    return per


def summarize_agreements(per: Sequence[dict[str, Any]]) -> EquivalenceResult:
    """The :class:`EquivalenceResult` of :func:`prompt_agreements`' rows (mean agreement, exact
    matches, and per prompt the index of the first differing token, None = identical)."""
    return EquivalenceResult(
        token_agreement=round(sum(p["agreement"] for p in per) / len(per), 4) if per else None,
        exact_matches=sum(bool(p["exact"]) for p in per), prompts=len(per),
        first_divergence=[None if p["exact"] else p["prefix_tokens"] for p in per])


def compare_outputs(tokenizer: Any, reference: Sequence[str], outputs: Sequence[str]) -> EquivalenceResult:
    """One engine's greedy texts against the reference's, prompt by prompt (see module docstring).

    ``first_divergence``: per prompt, the index of the first differing token (None = identical).
    """
    return summarize_agreements(prompt_agreements(tokenizer, reference, outputs))


def greedy_outputs(endpoint: Any, prompts: Sequence[str], max_tokens: int, timeout_s: float) -> list[str]:
    """``endpoint``'s greedy completion of each prompt, one after another (non-streaming).
    Raises EngineError on an HTTP error, aiohttp / timeout errors on a dead server."""
    return [asyncio.run(_complete(endpoint, p, max_tokens, timeout_s)) for p in prompts]
