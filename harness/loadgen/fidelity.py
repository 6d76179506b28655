"""The fidelity probe: an engine's greedy answers to the reference's prompts, teacher-forced.

Outside the measured phase (after warm-up, before the first load point), every prompt of the
:class:`~results.schema.FidelityReference` is sent greedily (``temperature=0``, non-streaming
``/v1/completions``) for the reference's number of tokens. Where the answer leaves the
reference at position ``d`` (:meth:`~results.schema.ReferencePrompt.follow`), the prompt is
sent again extended by the reference's first ``d + 1`` tokens (teacher forcing), for the rest,
at most :data:`MAX_RESUMES` times per prompt, so one early divergence does not turn every later
position into a disagreement and every position is judged on the reference's context.

The prompt goes as token ids (exact: no re-tokenization of the resumed prefix) where the engine
accepts them, else as text; ``logprobs`` (top-k) are asked for and dropped when the engine
refuses them. What the engine accepted is decided on the first prompt and recorded
(:class:`~results.schema.EngineAnswers`). Prompts run :data:`CONCURRENCY` at a time.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from results.schema import AnswerSegment, EngineAnswer, EngineAnswers, FidelityReference, ReferencePrompt

MAX_RESUMES = 16  # teacher-forced restarts per prompt; positions past them are left unchecked
CONCURRENCY = 8  # prompts in flight at once
_FORMATS = (("token_ids", True), ("text", True), ("token_ids", False), ("text", False))


class Refused(Exception):
    """The engine answered 4xx to a request shape (token-id prompt, logprobs): try another."""


def _body(endpoint: Any, ref: ReferencePrompt, start: int, prompt_format: str, logprobs: int | None) -> dict[str, Any]:
    """The completion request resuming ``ref`` at position ``start``."""
    if prompt_format == "token_ids":
        prompt: Any = ref.prompt_token_ids + ref.tokens[:start]
    else:
        prompt = ref.prompt + ref.resume_text(start)  # decoded, not per-token pieces: whole characters
    body = {"model": endpoint.model_name, "prompt": prompt, "max_tokens": len(ref.tokens) - start,
            "temperature": 0.0, "stream": False}
    if logprobs is not None:
        body["logprobs"] = logprobs
    return body


def _segment(start: int, choice: dict[str, Any]) -> AnswerSegment:
    """An :class:`AnswerSegment` from a completion choice (OpenAI legacy ``logprobs`` format:
    ``tokens`` and ``top_logprobs``, a ``{token text: logprob}`` per token)."""
    lp = choice.get("logprobs") or {}
    tokens, tops = lp.get("tokens"), lp.get("top_logprobs")
    return AnswerSegment(start=start, text=choice.get("text") or "", finish_reason=choice.get("finish_reason"),
                         tokens=list(tokens) if tokens else None,
                         top_logprobs=[dict(t or {}) for t in tops] if tops else None)


async def _complete(session: aiohttp.ClientSession, endpoint: Any, body: dict[str, Any]) -> dict[str, Any]:
    """POST one completion; its first choice. Raises :class:`Refused` on 400/404/422 (a request
    shape the engine does not take), RuntimeError on another HTTP error."""
    headers = {"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
    async with session.post(endpoint.base_url + "/v1/completions", json=body, headers=headers) as resp:
        if resp.status in (400, 404, 422):
            raise Refused(f"HTTP {resp.status}: {(await resp.text())[:200]}")
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status} from /v1/completions: {(await resp.text())[:200]}")
        data = await resp.json()
    return data["choices"][0]


async def _answer(session: aiohttp.ClientSession, endpoint: Any, ref: ReferencePrompt, prompt_format: str,
                  logprobs: int | None) -> EngineAnswer:
    """One prompt, resumed after each divergence (module docstring)."""
    answer, start = EngineAnswer(), 0
    for _ in range(MAX_RESUMES + 1):
        seg = _segment(start, await _complete(session, endpoint, _body(endpoint, ref, start, prompt_format, logprobs)))
        answer.segments.append(seg)
        end, diverged = ref.follow(start, seg.text, seg.finish_reason)
        if not diverged or end + 1 >= len(ref.tokens):
            break
        start = end + 1
    return answer


async def _first(session: aiohttp.ClientSession, endpoint: Any, ref: ReferencePrompt,
                 top_k: int) -> tuple[str, bool, EngineAnswer]:
    """The first prompt, trying request shapes until one is accepted: ``(format, logprobs, answer)``.
    Raises :class:`Refused` when the engine takes none."""
    last: Refused | None = None
    for prompt_format, with_logprobs in _FORMATS:
        try:
            answer = await _answer(session, endpoint, ref, prompt_format, top_k if with_logprobs else None)
        except Refused as exc:
            last = exc
            continue
        has = with_logprobs and any(s.top_logprobs for s in answer.segments)
        return prompt_format, has, answer
    raise last or Refused("no request shape accepted")


async def ask(endpoint: Any, reference: FidelityReference, *, numerics: str = "reference",
              timeout_s: float = 300.0) -> EngineAnswers:
    """``endpoint``'s answers to every prompt of ``reference`` (module docstring). A failure of
    the whole check (the engine refuses every request shape, or stops answering) is returned as
    ``error``, never raised; a failure of one prompt is that answer's ``error``."""
    out = EngineAnswers(numerics=numerics)
    if not reference.prompts:
        return out.model_copy(update={"error": "no prompts"})
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        try:
            fmt, has_lp, first = await _first(session, endpoint, reference.prompts[0], reference.top_k)
        except (Refused, RuntimeError, aiohttp.ClientError, asyncio.TimeoutError, KeyError, ValueError) as exc:
            return out.model_copy(update={"error": f"{type(exc).__name__}: {exc}"})
        gate = asyncio.Semaphore(CONCURRENCY)
        lp = reference.top_k if has_lp else None

        async def one(ref: ReferencePrompt) -> EngineAnswer:
            async with gate:
                try:
                    return await _answer(session, endpoint, ref, fmt, lp)
                except (Refused, RuntimeError, aiohttp.ClientError, asyncio.TimeoutError, KeyError, ValueError) as exc:
                    return EngineAnswer(error=f"{type(exc).__name__}: {exc}")

        rest = await asyncio.gather(*(one(r) for r in reference.prompts[1:]))
    return EngineAnswers(prompt_format=fmt, logprobs=has_lp, numerics=numerics, answers=[first, *rest])
