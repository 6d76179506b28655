"""An engine's session and a trial: what happens around the one measurement step.

A **session** (:func:`open_session`) is one engine up for a while: taken from the
:class:`~harness.app.core.startup.EngineStarter` (started, or thawed when it was started ahead
of its turn), its facts recorded (display name, start-up time, effective configuration, install
size), optionally its effective settings read (``--parity``), then warmed up with requests
that share no prefix with any workload, sent together with the greedy output-equivalence
prompts when they are asked for; the engine is stopped when the session ends. ``bench search``
measures all of an engine's probes in one session.

A **trial** (:func:`run_trial`) is one session with one measurement in it
(:func:`harness.app.core.measure.measure`), then, the first time, the feature probes outside
the measured phase: one engine's turn in one repeat of ``bench run``, run in this process or,
as is, on a Ray node (:mod:`harness.app.executors.ray_trial`).
"""

from __future__ import annotations

import asyncio
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

from rich.markup import escape

from adapters.base import Endpoint
from adapters.resources import install_facts
from results.schema import EffectiveSettings, EngineFacts, FeatureProbe, Manifest
from workloads.base import Workload

from harness.app.core.measure import MeasureOptions, Measurement, MeasurementSink, measure, target_of
from harness.app.core.plan import EnginePlan
from harness.app.core.progress import engine_progress
from harness.app.core.startup import EngineStarter
from harness.loadgen.equivalence import EQUIVALENCE_PROMPTS, equivalence_requests
from harness.loadgen.runner import Runner, RunnerOptions


@dataclass(frozen=True)
class TrialSpec:
    """What every session and trial of a job shares: ``measure`` (how to measure), ``warmup``
    (warm-up requests per session, sent at once), ``warmup_seed`` (their seed), ``equivalence``
    (send the greedy equivalence prompts in the first session), ``feature_probes`` (probe the
    features after the first measurement), ``repeats`` (planned, for labels), ``hardware`` (the
    kind detected, for reading effective settings), ``read_effective`` (read them at all)."""

    measure: MeasureOptions
    warmup: int = 2
    warmup_seed: int = 7919
    equivalence: bool = False
    feature_probes: bool = False
    repeats: int = 1
    hardware: str = "cpu"
    read_effective: bool = True


@dataclass
class Session:
    """An engine up for its turn: ``endpoint``, ``startup_s`` (s, from launch to healthy),
    ``parallel`` (its start-up overlapped another's), ``effective`` (its settings as it reports
    them, first session only), ``equivalence`` (its greedy outputs, None = not checked)."""

    name: str
    endpoint: Endpoint
    startup_s: float
    parallel: bool
    effective: EffectiveSettings | None = None
    equivalence: list[str] | None = None


@dataclass
class TrialOutcome:
    """One trial: its measurement and the session's facts (see :class:`Session`), the engine's
    manifest entry, and the feature probes' verdicts (first trial only)."""

    measurement: Measurement
    startup_s: float
    parallel: bool
    display_name: str
    manifest_entry: EngineFacts = field(default_factory=EngineFacts)
    effective: EffectiveSettings | None = None
    equivalence: list[str] | None = None
    feature_probes: dict[str, FeatureProbe] = field(default_factory=dict)


def engine_facts(endpoint: Endpoint, startup_s: float, parallel: bool) -> EngineFacts:
    """The engine's manifest entry: display name, start-up (s), whether it started alongside
    others, its effective configuration (whose ``display_name`` and ``startup_s``, a launched
    server's own, win) and the size on disk of its environment."""
    return EngineFacts.model_validate({"display_name": endpoint.display_name, "startup_s": round(startup_s, 2),
                                       "startup_parallel": parallel, **endpoint.effective_config,
                                       **install_facts(endpoint.effective_config)})


@contextmanager
def open_session(plan: EnginePlan, starter: EngineStarter, spec: TrialSpec, sink: MeasurementSink, console: Any,
                 *, tokenizer: Any, workload_name: str, repeat: int = 0) -> Iterator[Session]:
    """Engine ``plan``'s session (module docstring) in repeat ``repeat`` (the first, 0, reads
    the effective settings and sends the equivalence prompts); warm-up records go to ``sink``
    (phase ``warmup``, labelled ``workload_name`` and ``repeat``, never in metrics). Raises the
    :class:`EngineError` of a failed start; the engine is stopped on exit."""
    name, first = plan.name, repeat == 0
    resuming = starter.holds(name) and not starter.failed(name) and starter.slots > 1
    what = ("resuming" if resuming else "starting") if plan.starts_process else "connecting"
    console.print(f"[bold]{escape(name)}[/]: {what} …")
    with starter.take(name) as (ep, startup_s):
        parallel = starter.parallel(name)
        sink.add_engine_facts(name, engine_facts(ep, startup_s, parallel))
        session = Session(name, ep, startup_s, parallel)
        if first and spec.read_effective:  # what the engine reports it runs with, after health, before any request
            from adapters.effective import read_effective

            session.effective = read_effective(name, ep, spec.hardware)
        warm = Runner(target_of(ep, spec.measure.ignore_eos), name, workload_name, sink.add_record, None,
                      RunnerOptions(spec.measure.max_concurrency, spec.measure.request_timeout_s, repeat=repeat))
        session.equivalence = asyncio.run(_warm_up(warm, tokenizer, spec, first and spec.equivalence))
        yield session


