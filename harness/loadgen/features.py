"""Feature probes: one real request per serving feature, checked for what the feature promises.

An adapter's ``features`` are claims; these probes test them against the engine's own
OpenAI-compatible endpoint (``POST /v1/chat/completions``, non-streaming, greedy:
``temperature`` 0, so a rerun gives the same verdicts). Each probe of
:data:`results.schema.FEATURE_PROBES` ends in a :class:`results.schema.FeatureProbe`:

- ``structured_output``: ``response_format`` with a ``json_schema`` → the reply must parse as JSON
  and validate against the schema (with the ``jsonschema`` package when it is installed, else
  ``feature_checks.schema_errors``, which knows only the keywords these probes' schemas use).
  The prompt does not ask for JSON: a server that ignores ``response_format`` fails, where a
  model that follows a "answer as JSON" instruction would have passed it (our own server did);
- ``tool_calling``: ``tools`` with ``tool_choice`` naming the function (OpenAI's forced call, so a
  small model's reluctance to call a tool is not taken for the engine's) → a ``tool_calls``
  entry naming the offered function, with ``arguments`` a JSON string matching its parameters;
- ``n_best``: ``n`` = 2 → two choices with indices 0 and 1, each with text; sampled at
  :data:`N_BEST_TEMPERATURE` with a fixed seed (several choices of a greedy request are one
  choice repeated, and vLLM rejects ``n`` > 1 with greedy sampling);
- ``stop``: an unstopped reply first, then the same request with ``stop`` set to a word of that
  reply → the reply must not contain it and must end at or before where it stood;
- ``logprobs``: ``logprobs`` with ``top_logprobs`` → a finite log-probability ≤ 0 per token;
- ``max_context``: a prompt within ``max(16, 1 %)`` tokens of the model's maximum length (the
  endpoint's ``/v1/models`` ``max_model_len``, vLLM's field, else the caller's fallback), sized
  with the caller's tokenizer and chat template → accepted and answered.

Verdicts: ``verified``; ``unsupported`` when the server answers 4xx saying the field is not
supported (the message, or the OpenAI error's ``param`` naming the field); ``failed`` for
everything else - a 5xx, another 4xx, a timeout, or a reply that does not do what was asked -
with one line saying what was wrong or what the server said. Bounded: small ``max_tokens``
(at most 96), each request at most ``timeout_s`` (the caller passes the run's request timeout
capped at :data:`PROBE_TIMEOUT_CAP_S`; the max-context one at :data:`CONTEXT_TIMEOUT_CAP_S`),
the whole phase at most ``budget_s``. On the 2-core reference machine the phase takes 10-20 s
per engine plus the max-context prefill (own: 15-53 s cold for 4,048 tokens).
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import time
from typing import Any, Awaitable, Callable

import aiohttp

from results.schema import FEATURE_PROBES, FeatureProbe, FeatureStatus

from harness.loadgen.client import EndpointTarget, new_session
from harness.loadgen.feature_checks import ProbeReply, Verdict, failed, http_verdict, quote, schema_errors

PROBE_TIMEOUT_CAP_S = 60.0  # a probe request never waits longer (s), whatever --request-timeout says
CONTEXT_TIMEOUT_CAP_S = 180.0  # the max-context request's cap (s): a cold 4,048-token prefill took our own
# engine 15-53 s on one core of the loaded 2-core reference machine (2026-12-01)
PHASE_BUDGET_S = 300.0  # all probes of one engine (s); probes not started by then are failed, "not run"

CITY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
    "required": ["city", "country"],
    "additionalProperties": False,
}
WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
_CONTEXT_UNIT = "The quick brown fox jumps over the lazy dog. "
_CONTEXT_QUESTION = "\n\nWhich animal jumps over the dog in the text above? Answer in one word."


class Prober:
    """Sends the probes to ``target`` over ``session``; each request waits at most
    :attr:`timeout_s` seconds (lowered by :func:`probe_features` as the phase budget runs out)."""

    def __init__(self, session: aiohttp.ClientSession, target: EndpointTarget, timeout_s: float) -> None:
        self.session, self.target, self.timeout_s = session, target, timeout_s

    async def post(self, body: dict[str, Any]) -> ProbeReply:
        """``POST /v1/chat/completions`` with ``body`` plus the model, ``temperature`` 0 and
        ``stream`` false."""
        url = f"{self.target.base_url.rstrip('/')}/v1/chat/completions"
        headers = {"Authorization": f"Bearer {self.target.api_key}"} if self.target.api_key else None
        payload = {"model": self.target.model, "temperature": 0.0, "stream": False, **body}
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        async with self.session.post(url, json=payload, headers=headers, timeout=timeout) as resp:
            text = await resp.text(errors="replace")
            try:
                parsed = json.loads(text)
            except ValueError:
                parsed = None
            return ProbeReply(resp.status, parsed, text, resp.content_type)

    async def choices(self, body: dict[str, Any], fields: tuple[str, ...]) -> tuple[list[dict[str, Any]], ProbeReply]:
        """The reply's ``choices`` (each a dict); raises the verdict of an error status or a
        reply that is not a chat completion."""
        reply = await self.post(body)
        if reply.status != 200:
            raise http_verdict(reply, fields)
        if not isinstance(reply.body, dict):
            raise failed(f"the reply is not a JSON object (HTTP 200, {reply.content_type or 'no content type'}): "
                          f"{quote(reply.text)}")
        choices = reply.body.get("choices")
        if not isinstance(choices, list) or not choices or not all(isinstance(c, dict) for c in choices):
            raise failed(f"the reply has no choices: {quote(reply.text)}")
        return choices, reply

    async def max_model_len(self) -> int | None:
        """The served model's ``max_model_len`` from ``GET /v1/models`` (vLLM's field; our own
        server sends it too); None when the endpoint does not say."""
        url = f"{self.target.base_url.rstrip('/')}/v1/models"
        headers = {"Authorization": f"Bearer {self.target.api_key}"} if self.target.api_key else None
        try:
            async with self.session.get(url, headers=headers, timeout=aiohttp.ClientTimeout(total=self.timeout_s)) as r:
                body = await r.json(content_type=None) if r.status == 200 else None
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):
            return None
        cards = body.get("data") if isinstance(body, dict) else None
        if not isinstance(cards, list):
            return None
        cards = [c for c in cards if isinstance(c, dict)]
        card = next((c for c in cards if c.get("id") == self.target.model), cards[0] if cards else None)
        value = card.get("max_model_len") if card else None
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _text(choice: dict[str, Any]) -> str:
    message = choice.get("message")
    content = message.get("content") if isinstance(message, dict) else choice.get("text")
    return content if isinstance(content, str) else ""


async def probe_structured_output(p: Prober) -> str:
    """``response_format`` with :data:`CITY_SCHEMA`; returns the verified detail, raises otherwise."""
    choices, _ = await p.choices({
        "messages": [{"role": "user", "content": "What is the capital of France?"}],  # no word of JSON: see above
        "response_format": {"type": "json_schema", "json_schema": {"name": "capital", "strict": True,
                                                                   "schema": CITY_SCHEMA}},
        "max_tokens": 96}, ("response_format",))
    content, finish = _text(choices[0]), choices[0].get("finish_reason")
    cut = " - cut at max_tokens=96" if finish == "length" else ""
    try:
        value = json.loads(content)
    except ValueError as exc:
        where = f"{exc.msg} at character {exc.pos}" if isinstance(exc, json.JSONDecodeError) else str(exc)
        raise failed(f"the reply is not valid JSON ({where}){cut}: {quote(content)}") from None
    if error := schema_errors(value, CITY_SCHEMA):
        raise failed(f"the reply does not match the schema ({error}){cut}: {quote(content)}")
    return f"the reply parses as JSON and matches the schema: {quote(content)}"


async def probe_tool_calling(p: Prober) -> str:
    """``tools`` = [:data:`WEATHER_TOOL`], forced by name; checks the ``tool_calls`` entry."""
    choices, _ = await p.choices({
        "messages": [{"role": "user", "content": "What is the weather in Paris right now?"}],
        "tools": [WEATHER_TOOL], "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "max_tokens": 64}, ("tools", "tool_choice"))
    message = choices[0].get("message") if isinstance(choices[0].get("message"), dict) else {}
    calls = message.get("tool_calls")
    if not isinstance(calls, list) or not calls or not isinstance(calls[0], dict):
        raise failed(f"no tool_calls in the reply (finish_reason {choices[0].get('finish_reason')!r}, "
                      f"content {quote(message.get('content') or '')})")
    function = calls[0].get("function") if isinstance(calls[0].get("function"), dict) else {}
    name, arguments = function.get("name"), function.get("arguments")
    if name != "get_weather":
        raise failed(f"the tool call names {quote(name, 40)}, not the offered function get_weather")
    if not isinstance(arguments, str):
        raise failed(f"the tool call's arguments are {quote(arguments, 60)}, not a JSON string (OpenAI's format)")
    try:
        parsed = json.loads(arguments)
    except ValueError:
        raise failed(f"the tool call's arguments are not valid JSON: {quote(arguments)}") from None
    if error := schema_errors(parsed, WEATHER_TOOL["function"]["parameters"]):
        raise failed(f"the tool call's arguments do not match its parameters ({error}): {quote(arguments)}")
    return f"get_weather called with arguments matching its parameters: {quote(arguments)}"


N_BEST_TEMPERATURE = 0.8
"""The n-best probe samples (``seed`` fixed, so its verdict is reproducible where the server honours it)."""


async def probe_n_best(p: Prober, n: int = 2) -> str:
    """``n`` choices of one request."""
    choices, _ = await p.choices({"messages": [{"role": "user", "content": "Say hello in three words."}],
                                  "n": n, "max_tokens": 8, "temperature": N_BEST_TEMPERATURE, "seed": 1234}, ("n",))
    if len(choices) != n:
        raise failed(f"asked for n={n} choices, got {len(choices)}")
    indices = sorted(c.get("index") for c in choices if isinstance(c.get("index"), int))
    if indices != list(range(n)):
        raise failed(f"the choices' indices are {[c.get('index') for c in choices]}, not {list(range(n))}")
    empty = [c["index"] for c in choices if not _text(c)]
    if empty:
        raise failed(f"choice {empty[0]} of {n} has no text")
    same = len({_text(c) for c in choices}) == 1
    return f"{n} choices (indices 0-{n - 1}), {'the same text' if same else 'different texts'}"


def pick_stop(text: str) -> tuple[str, int] | None:
    """A stop string from ``text`` and where it first stands: the first word at or after a third
    of the text (else any word after the first character) that does not occur earlier."""
    words = [(m.group(), m.start()) for m in re.finditer(r"\S+", text) if m.start() >= 1]
    words = [(w, at) for w, at in words if text.find(w) == at]
    later = [(w, at) for w, at in words if at >= len(text) // 3]
    return (later or words or [None])[0]


async def probe_stop(p: Prober) -> str:
    """An unstopped reply, then the same request stopped at one of its words."""
    body = {"messages": [{"role": "user", "content": "Count from 1 to 30, separated by spaces."}], "max_tokens": 24}
    choices, _ = await p.choices(body, ("stop",))
    free = _text(choices[0])
    chosen = pick_stop(free)
    if chosen is None:
        raise failed(f"the unstopped reply is too short to place a stop string in: {quote(free)}")
    stop, at = chosen
    choices, _ = await p.choices({**body, "stop": [stop]}, ("stop",))
    stopped = _text(choices[0])
    if stop in stopped:
        raise failed(f"the reply contains the stop string {quote(stop, 20)}: {quote(stopped)}")
    if len(stopped.rstrip()) > at:
        raise failed(f"the reply runs past the stop string {quote(stop, 20)}: {len(stopped)} characters, where the "
                      f"unstopped reply had it at character {at}: {quote(stopped)}")
    return (f"stopped before {quote(stop, 20)}: {len(stopped)} characters, the unstopped reply had it at "
            f"character {at}")


async def probe_logprobs(p: Prober) -> str:
    """``logprobs`` with ``top_logprobs`` = 2: a finite log-probability ≤ 0 for every token."""
    choices, _ = await p.choices({"messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 4,
                                  "logprobs": True, "top_logprobs": 2}, ("logprobs", "top_logprobs"))
    logprobs = choices[0].get("logprobs")
    tokens = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(tokens, list) or not tokens:
        raise failed(f"no logprobs in the reply (choices[0].logprobs is {quote(logprobs, 60)})")
    for index, token in enumerate(tokens):
        values = [token.get("logprob")] if isinstance(token, dict) else [None]
        if isinstance(token, dict) and isinstance(token.get("top_logprobs"), list):
            values += [t.get("logprob") if isinstance(t, dict) else None for t in token["top_logprobs"]]
        bad = next((v for v in values if not _is_logprob(v)), "ok")
        if bad != "ok":
            raise failed(f"token {index} has logprob {quote(bad, 30)}, not a finite number ≤ 0")
    first = tokens[0]
    return f"{len(tokens)} tokens with logprobs (first {quote(first.get('token', ''), 20)} {first['logprob']:.3f})"


def _is_logprob(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and value <= 1e-4)


def context_messages(tokenizer: Any, max_len: int, out_tokens: int) -> tuple[list[dict[str, str]], int]:
    """A chat prompt filling ``max_len`` to within ``max(16, max_len // 100)`` tokens after
    ``out_tokens`` are left for the reply, and its length in tokens (the tokenizer's chat
    template rendered and encoded, as our own server counts; without a template the text alone
    plus 32). Raises ValueError when ``max_len`` leaves no room for a prompt."""
    target = max_len - out_tokens - max(16, max_len // 100)
    if target < 32:
        raise ValueError(f"max_model_len {max_len} leaves no room for a probe prompt")

    def build(units: int) -> tuple[list[dict[str, str]], int]:
        messages = [{"role": "user", "content": _CONTEXT_UNIT * units + _CONTEXT_QUESTION}]
        try:
            text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            return messages, len(tokenizer.encode(text, add_special_tokens=False))
        except Exception:  # no chat template: the content alone, with room for a server's framing
            return messages, len(tokenizer.encode(messages[0]["content"])) + 32

    base, twenty = build(1)[1], build(21)[1]
    per_unit = max(1.0, (twenty - base) / 20)
    units = max(1, int((target - base) / per_unit) + 1)
    messages, count = build(units)
    for _ in range(8):
        if count <= target or units == 1:
            break
        units = max(1, units - math.ceil((count - target) / per_unit))
        messages, count = build(units)
    if count > target:
        raise ValueError(f"could not fit a probe prompt into max_model_len {max_len}")
    return messages, count


async def probe_max_context(p: Prober, tokenizer: Any, max_len: int, source: str) -> str:
    """A prompt near ``max_len`` (see :func:`context_messages`), answered with at least one token."""
    messages, count = context_messages(tokenizer, max_len, 4)
    choices, reply = await p.choices({"messages": messages, "max_tokens": 4}, ())
    usage = reply.body.get("usage") if isinstance(reply.body.get("usage"), dict) else {}
    generated = usage.get("completion_tokens")
    if not _text(choices[0]) and not (isinstance(generated, int) and generated > 0):
        raise failed(f"a {count:,}-token prompt was accepted but not answered (finish_reason "
                      f"{choices[0].get('finish_reason')!r}, no text)")
    served = usage.get("prompt_tokens")
    tokens = f"{served:,} tokens by the server's count" if isinstance(served, int) else f"{count:,} tokens"
    return f"a prompt of {tokens} (max_model_len {max_len:,}, from {source}) was answered"


ProbeFn = Callable[[Prober], Awaitable[str]]


async def probe_features(
    target: EndpointTarget,
    *,
    tokenizer: Any = None,
    max_model_len: int | None = None,
    max_len_source: str = "",
    timeout_s: float = PROBE_TIMEOUT_CAP_S,
    context_timeout_s: float | None = None,
    budget_s: float = PHASE_BUDGET_S,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, FeatureProbe]:
    """Every probe of :data:`FEATURE_PROBES` against ``target``, one after another, by feature.

    ``max_model_len``/``max_len_source``: the fallback when ``/v1/models`` gives no
    ``max_model_len`` (tokens; the source in words, e.g. "the model's config.json");
    ``max_context`` is not probed (left out) without a length or a ``tokenizer``. Each request
    waits at most ``timeout_s`` s (the max-context one ``context_timeout_s``, default
    ``timeout_s``) and the phase at most ``budget_s`` s (by ``clock``, seconds);
    ``elapsed_ms`` is measured with ``clock``. Never raises for what a server does; Ctrl-C
    (``CancelledError``/``KeyboardInterrupt``) propagates.
    """
    results: dict[str, FeatureProbe] = {}
    deadline = clock() + budget_s
    async with new_session(timeout_s) as session:
        prober = Prober(session, target, timeout_s)
        served_len = await prober.max_model_len()
        length, source = (served_len, "the endpoint's /v1/models") if served_len else (max_model_len, max_len_source)
        probes: dict[str, ProbeFn] = {
            "structured_output": probe_structured_output, "tool_calling": probe_tool_calling,
            "n_best": probe_n_best, "stop": probe_stop, "logprobs": probe_logprobs,
        }
        if length and tokenizer is not None:
            probes["max_context"] = lambda prober: probe_max_context(prober, tokenizer, int(length), source or "")
        for feature in FEATURE_PROBES:
            if feature not in probes:
                continue
            start = clock()
            left = deadline - start
            if left < 1.0:
                results[feature] = FeatureProbe(feature=feature, status=FeatureStatus.FAILED, elapsed_ms=0.0,
                                                detail=f"not run: the probe phase used its {budget_s:g} s budget")
                continue
            limit = context_timeout_s if feature == "max_context" and context_timeout_s else timeout_s
            prober.timeout_s = min(limit, left)
            status, detail = await _one(probes[feature], prober)
            results[feature] = FeatureProbe(feature=feature, status=status, detail=detail,
                                            elapsed_ms=round((clock() - start) * 1000.0, 1))
    return results


async def _one(probe: ProbeFn, prober: Prober) -> tuple[FeatureStatus, str]:
    """One probe's verdict; a timeout, a connection error or a bug in the probe is ``failed``."""
    try:
        return FeatureStatus.VERIFIED, await probe(prober)
    except Verdict as verdict:
        return verdict.status, verdict.detail
    except asyncio.TimeoutError:
        return FeatureStatus.FAILED, f"no reply within {prober.timeout_s:g} s (the probe's timeout)"
    except aiohttp.ClientError as exc:
        return FeatureStatus.FAILED, f"connection failed: {type(exc).__name__}: {exc}"[:300]
    except Exception as exc:  # a reply shape no check foresaw: the probe fails, the run goes on
        return FeatureStatus.FAILED, f"the probe could not check the reply: {type(exc).__name__}: {exc}"[:300]


def run_feature_probes(target: EndpointTarget, **options: Any) -> dict[str, FeatureProbe]:
    """:func:`probe_features` in a fresh event loop (for the synchronous orchestrator)."""
    return asyncio.run(probe_features(target, **options))
