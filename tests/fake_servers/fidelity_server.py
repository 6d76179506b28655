"""A scripted engine whose outputs are known against a fidelity reference (aiohttp, no inference).

:func:`make_app` answers non-streaming ``/v1/completions`` for the prompts of a
:class:`~results.schema.FidelityReference`, resumed at any position (token ids or text), with
the reference's own tokens except where told to err:

- ``flip_every=N``: at every reference position ``p`` with ``(p + 1) % N == 0`` that is not a
  near-tie, a wrong token (``" WRONG"``) instead (a broken kernel);
- ``flip_near_ties=True``: at every near-tie position (top-2 gap < ``epsilon``), the reference's
  second-best token instead (float noise: harmless);
- ``text_only``: a token-id prompt gets HTTP 400; ``no_logprobs``: ``logprobs`` gets HTTP 400.

With logprobs it returns, per token, the reference's top-k (the wrong token first where it errs).
``app[SCRIPT].served`` counts the completions answered.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from results.schema import FidelityReference, ReferencePrompt

WRONG = " WRONG"


def _locate(reference: FidelityReference, prompt: Any) -> tuple[ReferencePrompt, int] | None:
    """The reference prompt ``prompt`` resumes and at which position (None: not one of them)."""
    for ref in reference.prompts:
        if isinstance(prompt, list):
            n = len(ref.prompt_token_ids)
            if prompt[:n] == ref.prompt_token_ids and prompt[n:] == ref.tokens[:len(prompt) - n]:
                return ref, len(prompt) - n
        elif isinstance(prompt, str) and prompt.startswith(ref.prompt):
            rest = prompt[len(ref.prompt):]
            for start in range(len(ref.tokens) + 1):
                if ref.resume_text(start) == rest:
                    return ref, start
    return None


class ScriptedAnswers:
    """Answers completion bodies for ``reference``'s prompts (module docstring): :meth:`answer`."""

    def __init__(self, reference: FidelityReference, *, flip_every: int | None = None, flip_near_ties: bool = False,
                 epsilon: float = 0.05, text_only: bool = False, no_logprobs: bool = False) -> None:
        self.reference, self.flip_every, self.flip_near_ties = reference, flip_every, flip_near_ties
        self.epsilon, self.text_only, self.no_logprobs = epsilon, text_only, no_logprobs
        self.served = 0

    def token_at(self, ref: ReferencePrompt, p: int) -> tuple[str, dict[str, float]]:
        top = dict(ref.top[p])
        if ref.gap[p] < self.epsilon:
            if self.flip_near_ties and len(ref.top[p]) > 1:
                second = ref.top[p][1][0]
                return second, {second: ref.top[p][0][1] + 0.01, **top}
        elif self.flip_every and (p + 1) % self.flip_every == 0:
            return WRONG, {WRONG: 0.0, **top}
        return ref.pieces[p], top

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """``(HTTP status, JSON body)`` for one non-streaming completion request."""
        prompt = body.get("prompt")
        if self.text_only and isinstance(prompt, list):
            return 400, {"error": {"message": "prompt must be a string"}}
        if self.no_logprobs and body.get("logprobs") is not None:
            return 400, {"error": {"message": "logprobs are not supported"}}
        found = _locate(self.reference, prompt)
        if found is None:
            return 400, {"error": {"message": "unknown prompt"}}
        ref, start = found
        tokens, tops, finish = [], [], "length"
        for p in range(start, min(len(ref.tokens), start + int(body.get("max_tokens") or 16))):
            piece, top = self.token_at(ref, p)
            if ref.eos and p == len(ref.tokens) - 1 and piece == ref.pieces[p]:
                finish = "stop"  # the end-of-sequence token: no text
                break
            tokens.append(piece)
            tops.append(top)
        self.served += 1
        logprobs = None
        if body.get("logprobs") is not None:
            logprobs = {"tokens": tokens, "token_logprobs": [t.get(x) for t, x in zip(tops, tokens)],
                        "top_logprobs": tops, "text_offset": []}
        return 200, {"object": "text_completion", "choices": [
            {"index": 0, "text": "".join(tokens), "finish_reason": finish, "logprobs": logprobs}]}


SCRIPT = web.AppKey("script", ScriptedAnswers)


def make_app(reference: FidelityReference, **script: Any) -> web.Application:
    """An aiohttp app serving :class:`ScriptedAnswers` (``app[SCRIPT]``) on ``/v1/completions``."""
    app = web.Application()
    app[SCRIPT] = script_ = ScriptedAnswers(reference, **script)

    async def complete(request: web.Request) -> web.Response:
        status, body = script_.answer(await request.json())
        return web.json_response(body, status=status)

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "scripted", "object": "model"}]})

    app.router.add_post("/v1/completions", complete)
    app.router.add_get("/v1/models", models)
    return app


def synthetic_reference(prompts: int = 6, tokens: int = 24, near_tie_every: int = 5, eos_prompts: tuple[int, ...] = (1,),
                        top_k: int = 3) -> FidelityReference:
    """A reference with known structure: prompt ``i`` is ``"prompt i:"`` (ids ``[1000 + i, 7]``),
    its token ``p`` the word ``" w{i}_{p}"`` (id ``10_000 + 100 i + p``); positions with
    ``(p + 1) % near_tie_every == 0`` are near-ties (gap 0.01 nats), the others have gap 2;
    prompts in ``eos_prompts`` end on an end-of-sequence token (id 2, no text)."""
    refs = []
    for i in range(prompts):
        toks, pieces, top, gap = [], [], [], []
        for p in range(tokens):
            eos = i in eos_prompts and p == tokens - 1
            piece = "" if eos else f" w{i}_{p}"
            g = 0.01 if (p + 1) % near_tie_every == 0 else 2.0
            toks.append(2 if eos else 10_000 + 100 * i + p)
            pieces.append(piece)
            top.append([(piece, -0.1), (f" alt{i}_{p}", -0.1 - g)] + [(f" z{k}", -6.0 - k) for k in range(top_k - 2)])
            gap.append(g)
        refs.append(ReferencePrompt(prompt=f"prompt {i}:", prompt_token_ids=[1000 + i, 7], tokens=toks, pieces=pieces,
                                    top=top, gap=gap, eos=i in eos_prompts))
    return FidelityReference(key="synthetic", max_tokens=tokens, top_k=top_k, prompts=refs)
