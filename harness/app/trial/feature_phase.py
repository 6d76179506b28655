"""The feature-probe phase of ``bench run``: once per engine per run, outside the measured phase.

:func:`probe_phase` runs :mod:`harness.loadgen.features` against an engine right after its
first repeat's measured phase, after the engine's own counters were read (so the probes never
touch the measured numbers or the prefix-cache counters) and before the engine is stopped. The
verdicts go to the engine's ``summary.json`` entry (``EngineResult.feature_probes``), never to
``requests.jsonl``. ``bench run --no-feature-probes`` skips the phase.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.markup import escape

from results.schema import FEATURE_PROBES, FeatureProbe, FeatureStatus, Manifest
from rich.console import Console

if TYPE_CHECKING:
    from adapters.base import Endpoint
    from harness.loadgen.client import EndpointTarget

if TYPE_CHECKING:  # transformers is slow to import: only where a tokenizer is loaded
    from transformers import PreTrainedTokenizerBase

SYMBOLS = {FeatureStatus.VERIFIED: "✓", FeatureStatus.FAILED: "✗", FeatureStatus.UNSUPPORTED: "–"}
"""The matrix's marks: ✓ verified, ✗ failed, – unsupported (the report uses the same)."""


def fallback_max_len(effective_config: dict[str, Any], manifest: Manifest) -> tuple[int | None, str]:
    """The model's maximum length in tokens when the endpoint's ``/v1/models`` does not say:
    the engine's effective configuration's ``max_model_len``, else the model's
    ``max_position_embeddings`` (config.json, in the manifest); ``(None, "")`` when neither is
    recorded. Returns ``(tokens, where it came from)``."""
    value = effective_config.get("max_model_len")
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value, "the engine's effective configuration"
    model = manifest.model
    if model is not None and model.max_position_embeddings:
        return int(model.max_position_embeddings), "the model's config.json (max_position_embeddings)"
    return None, ""


def probe_phase(console: Console, name: str, endpoint: Endpoint, target: EndpointTarget, tokenizer: PreTrainedTokenizerBase, manifest: Manifest,
                request_timeout_s: float) -> dict[str, FeatureProbe]:
    """Probe ``name``'s features at ``target`` (an ``EndpointTarget``; ``endpoint``: its adapter
    ``Endpoint``, for the effective configuration); each request waits at most the run's
    ``request_timeout_s`` capped at ``harness.loadgen.features.PROBE_TIMEOUT_CAP_S`` (60 s; the
    max-context prompt at ``CONTEXT_TIMEOUT_CAP_S``, 180 s).
    Prints one line when done and returns the verdicts by feature. Never raises for what the
    server does (a crash of the server shows as failed probes, and the run notices it when the
    engine is stopped)."""
    from harness.loadgen.features import CONTEXT_TIMEOUT_CAP_S, PROBE_TIMEOUT_CAP_S, run_feature_probes

    console.print(f"[bold]{escape(name)}[/]: feature probes …")
    length, source = fallback_max_len(getattr(endpoint, "effective_config", None) or {}, manifest)
    probes = run_feature_probes(target, tokenizer=tokenizer, max_model_len=length, max_len_source=source,
                                timeout_s=min(request_timeout_s, PROBE_TIMEOUT_CAP_S),
                                context_timeout_s=min(request_timeout_s, CONTEXT_TIMEOUT_CAP_S))
    console.print(escape(probe_line(name, probes)), highlight=False)
    return probes


def probe_line(name: str, probes: dict[str, FeatureProbe]) -> str:
    """One compact line: ``"own: features ✓ n_best, stop · ✗ structured_output (the reply is not
    valid JSON …) · – tool_calling, logprobs"``; "not probed" for no verdicts."""
    if not probes:
        return f"{name}: features not probed"
    parts = []
    for status in (FeatureStatus.VERIFIED, FeatureStatus.FAILED, FeatureStatus.UNSUPPORTED):
        names = [f for f in FEATURE_PROBES if f in probes and probes[f].status is status]
        names += [f for f, p in probes.items() if f not in FEATURE_PROBES and p.status is status]
        if not names:
            continue
        if status is FeatureStatus.FAILED:
            names = [f"{f} ({_short(probes[f].detail)})" for f in names]
        parts.append(f"{SYMBOLS[status]} {', '.join(names)}")
    return f"{name}: features {' · '.join(parts)}"


def _short(detail: str, limit: int = 70) -> str:
    return detail if len(detail) <= limit else detail[:limit - 1].rstrip() + "…"
