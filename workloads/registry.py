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

from workloads.agent_replay import build_replay_sessions, trace_note
from workloads.agentic import build_agentic_sessions
from workloads.arrivals import count_within, ramp_count_within
from workloads.base import RequestSpec, RunTiming, Workload
from workloads.errors import WorkloadError
from workloads.options import (DEFAULT_DRAIN_S, MAX_REQUESTS, WorkloadOptions, check_spec_bounds, check_timing, flag,
                               is_neutral, parse_options)
from workloads.salt import resolve_salt, salt_single_sessions
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

def _agentic(spec: Any, kit: TokenKit) -> list:
    """The shipped trajectories, or the user's own trace (``--trace``)."""
    return build_replay_sessions(spec, kit) if spec.trace is not None else build_agentic_sessions(spec, kit)


_BUILDERS: dict[str, Callable[[Any, TokenKit], list]] = {
    "agentic": _agentic,
    "chat": build_chat,
    "rag": build_rag,
    "summarization": build_summarization,
    "code": build_code,
    "random": build_random,
    "trace": build_trace,
}

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


def resolve_spec(name: str | WorkloadOptions, spec_file: Path | None = None, **overrides: Any) -> WorkloadSpec:
    """The validated spec: kind defaults < the YAML spec file's values < options given.

    ``name``: a :class:`WorkloadOptions` (then ``spec_file`` and ``overrides`` must be empty),
    or a workload name with ``spec_file`` and the options as keywords.
    Raises :class:`WorkloadError` for an unknown name, a spec file of another kind, an
    option that does not apply to this kind (e.g. ``input_len`` for agentic), or invalid values.
    """
    opts = name if isinstance(name, WorkloadOptions) else parse_options(name=name, spec_file=spec_file, **overrides)
    if opts.name not in _BUILDERS:
        raise WorkloadError(f"unknown workload {opts.name!r}: choose one of {', '.join(_BUILDERS)}")
    values: dict[str, Any] = {}
    if opts.spec_file is not None:
        values = load_spec_file(Path(opts.spec_file))
        kind = values.pop("kind", opts.name)
        if kind != opts.name:
            raise WorkloadError(f"{opts.spec_file} describes a {kind!r} workload, not {opts.name!r}: pass --workload {kind}")
    for key, value in opts.overrides().items():
        kinds = WorkloadOptions.kinds(key)
        if kinds is not None and opts.name not in kinds:
            if is_neutral(key, value):
                continue  # a caller passing the documented neutral default everywhere
            raise WorkloadError(f"{flag(key)} does not apply to the {opts.name} workload (it applies to: {', '.join(kinds)})")
        values[key] = value
    spec = make_spec(opts.name, values)
    check_timing(spec)
    apply_duration(spec)
    check_spec_bounds(spec)  # a spec file's values too: a huge one would exhaust memory while building
    return spec


def apply_duration(spec: WorkloadSpec) -> None:
    """Size a duration-based spec's schedule to its duration (in place; nothing without
    ``duration_s``): ``drain_timeout_s`` defaults to :data:`workloads.options.DEFAULT_DRAIN_S`;
    at a finite rate (or a ramp) the arrivals are as many as fall within the duration at that
    rate (:func:`workloads.arrivals.count_within`: ``ceil(duration × rate)``; a ramp:
    :func:`workloads.arrivals.ramp_count_within`), written to ``num_requests`` (agentic:
    ``num_sessions``, the session starts), capped by a count the user gave (whichever ends
    first). An agentic spec with ``num_requests`` (turns), a trace, and an unlimited rate (a
    pool of ``-n`` requests) keep their counts: the runner stops sending when the time is up."""
    if spec.duration_s is None:
        return
    if spec.drain_timeout_s is None:
        spec.drain_timeout_s = DEFAULT_DRAIN_S
    if spec.kind == "trace" or (spec.kind == "agentic" and spec.num_requests is not None):
        return
    ramp = spec.ramp
    if ramp is not None:
        n = ramp_count_within(spec.duration_s, strategy=ramp[0], start_rps=ramp[1], end_rps=ramp[2],
                              burstiness=spec.burstiness, seed=spec.seed, process=spec.arrival, limit=MAX_REQUESTS)
    elif math.isfinite(spec.request_rate):
        n = count_within(spec.duration_s, spec.request_rate)
    else:
        return
    field = "num_sessions" if spec.kind == "agentic" else "num_requests"
    given = getattr(spec, field) if field in spec.model_fields_set else None
    setattr(spec, field, n if given is None else min(n, given))