async def _warm_up(warm: Runner, tokenizer: Any, spec: TrialSpec, equivalence: bool) -> list[str] | None:
    """Warm-up requests through ``warm`` (phase ``warmup``), sent together with the greedy
    equivalence prompts when ``equivalence`` (never stored); returns the equivalence outputs
    (None = not checked)."""
    from workloads.registry import build_warmup

    jobs = []
    if spec.warmup:  # all at once: one batch on a continuous-batching engine, a couple on a static one
        jobs.append(warm.warmup(build_warmup(tokenizer, spec.warmup, seed=spec.warmup_seed), concurrency=spec.warmup))
    if equivalence:
        eq = Runner(warm.target, warm.engine, "equivalence", lambda r: None, None,
                    RunnerOptions(None, spec.measure.request_timeout_s))
        jobs.append(eq.warmup(equivalence_requests(), concurrency=len(EQUIVALENCE_PROMPTS)))
    results = await asyncio.gather(*jobs)
    if not equivalence:
        return None
    return [r.output_text or "" for r in sorted(results[-1], key=lambda r: r.request_id)]


def run_trial(plan: EnginePlan, starter: EngineStarter, sink: MeasurementSink, console: Any, *, repeat: int,
              spec: TrialSpec, workload: Workload, tokenizer: Any, manifest: Manifest) -> TrialOutcome:
    """Engine ``plan``'s turn in repeat ``repeat`` (module docstring; a trial body,
    :mod:`harness.app.core.executor`): a session, one measurement of ``workload`` with a
    progress bar, the feature probes after the first one. ``manifest``: the run's (read only:
    the model's length for the longest feature probe).
    Raises the :class:`EngineError` of a failed start or a crash; a KeyboardInterrupt after the
    finished requests reached ``sink``."""
    name, first = plan.name, repeat == 0
    label = name if spec.repeats == 1 else f"{name} (repeat {repeat + 1}/{spec.repeats})"
    with open_session(plan, starter, spec, sink, console, tokenizer=tokenizer, workload_name=workload.name,
                      repeat=repeat) as session:
        progress, finish = engine_progress(console, label, workload)
        try:
            measured = measure(name, session.endpoint, workload, repeat, sink, tokenizer=tokenizer,
                               options=spec.measure, on_progress=progress)
        finally:
            finish()
        probes: dict[str, FeatureProbe] = {}
        if first and spec.feature_probes:  # outside the measured phase, after its counters were read
            from harness.app.core.feature_phase import probe_phase

            probes = probe_phase(console, name, session.endpoint, target_of(session.endpoint, spec.measure.ignore_eos),
                                 tokenizer, manifest, spec.measure.request_timeout_s)
        ep = session.endpoint
        return TrialOutcome(measurement=measured, startup_s=session.startup_s, parallel=session.parallel,
                            display_name=ep.display_name, manifest_entry=engine_facts(ep, session.startup_s, session.parallel),
                            effective=session.effective, equivalence=session.equivalence, feature_probes=probes)


def trial_spec(cfg: Any, hardware_kind: str, **override: Any) -> TrialSpec:
    """The :class:`TrialSpec` of a job's settings ``cfg`` (the run settings: SLOs, timeouts,
    client workers, warm-up, checks) on ``hardware_kind``; ``override`` replaces fields."""
    options = MeasureOptions(slos=tuple(cfg.slos), request_timeout_s=cfg.request_timeout_s,
                             max_concurrency=cfg.workload.max_concurrency, client_workers=cfg.client_workers,
                             ignore_eos=cfg.ignore_eos)
    fields: dict[str, Any] = dict(measure=options, warmup=cfg.warmup, warmup_seed=(cfg.workload.seed or 0) + 7919,
                                  equivalence=cfg.check_equivalence, feature_probes=cfg.feature_probes,
                                  repeats=cfg.repeats, hardware=hardware_kind)
    return TrialSpec(**{**fields, **override})
