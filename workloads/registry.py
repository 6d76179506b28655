"""The workload registry: names → generators, CLI-style overrides → validated specs → Workload.

``build_workload`` is the single entry point the runner and the CLI call. Precedence of
values: explicit keyword arguments (not None) > the YAML ``spec_file`` > the kind's defaults
(see :mod:`workloads.spec`). Every keyword left at ``None`` keeps the spec's value.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from workloads.agentic import build_agentic_sessions
from workloads.base import RequestSpec, Workload
from workloads.errors import WorkloadError
from workloads.single import build_chat, build_code, build_rag, build_random, build_summarization
from workloads.spec import WorkloadSpec, load_spec_file, make_spec
from workloads.stats import schedule_rate, workload_stats
from workloads.tokens import TokenKit, as_kit
from workloads.trace import build_trace

_DESCRIPTIONS: dict[str, str] = {
    "agentic": "multi-turn tool-using sessions replayed from real SWE-agent trajectories: growing shared prefix, actual replies, branching, think times (default)",
    "chat": "single-turn chat with real ShareGPT prompts and ShareGPT output-length statistics",
    "rag": "long shared document prefixes + unique questions (SGLang generated-shared-prefix; or Mooncake prefix block hashes)",
    "summarization": "long prompt, short output: arXiv summarization length statistics (Vidur)",
    "code": "code completion: Azure 2023 code-trace lengths (long context, very short output)",
    "random": "vLLM-compatible random prompts: fixed or ranged input/output lengths, optional shared prefix",
    "trace": "replay a production trace with its arrival times: Azure 2023 code/conv, Mooncake (prefix hashes), ServeGen rate windows",
}

_BUILDERS: dict[str, Callable[[Any, TokenKit], list]] = {
    "agentic": build_agentic_sessions,
    "chat": build_chat,
    "rag": build_rag,
    "summarization": build_summarization,
    "code": build_code,
    "random": build_random,
    "trace": build_trace,
}

# keyword → (spec field, kinds it applies to; None = all)
_OVERRIDES: dict[str, tuple[str, tuple[str, ...] | None]] = {
    "seed": ("seed", None),
    "num_requests": ("num_requests", None),
    "scale": ("scale", None),
    "request_rate": ("request_rate", ("agentic", "chat", "rag", "summarization", "code", "random")),
    "burstiness": ("burstiness", ("agentic", "chat", "rag", "summarization", "code", "random")),
    "max_concurrency": ("max_concurrency", None),
    "api": ("api", None),
    "input_len": ("input_len", ("random",)),
    "output_len": ("output_len", ("random",)),
    "range_ratio": ("range_ratio", ("random",)),
    "trace": ("trace", ("trace",)),
    "time_scale": ("time_scale", ("trace",)),
}


# Values of inapplicable options that are ignored instead of rejected (the neutral defaults
# of the original ``build_workload`` signature, which callers may pass for every workload).
_NEUTRAL: dict[str, Any] = {"request_rate": math.inf, "burstiness": 1.0, "range_ratio": 0.0, "time_scale": 1.0}


def list_workloads() -> list[tuple[str, str]]:
    """``(name, one-line description)`` of every workload, the default (agentic) first."""
    return list(_DESCRIPTIONS.items())


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, float) and math.isinf(obj):
        return "inf"
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    return obj


def resolve_spec(name: str, spec_file: Path | None = None, **overrides: Any) -> WorkloadSpec:
    """The validated spec for ``name``: kind defaults < ``spec_file`` values < non-None overrides.

    Raises :class:`WorkloadError` for an unknown name, a spec file of another kind, an
    override that does not apply to this kind (e.g. ``input_len`` for agentic), or invalid values.
    """
    if name not in _BUILDERS:
        raise WorkloadError(f"unknown workload {name!r}: choose one of {', '.join(_BUILDERS)}")
    values: dict[str, Any] = {}
    if spec_file is not None:
        values = load_spec_file(Path(spec_file))
        kind = values.pop("kind", name)
        if kind != name:
            raise WorkloadError(f"{spec_file} describes a {kind!r} workload, not {name!r}: pass --workload {kind}")
    for key, value in overrides.items():
        if value is None:
            continue
        if key not in _OVERRIDES:
            raise WorkloadError(f"unknown workload option {key!r}")
        field, kinds = _OVERRIDES[key]
        if kinds is not None and name not in kinds:
            if key in _NEUTRAL and value == _NEUTRAL[key]:
                continue  # a caller passing the documented neutral default everywhere

            flag = "--" + key.replace("_", "-")
            raise WorkloadError(f"{flag} does not apply to the {name} workload (it applies to: {', '.join(kinds)})")
        values[field] = value
    return make_spec(name, values)


def build_workload(
    name: str,
    tokenizer: Any,
    *,
    seed: int | None = None,
    num_requests: int | None = None,
    scale: float | None = None,
    request_rate: float | None = None,
    burstiness: float | None = None,
    max_concurrency: int | None = None,
    input_len: int | None = None,
    output_len: int | None = None,
    range_ratio: float | None = None,
    api: str | None = None,
    trace: str | None = None,
    time_scale: float | None = None,
    spec_file: Path | None = None,
    exclude_token_ids: Iterable[int] | None = None,
    with_stats: bool = True,
) -> Workload:
    """Build the named workload on ``tokenizer`` (a Hugging Face tokenizer or a :class:`TokenKit`).

    Keywords left at None keep the spec's value (YAML ``spec_file``, else the kind's default:
    seed 0; agentic: 4 sessions × 3 turns (1 branching), scale 0.1, 0.5 sessions/s Poisson; ...).
    ``num_requests`` bounds the number of *requests* (for agentic: turns, branches included;
    sessions are added until the planned turns total exactly num_requests).
    ``request_rate``: requests/s (agentic: session starts/s), inf = all at once.
    ``exclude_token_ids``: token ids never used in synthetic text.
    ``with_stats``: compute ``Workload.stats`` (an offline dry run, ~0.1 s for the default agentic).

    Returns a :class:`Workload` with ``spec`` (every parameter, seed and scale, JSON-safe:
    inf → "inf"; the nominal rate is ``spec["request_rate"]``), ``offered_rate`` (sessions/s
    of the generated start schedule, ``(n-1)/(last start - first start)``, the formula the
    metrics use for the achieved rate; inf = all at once), ``max_concurrency`` and
    ``stats``. Raises :class:`WorkloadError` (a ``ValueError``; one line naming the fix) for an
    unknown name, bad values, or malformed data/spec files.
    """
    spec = resolve_spec(
        name,
        spec_file,
        seed=seed,
        num_requests=num_requests,
        scale=scale,
        request_rate=request_rate,
        burstiness=burstiness,
        max_concurrency=max_concurrency,
        input_len=input_len,
        output_len=output_len,
        range_ratio=range_ratio,
        api=api,
        trace=trace,
        time_scale=time_scale,
    )
    kit = as_kit(tokenizer, exclude_token_ids)
    try:
        sessions = _BUILDERS[name](spec, kit)
    except ValueError as exc:  # arrival-process errors are ValueErrors with a one-line message
        if isinstance(exc, WorkloadError):
            raise
        raise WorkloadError(str(exc)) from None
    if not sessions:
        raise WorkloadError(f"the {name} workload produced no requests: raise --num-requests or check the trace")
    # The generated schedule's rate (not the nominal one: with few sessions a Poisson draw is
    # far from it), so the metrics' achieved-vs-offered check measures the client only.
    nominal = None if name == "trace" else spec.request_rate
    offered = schedule_rate([s.start_offset_s for s in sessions], nominal)
    manifest = spec.manifest()
    manifest["tokenizer"] = getattr(kit.tokenizer, "name_or_path", type(kit.tokenizer).__name__)
    if kit.exclude_token_ids:
        manifest["exclude_token_ids"] = sorted(kit.exclude_token_ids)
    stats = _jsonable(workload_stats(sessions)) if with_stats else {}
    if name == "agentic" and with_stats:
        stats["note"] = "replies are not known offline: statistics use the trace's recorded replies (cut to max_tokens)"
    return Workload(
        name=name,
        sessions=sessions,
        spec=manifest,
        offered_rate=offered,
        max_concurrency=spec.max_concurrency,
        stats=stats,
    )


WARMUP_INPUT_TOKENS = 64
WARMUP_OUTPUT_TOKENS = 8


def build_warmup(tokenizer: Any, n: int, *, seed: int, api: str = "completions") -> list[RequestSpec]:
    """``n`` warm-up requests that share no prefix with any workload.

    Each prompt starts with the text ``"[warm-up i/n]"`` (every workload prompt starts with a
    word token, a chat template token or real text) followed by random word tokens from a
    stream disjoint from the workloads' (``default_rng([seed, 0x5741524D])``);
    ``WARMUP_INPUT_TOKENS`` tokens (completions), ``WARMUP_OUTPUT_TOKENS`` output tokens.
    Raises :class:`WorkloadError` for ``n < 0``.
    """
    if n < 0:
        raise WorkloadError(f"number of warm-up requests must be >= 0, got {n}")
    kit = as_kit(tokenizer)
    rng = np.random.default_rng([seed, 0x5741524D])
    out = []
    for i in range(n):
        head = kit.encode(f"[warm-up {i + 1}/{n}]")
        prompt, messages, ids = kit.build_payload(
            head + kit.random_words(rng, WARMUP_INPUT_TOKENS), WARMUP_INPUT_TOKENS, api, rng, what="warm-up prompt"
        )
        out.append(
            RequestSpec(
                request_id=f"warmup-{i:03d}",
                max_tokens=WARMUP_OUTPUT_TOKENS,
                prompt=prompt,
                messages=messages,
                prompt_token_ids=ids,
                input_tokens_expected=len(ids),
                ignore_eos=True,
            )
        )
    return out