def run_timing(spec: WorkloadSpec, sessions: list[Any]) -> RunTiming | None:
    """The runner's clock for ``spec`` and its built ``sessions`` (the clock starts at their
    first arrival): None for a count-based spec."""
    if spec.duration_s is None:
        return None
    drain = DEFAULT_DRAIN_S if spec.drain_timeout_s is None else spec.drain_timeout_s
    first = min((s.start_offset_s for s in sessions), default=0.0)
    return RunTiming(spec.duration_s, drain, spec.warmup_window_s or 0.0, spec.cooldown_window_s or 0.0, float(first))


def build_workload(
    name: str | WorkloadOptions,
    tokenizer: Any,
    *,
    exclude_token_ids: Iterable[int] | None = None,
    with_stats: bool = True,
    **options: Any,
) -> Workload:
    """Build a workload on ``tokenizer`` (a Hugging Face tokenizer or a :class:`TokenKit`).

    ``name``: a validated :class:`WorkloadOptions`, or a workload name with the options as
    keywords (``seed``, ``num_requests``, ``request_rate`` ... ``spec_file``: the fields of
    :class:`WorkloadOptions`, validated here). Options left at None keep the spec's value (YAML
    ``spec_file``, else the kind's default: seed 0; agentic: 4 sessions × 3 turns (1
    branching), scale 0.1, 0.5 sessions/s Poisson; ...).
    ``num_requests`` bounds the number of *requests* (for agentic: turns, branches included;
    sessions are added until the planned turns total exactly num_requests).
    ``request_rate``: requests/s (agentic: session starts/s), inf = all at once.
    ``exclude_token_ids``: token ids never used in synthetic text.
    ``with_stats``: compute ``Workload.stats`` (an offline dry run, ~0.1 s for the default agentic).
    ``prompt_salt``: text put at the start of every session's first prompt (:mod:`workloads.salt`);
    ``auto``/``run`` draws a random one here, once, and ``spec["prompt_salt"]`` records the
    salt used (None: no salt, the default).

    Returns a :class:`Workload` with ``spec`` (every parameter, seed and scale, JSON-safe:
    inf → "inf"; the requested rate is ``spec["request_rate"]``), ``requested_rate`` (that
    rate; None for a trace), ``offered_rate`` (sessions/s the schedule offers: the requested
    rate, since drawn schedules are rescaled to it — vLLM's convention, see
    :mod:`workloads.arrivals`; a trace's own rate), ``schedule_rate`` (the generated start
    schedule's ``(n-1)/(last start - first start)``, the formula the metrics use for the
    achieved rate; equal to the requested rate to float error except for a trace; inf = all at
    once), ``max_concurrency`` and ``stats``. Raises :class:`WorkloadError` (a ``ValueError``;
    one line naming the fix) for an unknown name, bad values, or malformed data/spec files.
    """
    if isinstance(name, WorkloadOptions):
        if options:
            raise TypeError("build_workload: pass either WorkloadOptions or keyword options, not both")
        opts = name
    else:
        opts = parse_options(name=name, **options)
    spec = resolve_spec(opts)
    name = opts.name
    kit = as_kit(tokenizer, exclude_token_ids)
    spec.prompt_salt = resolve_salt(spec.prompt_salt)  # "auto": drawn once, here, for the whole run
    try:
        sessions = _BUILDERS[name](spec, kit)
        salt_single_sessions(sessions, spec.prompt_salt, kit)  # agentic: its builder salted the system prompt
    except ValueError as exc:  # arrival-process errors are ValueErrors with a one-line message
        if isinstance(exc, WorkloadError):
            raise
        raise WorkloadError(str(exc)) from None
    if not sessions:
        raise WorkloadError(f"the {name} workload produced no requests: raise --num-requests or check the trace")
    # Drawn schedules are rescaled to offer the requested rate exactly (by the metrics' own
    # formula), so the offered rate is the requested one: the same float for every seed, and
    # the achieved-vs-offered check measures the client only. A trace offers its own rate.
    requested = None if name == "trace" or spec.ramp is not None else spec.request_rate  # a ramp offers its schedule's
    drawn = schedule_rate([s.start_offset_s for s in sessions], requested)
    offered = drawn if requested is None else requested
    manifest = spec.manifest()
    manifest["tokenizer"] = getattr(kit.tokenizer, "name_or_path", type(kit.tokenizer).__name__)
    if kit.exclude_token_ids:
        manifest["exclude_token_ids"] = sorted(kit.exclude_token_ids)
    stats = _jsonable(workload_stats(sessions)) if with_stats else {}
    if name == "agentic" and with_stats:
        stats["note"] = "replies are not known offline: statistics use the trace's recorded replies (cut to max_tokens)"
        if getattr(spec, "trace", None) is not None:
            stats["note"] = f"{trace_note(spec)}. {stats['note']}"
    return Workload(
        name=name,
        sessions=sessions,
        spec=manifest,
        offered_rate=offered,
        max_concurrency=spec.max_concurrency,
        stats=stats,
        requested_rate=requested,
        schedule_rate=drawn,
        timing=run_timing(spec, sessions),
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
