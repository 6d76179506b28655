"""The checks behind the feature probes (:mod:`harness.loadgen.features`): reading a server's
error body, telling "unsupported" from "failed", and validating a reply against a JSON schema.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from results.schema import FeatureStatus

_UNSUPPORTED = re.compile(
    r"not (?:yet )?(?:supported|implemented|enabled)|unsupported|does(?: not|n't) support|"
    r"extra (?:inputs|fields) (?:are )?not permitted|unrecogni[sz]ed (?:request )?(?:field|argument|parameter)|"
    r"unknown (?:field|parameter|argument)|requires (?:the )?--[a-z][a-z0-9-]+", re.IGNORECASE)
"""A 4xx message that says the field is not supported, or needs a server flag the engine was not
started with (vLLM: "tool_choice ... requires --tool-call-parser ...") (vLLM, SGLang, our own server, pydantic's
``extra="forbid"``), as opposed to one about a bad value."""

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,), "array": (list,), "string": (str,), "boolean": (bool,), "null": (type(None),),
    "integer": (int,), "number": (int, float),
}


class Verdict(Exception):
    """A probe's outcome reached before its last check (raised by a probe, caught by
    ``harness.loadgen.features.probe_features``)."""

    def __init__(self, status: FeatureStatus, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


def failed(detail: str) -> Verdict:
    """A ``failed`` verdict with ``detail``."""
    return Verdict(FeatureStatus.FAILED, detail)


def quote(text: Any, limit: int = 80) -> str:
    """``text`` as a one-line JSON string of at most ``limit`` characters (then "…")."""
    text = text if isinstance(text, str) else json.dumps(text, default=str)
    return json.dumps(text[:limit], ensure_ascii=False) + ("…" if len(text) > limit else "")


def schema_errors(value: Any, schema: dict[str, Any], path: str = "$") -> str | None:
    """The first way ``value`` breaks ``schema``, None when it matches. Uses ``jsonschema`` when
    it is installed; otherwise a limited check that knows only ``type``, ``properties``,
    ``required``, ``additionalProperties`` (false), ``enum`` and ``items`` - the keywords of the
    probes' own schemas (``harness.loadgen.features``), not general JSON Schema."""
    try:
        import jsonschema  # type: ignore[import-not-found]
    except ImportError:
        return _limited_errors(value, schema, path)
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(value))
    return None if error is None else error.message


def _limited_errors(value: Any, schema: dict[str, Any], path: str) -> str | None:
    kind = schema.get("type")
    if kind is not None:
        allowed = _JSON_TYPES.get(kind, ())
        if not isinstance(value, allowed) or (kind in ("integer", "number") and isinstance(value, bool)):
            return f"{path} is {quote(value, 30)}, not of type {kind}"
    if "enum" in schema and value not in schema["enum"]:
        return f"{path} is {quote(value, 30)}, not one of {schema['enum']}"
    if isinstance(value, dict):
        missing = [key for key in schema.get("required", []) if key not in value]
        if missing:
            return f"{path} lacks the required key {missing[0]!r}"
        properties = schema.get("properties", {})
        if schema.get("additionalProperties") is False:
            extra = [key for key in value if key not in properties]
            if extra:
                return f"{path} has the key {extra[0]!r}, which the schema does not allow"
        for key, sub in properties.items():
            if key in value and (error := _limited_errors(value[key], sub, f"{path}.{key}")):
                return error
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            if error := _limited_errors(item, schema["items"], f"{path}[{index}]"):
                return error
    return None


@dataclass
class ProbeReply:
    """One HTTP answer to a feature probe's request (not a turn's reply, ``workloads.base.Reply``):
    ``status``, ``body`` (the parsed JSON, None when it is not JSON), ``text`` (the raw body) and
    ``content_type``."""

    status: int
    body: Any
    text: str
    content_type: str = ""


def error_message(reply: ProbeReply) -> tuple[str, str | None]:
    """(the server's one-line message, the OpenAI error's ``param`` or a pydantic error's field)
    from an error body: OpenAI's ``{"error": {"message", "param"}}``, FastAPI's ``{"detail"}``
    (a string, or a list of ``{"loc", "msg"}``), ``{"message"}``, else the raw text."""
    body, param, message = reply.body, None, None
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict):
            message, param = error.get("message"), error.get("param")
        elif isinstance(error, str):
            message = error
        detail = body.get("detail")
        if message is None and isinstance(detail, list) and detail and isinstance(detail[0], dict):
            loc = [str(part) for part in detail[0].get("loc", []) if part != "body"]
            param = loc[0] if loc else None
            message = f"{'.'.join(loc)}: {detail[0].get('msg', '')}" if loc else detail[0].get("msg")
        elif message is None and detail is not None:
            message = detail
        if message is None:
            message = body.get("message")
    text = str(message if message is not None else reply.text).strip() or "(empty body)"
    return " ".join(text.split())[:300], str(param) if param is not None else None


def http_verdict(reply: ProbeReply, fields: tuple[str, ...]) -> Verdict:
    """A non-200 answer as a verdict: ``unsupported`` for a 4xx whose message says the field is
    not supported or whose ``param`` is one of ``fields``, else ``failed``."""
    message, param = error_message(reply)
    unsupported = 400 <= reply.status < 500 and (
        bool(_UNSUPPORTED.search(message)) or (param is not None and param.split(".")[0] in fields))
    return Verdict(FeatureStatus.UNSUPPORTED if unsupported else FeatureStatus.FAILED,
                    f"HTTP {reply.status}: {message}")
