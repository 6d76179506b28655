"""Any existing OpenAI-compatible endpoint (a remote vLLM cluster, a hosted API).

Nothing is started: ``launch`` checks the endpoint answers ``GET /v1/models`` (with the API key
from ``$OPENAI_API_KEY`` when set - never written to results), picks the model name
(``LaunchConfig.model_name`` or the first listed model) and yields the :class:`Endpoint`.

The endpoint is taken to accept ``ignore_eos`` (vLLM, SGLang, TensorRT-LLM and the reference
server do): workloads with fixed output lengths then cost every endpoint the same work. One
that rejects the field (the hosted OpenAI API answers HTTP 400) is measured with
``bench run --no-ignore-eos``; a reply that still stops early is counted as output shortfall.
"""

from __future__ import annotations

import base64
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from contextlib import contextmanager
from typing import Iterator

from adapters.base import Capabilities, Endpoint, EngineError, EngineTraits, LaunchConfig, ProbeResult
from adapters.registry import register
from adapters.telemetry import effective
from results.redact import redact_credentials

API_KEY_ENV = "OPENAI_API_KEY"

def normalize_base_url(url: str) -> str:
    """``http://h:8000/v1/`` → ``http://h:8000`` (the Endpoint convention: no ``/v1``).

    Raises ValueError for a URL that is not http(s) (its message masks credentials).
    """
    u = url.strip().rstrip("/")
    if not (u.startswith("http://") or u.startswith("https://")):
        raise ValueError(f"--base-url {redact_credentials(url)!r} must start with http:// or https://")
    if u.endswith("/v1"):
        u = u[:-3]
    return u


def _without_userinfo(url: str) -> tuple[str, str | None]:
    """``(url without its user:password@, a Basic Authorization header value or None)``:
    urllib sends no URL credentials itself (aiohttp, the streaming client, does)."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    netloc += f":{parts.port}" if parts.port else ""
    pair = f"{urllib.parse.unquote(parts.username or '')}:{urllib.parse.unquote(parts.password or '')}"
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc)), "Basic " + base64.b64encode(pair.encode()).decode()


def list_models(base_url: str, api_key: str | None, timeout: float = 10.0, name: str = "openai",
                option: str = "--base-url") -> list[str]:
    """Model ids from ``GET {base_url}/v1/models`` (credentials in the URL sent as Basic auth).
    Raises EngineError when unreachable/not OpenAI; its message masks the URL's credentials."""
    url, basic = _without_userinfo(base_url)
    shown = redact_credentials(base_url)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else ({"Authorization": basic} if basic else {})
    req = urllib.request.Request(url + "/v1/models", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            data = json.loads(resp.read().decode())
    except urllib.error.HTTPError as exc:
        hint = f": set {API_KEY_ENV}" if exc.code in (401, 403) else ""
        raise EngineError(f"{name}: GET {shown}/v1/models answered HTTP {exc.code}{hint}") from exc
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise EngineError(f"{name}: {shown} is not reachable ({redact_credentials(str(exc))}); check {option}") from exc
    try:
        return [m["id"] for m in data.get("data", [])]
    except (AttributeError, KeyError, TypeError) as exc:
        raise EngineError(f"{name}: {shown}/v1/models is not an OpenAI model list") from exc


@register("openai", order=120)
class OpenAIAdapter(EngineTraits):
    """A generic endpoint; ``base_url`` may be given here or in :class:`LaunchConfig`."""

    name = "openai"
    display_name = "openai-compatible endpoint"
    capabilities = Capabilities(hardware=("nvidia", "amd", "cpu"), features=(), api="server", complexity=1)
    in_all = False  # needs --base-url
    effective_reader = staticmethod(effective.read_openai)

    def __init__(self, base_url: str | None = None, name: str | None = None) -> None:
        self.base_url = base_url
        self._option = "--base-url"
        if name is not None:  # ``bench run --endpoint NAME=URL``: the deployment compared under its own name
            self.name = name
            self.display_name = f"endpoint {name}"
            self._option = f"--endpoint {name}=URL"

    def probe(self) -> ProbeResult:
        """Without a base URL: available (checked at launch); with one: reachable or not."""
        if not self.base_url:
            return ProbeResult(True, "openai: any OpenAI-compatible endpoint: pass --base-url URL")
        try:
            base = normalize_base_url(self.base_url)
            models = list_models(base, os.environ.get(API_KEY_ENV), timeout=5.0, name=self.name, option=self._option)
        except (ValueError, EngineError) as exc:
            return ProbeResult(False, str(exc))
        return ProbeResult(True, f"{self.name}: {redact_credentials(base)} serves {len(models)} model(s)")

    def parity_args(self, target: object) -> tuple[dict[str, str], list[str]]:
        """``--parity strict`` cannot reach an external endpoint: its settings are its operator's."""
        return {}, [f"{self.name}: an external endpoint: its settings are its operator's, not set by this harness"]

    @contextmanager
    def launch(self, config: LaunchConfig) -> Iterator[Endpoint]:
        """Yield the endpoint at ``config.base_url`` (or the constructor's); raises EngineError
        when none is given, it is unreachable, or the requested model is not served."""
        raw = config.base_url or self.base_url
        if not raw:
            raise EngineError("openai: needs --base-url URL of an OpenAI-compatible server")
        try:
            base = normalize_base_url(raw)
        except ValueError as exc:
            raise EngineError(redact_credentials(str(exc))) from exc
        api_key = os.environ.get(API_KEY_ENV) or None
        models = list_models(base, api_key, name=self.name, option=self._option)
        shown = redact_credentials(base)  # what is stored and printed; ``base_url`` keeps them to authenticate
        model = config.model_name or (models[0] if models else None)
        if model is None:
            raise EngineError(f"{self.name}: {shown}/v1/models lists no model: pass --model NAME")
        if models and model not in models:
            raise EngineError(f"{self.name}: model {model!r} is not served by {shown} (it serves: {', '.join(models[:5])})")
        yield Endpoint(
            base_url=base, model_name=model, display_name=f"{self.name} ({shown})",
            effective_config={"engine": "openai", "base_url": shown, "model": model,
                              "api_key": "from $OPENAI_API_KEY" if api_key else None, "served_models": models[:20]},
            api_key=api_key, supports_ignore_eos=True, metrics_url=None, log_path=None,
        )
