"""OpenAI API wire format for the reference engine's server and the shims: request models, errors, chunks.

Request bodies follow the OpenAI API (``/v1/completions``, ``/v1/chat/completions``) plus the
vLLM extensions the benchmark sends (``top_k``, ``ignore_eos``, ``stop_token_ids``). Unknown
fields are ignored (clients send many harmless defaults); fields that would change the result
in a way this server does not implement (``logprobs``, penalties, ``echo``, ``best_of`` other
than ``n``, ``suffix``) are rejected with HTTP 400 rather than silently ignored.

Response objects are plain dicts in the exact shapes of OpenAI / vLLM, built by the functions
below so the streaming and non-streaming paths share one definition.

Imports only the standard library and pydantic: the shims (``adapters/shims``) import it inside
other engines' virtual environments.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class APIError(Exception):
    """An error returned to the client as ``{"error": {"message", "type", "param", "code"}}``.

    ``status``: the HTTP status (``code`` in the body, as vLLM does); ``err_type``: the
    OpenAI-style class name (``BadRequestError``, ``NotFoundError``, ``InternalServerError``).
    """

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
    include_usage: bool = False


class _CommonRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    n: int = 1
    best_of: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None

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
    echo: bool = False
    suffix: str | None = None
    logprobs: int | None = None


class ChatMessage(BaseModel):
    """One chat message; ``content`` is a string or a list of ``{"type": "text"}`` parts."""

    model_config = ConfigDict(extra="allow")
    role: str
    content: str | list[dict[str, Any]] | None = None


class ChatCompletionRequest(_CommonRequest):
    """``POST /v1/chat/completions``: ``max_completion_tokens`` wins over ``max_tokens``;
    without either, the request may use the rest of the context (vLLM convention)."""

    messages: list[ChatMessage] | None = None
    max_completion_tokens: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    tools: list[Any] | None = Field(default=None)


def parse_body(raw: bytes, model_cls: type[BaseModel]) -> Any:
    """Parse and validate a request body; raises :class:`APIError` (400) with a one-line reason."""
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise APIError(f"the request body is not valid JSON ({exc}); send a JSON object") from None
    if not isinstance(data, dict):
        raise APIError("the request body must be a JSON object")
    try:
        return model_cls.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "body"
        if err["type"] == "missing":
            raise APIError(f"missing required field '{field}'", param=field) from None
        raise APIError(f"invalid value for '{field}': {err['msg']}", param=field) from None


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
    rid: str, created: int, model: str, text: str, finish_reason: str | None, index: int = 0
) -> dict[str, Any]:
    """One streamed ``text_completion`` chunk for choice ``index``."""
    return {
        "id": rid,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [{"index": index, "text": text, "logprobs": None, "finish_reason": finish_reason}],
    }


def chat_chunk(
    rid: str, created: int, model: str, delta: dict[str, Any], finish_reason: str | None, index: int = 0
) -> dict[str, Any]:
    """One streamed ``chat.completion.chunk`` for choice ``index``."""
    return {
        "id": rid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": index, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
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
) -> dict[str, Any]:
    """A non-streamed ``text_completion`` response (one choice per text, in index order)."""
    return {
        "id": rid,
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [
            {"index": i, "text": text, "logprobs": None, "finish_reason": reason}
            for i, (text, reason) in enumerate(zip(texts, finish_reasons))
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
) -> dict[str, Any]:
    """A non-streamed ``chat.completion`` response (one choice per text, in index order)."""
    return {
        "id": rid,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": i,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": reason,
            }
            for i, (text, reason) in enumerate(zip(texts, finish_reasons))
        ],
        "usage": usage_obj,
    }


def sse(obj: dict[str, Any] | str) -> str:
    """One server-sent event: ``data: {json}\\n\\n`` (or ``data: [DONE]\\n\\n`` for the string)."""
    payload = obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return f"data: {payload}\n\n"
