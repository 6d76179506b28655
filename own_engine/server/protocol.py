"""OpenAI API wire format for the reference engine's server and the shims: request models, errors, chunks.

Request bodies follow the OpenAI API (``/v1/completions``, ``/v1/chat/completions``) plus the
vLLM extensions the benchmark sends (``top_k``, ``ignore_eos``, ``stop_token_ids``). Unknown
fields are ignored (clients send many harmless defaults); fields that would change the result
in a way a server does not implement (penalties, ``echo``, ``best_of`` other than ``n``,
``suffix``; ``logprobs`` on the shims) are rejected with HTTP 400 rather than silently ignored.
Field types are strict, as in the OpenAI API: ``"stream": "yes"``, ``"max_tokens": "12"`` or ``12.5``,
``"n": true`` and ``"temperature": "0.5"`` are 400s naming the field, never coerced.

Response objects are plain dicts in the exact shapes of OpenAI / vLLM, built by the functions
below so the streaming and non-streaming paths share one definition. Logprobs
(:class:`LogprobEntry`) take the legacy completions shape (:func:`completion_logprobs`:
``tokens``, ``token_logprobs``, ``top_logprobs``, ``text_offset``) or the chat shape
(:func:`chat_logprobs`: ``content`` = ``[{token, logprob, bytes, top_logprobs}]``).

Imports only the standard library and pydantic: the shims (``adapters/shims``) import it inside
other engines' virtual environments.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, ValidationError


class APIError(Exception):
    """An error returned to the client as ``{"error": {"message", "type", "param", "code"}}``.

    ``status``: the HTTP status (``code`` in the body, as vLLM does); ``err_type``: the
    OpenAI-style class name (``BadRequestError``, ``NotFoundError``, ``InternalServerError``);
    ``headers``: extra response headers (e.g. ``Connection: close``).
    """

    headers: dict[str, str] | None = None

    def __init__(
        self,
        message: str,
        status: int = 400,
        err_type: str = "BadRequestError",
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.err_type = err_type
        self.param = param

    def body(self) -> dict[str, Any]:
        """The JSON error body."""
        return error_body(self.message, self.status, self.err_type, self.param)


def error_body(
    message: str, status: int = 400, err_type: str = "BadRequestError", param: str | None = None
) -> dict[str, Any]:
    """OpenAI-style error object (vLLM ``ErrorResponse`` shape)."""
    return {"error": {"message": message, "type": err_type, "param": param, "code": status}}


class StreamOptions(BaseModel):
    """``stream_options``: ``include_usage`` adds a final usage-only chunk (``choices: []``)."""

    model_config = ConfigDict(extra="ignore")
    include_usage: StrictBool = False


class _CommonRequest(BaseModel):
    # Strict scalar types (OpenAI's convention: "max_tokens": "12" or 12.5, "stream": "yes",
    # "n": true are type errors there, not values to coerce); a float field accepts an integer.
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    max_tokens: StrictInt | None = None
    temperature: StrictFloat | None = None
    top_p: StrictFloat | None = None
    top_k: StrictInt | None = None
    seed: StrictInt | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[StrictInt] | None = None
    ignore_eos: StrictBool = False
    n: StrictInt = 1
    best_of: StrictInt | None = None
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    presence_penalty: StrictFloat | None = None
    frequency_penalty: StrictFloat | None = None
    repetition_penalty: StrictFloat | None = None

    def stop_list(self) -> list[str]:
        """``stop`` as a list (OpenAI allows one string or a list)."""
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    @property
    def include_usage(self) -> bool:
        """Whether a streamed response ends with a usage-only chunk."""
        return bool(self.stream_options and self.stream_options.include_usage)


class CompletionRequest(_CommonRequest):
    """``POST /v1/completions``: ``prompt`` is a string or a list of token ids (or a one-element
    list of either); ``max_tokens`` defaults to 16 (OpenAI)."""

    prompt: Any = None
    echo: StrictBool = False
    suffix: str | None = None
    logprobs: StrictInt | None = None


class ChatMessage(BaseModel):
    """One chat message; ``content`` is a string or a list of ``{"type": "text"}`` parts."""

    model_config = ConfigDict(extra="allow")
    role: str
    content: str | list[dict[str, Any]] | None = None


class ChatCompletionRequest(_CommonRequest):
    """``POST /v1/chat/completions``: ``max_completion_tokens`` wins over ``max_tokens``;
    without either, the request may use the rest of the context (vLLM convention)."""

    messages: list[ChatMessage] | None = None
    max_completion_tokens: StrictInt | None = None
    logprobs: StrictBool | None = None
    top_logprobs: StrictInt | None = None
    tools: list[Any] | None = Field(default=None)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed by RFC 8259")


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"{text[:20]} is too large for a number")
    return value


_TYPE_MESSAGES = {  # pydantic strict-mode error types -> what the field must be (OpenAI's wording)
    "bool_type": "must be true or false",
    "int_type": "must be an integer",
    "float_type": "must be a number",
    "string_type": "must be a string",
    "list_type": "must be a list",
    "dict_type": "must be an object",
    "model_type": "must be an object",
}


def _describe(value: Any) -> str:
    """``value`` as the client wrote it, in JSON terms and at most about 40 characters."""
    kind = {bool: "", str: "the string ", int: "the integer ", float: "the number ", list: "a list ",
            dict: "an object "}.get(type(value), "")
    text = json.dumps(value, ensure_ascii=False) if isinstance(value, (bool, str, int, float)) or value is None else ""
    if len(text) > 40:
        text = text[:37] + "..."
    return (kind + text).strip() or "null"


_UNION_TAG = re.compile(  # pydantic's names for union branches: str, list[str], StreamOptions, ...
    r"(str|int|float|bool|bytes|none|list|dict|tuple|set|literal|is-instance)(\[.*\])?|[A-Z]\w*|function-\w+(\[.*\])?")


def _field_path(data: Any, loc: tuple[Any, ...]) -> str:
    """The dotted path of an error's location in the request, without pydantic's union-branch
    names (``messages.0.content.str`` -> ``messages.0.content``)."""
    parts, node = [], data
    for key in loc:
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, list) and isinstance(key, int) and 0 <= key < len(node):
            node = node[key]
        elif isinstance(key, str) and (not isinstance(node, dict) or _UNION_TAG.fullmatch(key)):
            continue  # a union branch's name, not a place in the request
        else:
            node = None  # a missing field: the path ends here
        parts.append(str(key))
    return ".".join(parts) or "body"


def parse_body(raw: bytes, model_cls: type[BaseModel]) -> Any:
    """Parse and validate a request body; raises :class:`APIError` (400) with a one-line reason
    naming the field.

    Strict JSON (RFC 8259): ``NaN``/``Infinity`` and numbers beyond the float range are
    rejected, and so is nesting deeper than Python's recursion limit (about 1,000 levels),
    which ``json`` reports as ``RecursionError`` - answered 400 here rather than 500. Field
    types are strict (see :class:`_CommonRequest`): ``"stream": "yes"`` or ``"max_tokens":
    "12"`` are errors, not coerced.
    """
    try:
        data = json.loads(raw, parse_constant=_reject_constant, parse_float=_finite_float)
    except RecursionError:
        raise APIError("the request body is nested too deeply (about 1,000 levels of JSON arrays/objects); "
                       "send a flatter JSON object") from None
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
        raise APIError(f"the request body is not valid JSON ({exc}); send a JSON object") from None
    if not isinstance(data, dict):
        raise APIError("the request body must be a JSON object")
    try:
        return model_cls.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        err = errors[0]
        field = _field_path(data, tuple(err["loc"]))
        if err["type"] == "missing":
            raise APIError(f"missing required field '{field}'", param=field) from None
        # a union field (``stop``: a string or a list) fails once per branch: name every branch
        wants: list[str] = []
        for other in errors:
            if _field_path(data, tuple(other["loc"])) == field:
                want = _TYPE_MESSAGES.get(other["type"], other["msg"])
                if want not in wants:
                    wants.append(want)
        what = " or ".join([wants[0], *(w.removeprefix("must be ") for w in wants[1:])])
        got = f", got {_describe(err['input'])}" if "input" in err else ""
        raise APIError(f"invalid value for '{field}': {what}{got}", param=field) from None


def chat_messages(req: ChatCompletionRequest) -> list[dict[str, Any]]:
    """Messages as plain dicts with string content, for ``apply_chat_template``.

    Text parts of a list ``content`` are concatenated; any other part type raises
    :class:`APIError` (this server is text-only).
    """
    if not req.messages:
        raise APIError("missing required field 'messages' (a non-empty list of {role, content})", param="messages")
    out: list[dict[str, Any]] = []
    for i, msg in enumerate(req.messages):
        content = msg.content
        if isinstance(content, list):
            texts = []
            for part in content:
                if part.get("type") != "text" or not isinstance(part.get("text"), str):
                    raise APIError(
                        f"messages[{i}].content has a part of type {part.get('type')!r}; only text parts are supported",
                        param="messages",
                    )
                texts.append(part["text"])
            content = "".join(texts)
        out.append({"role": msg.role, "content": content or ""})
    return out


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int | None = None) -> dict[str, Any]:
    """The ``usage`` object (token counts), with ``prompt_tokens_details.cached_tokens``
    (prefix-cache hits) when the server has a prefix cache (``cached_tokens`` not None)."""
    out: dict[str, Any] = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    if cached_tokens is not None:
        out["prompt_tokens_details"] = {"cached_tokens": cached_tokens}
    return out


def model_list(model: str, owned_by: str, max_model_len: int | None = None) -> dict[str, Any]:
    """The ``GET /v1/models`` body for one served model (``max_model_len`` in tokens, vLLM's
    extension, included when known)."""
    card: dict[str, Any] = {"id": model, "object": "model", "created": 0, "owned_by": owned_by}
    if max_model_len is not None:
        card["max_model_len"] = max_model_len
    return {"object": "list", "data": [card]}


def completion_chunk(
    rid: str, created: int, model: str, text: str, finish_reason: str | None, index: int = 0,
    logprobs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One streamed ``text_completion`` chunk for choice ``index`` (``logprobs``: the
    :func:`completion_logprobs` of the tokens whose text it carries, or None)."""
    return {
        "id": rid,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [{"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}],
    }


def chat_chunk(
    rid: str, created: int, model: str, delta: dict[str, Any], finish_reason: str | None, index: int = 0,
    logprobs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One streamed ``chat.completion.chunk`` for choice ``index`` (``logprobs``: the
    :func:`chat_logprobs` of the tokens whose text it carries, or None)."""
    return {
        "id": rid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}],
    }


def usage_chunk(rid: str, obj: str, created: int, model: str, usage_obj: dict[str, Any]) -> dict[str, Any]:
    """The final usage-only chunk of a stream with ``stream_options.include_usage``."""
    return {"id": rid, "object": obj, "created": created, "model": model, "choices": [], "usage": usage_obj}


def completion_response(
    rid: str,
    created: int,
    model: str,
    texts: list[str],
    finish_reasons: list[str | None],
    usage_obj: dict[str, Any],
    logprobs: list[dict[str, Any] | None] | None = None,
) -> dict[str, Any]:
    """A non-streamed ``text_completion`` response (one choice per text, in index order;
    ``logprobs[i]``: choice ``i``'s :func:`completion_logprobs`, or None)."""
    lps = logprobs or [None] * len(texts)
    return {
        "id": rid,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [
            {"index": i, "text": text, "logprobs": lp, "finish_reason": reason}
            for i, (text, reason, lp) in enumerate(zip(texts, finish_reasons, lps))
        ],
        "usage": usage_obj,
    }


def chat_response(
    rid: str,
    created: int,
    model: str,
    texts: list[str],
    finish_reasons: list[str | None],
    usage_obj: dict[str, Any],
    logprobs: list[dict[str, Any] | None] | None = None,
) -> dict[str, Any]:
    """A non-streamed ``chat.completion`` response (one choice per text, in index order;
    ``logprobs[i]``: choice ``i``'s :func:`chat_logprobs`, or None)."""
    lps = logprobs or [None] * len(texts)
    return {
        "id": rid,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": i,
                "message": {"role": "assistant", "content": text},
                "logprobs": lp,
                "finish_reason": reason,
            }
            for i, (text, reason, lp) in enumerate(zip(texts, finish_reasons, lps))
        ],
        "usage": usage_obj,
    }


LOGPROB_FLOOR = -9999.0
"""Logprobs below this (``-inf`` included) are reported as it, so the JSON stays valid (vLLM's clamp)."""


@dataclass(frozen=True)
class LogprobEntry:
    """One generated token's log-probabilities (nats) as a server returns them.

    ``token``: the tokenizer's decoding of that one token id; ``logprob``: its log-probability;
    ``top``: ``(token text, logprob)`` of its position's most likely tokens, descending (as many as
    the request asked for); ``offset``: characters of the choice's text before this token's text
    (completions' ``text_offset``).
    """

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()
    offset: int = 0


def _lp(value: float) -> float:
    return LOGPROB_FLOOR if math.isnan(value) else max(float(value), LOGPROB_FLOOR)


def completion_logprobs(entries: list[LogprobEntry], text_len: int | None = None) -> dict[str, Any]:
    """The legacy ``text_completion`` ``logprobs`` object for ``entries`` (one per token):
    ``tokens``, ``token_logprobs``, ``top_logprobs`` (per token a ``{text: logprob}`` dict: the
    top tokens descending, then the sampled token when it is not among them, OpenAI's "up to
    logprobs + 1" entries) and ``text_offset`` (clamped to ``text_len``, the characters of the
    choice's text returned so far: a stop string may cut text that a token's offset pointed past).
    """
    tops = []
    for e in entries:
        top = {text: _lp(v) for text, v in e.top}
        top.setdefault(e.token, _lp(e.logprob))
        tops.append(top)
    return {
        "tokens": [e.token for e in entries],
        "token_logprobs": [_lp(e.logprob) for e in entries],
        "top_logprobs": tops,
        "text_offset": [e.offset if text_len is None else min(e.offset, text_len) for e in entries],
    }


def _chat_token(text: str, logprob: float) -> dict[str, Any]:
    return {"token": text, "logprob": _lp(logprob), "bytes": list(text.encode("utf-8", errors="replace"))}


def chat_logprobs(entries: list[LogprobEntry]) -> dict[str, Any]:
    """The ``chat.completion`` ``logprobs`` object: ``{"content": [{token, logprob, bytes,
    top_logprobs: [{token, logprob, bytes}, ...]}]}`` (``bytes``: the token text's UTF-8 bytes)."""
    return {"content": [{**_chat_token(e.token, e.logprob), "top_logprobs": [_chat_token(t, v) for t, v in e.top]}
                        for e in entries]}


def sse(obj: dict[str, Any] | str) -> str:
    """One server-sent event: ``data: {json}\\n\\n`` (or ``data: [DONE]\\n\\n`` for the string)."""
    payload = obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return f"data: {payload}\n\n"
